package secretfile

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadWarnsOfAnExposedFile(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o400, false}, {0o640, true}, {0o644, true}, {0o602, true}} {
		path := filepath.Join(dir, "token")
		if err := os.WriteFile(path, []byte("s3cret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, c.mode); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		data, err := Read(path, slog.New(slog.NewTextHandler(&out, nil)))
		if err != nil || string(data) != "s3cret" {
			t.Fatalf("mode %v: %q, %v", c.mode, data, err)
		}
		warned := strings.Contains(out.String(), "file="+path)
		if warned != c.warn {
			t.Errorf("mode %v: warned %v (%q), want %v", c.mode, warned, out.String(), c.warn)
		}
	}
}

func TestReadRefusesAHugeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, MaxSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path, nil); err == nil {
		t.Fatal("a file past MaxSize was read")
	}
}
