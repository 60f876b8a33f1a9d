package link

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A private key that others can read is used, with a warning naming the file; one
// only its owner reads, without.
func TestPrivateKeyFileExposed(t *testing.T) {
	const key = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n" // wg genkey
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o644, true}} {
		path := filepath.Join(t.TempDir(), "private.key")
		if err := os.WriteFile(path, []byte(key), c.mode); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, _, err := readPrivateKey("link.yaml", path, slog.New(slog.NewTextHandler(&out, nil))); err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(out.String(), "file="+path); warned != c.warn {
			t.Errorf("mode %v: warned %v (%q), want %v", c.mode, warned, out.String(), c.warn)
		}
	}
}
