package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
)

// node.api_token_file: read as a secret (a warning naming a file others may read), one
// word of at least 16 characters.
func TestAPITokenFile(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, contents string
		mode           os.FileMode
		token, err     string
		warns          bool
	}{
		{"good", "0123456789abcdef0123\n", 0o600, "0123456789abcdef0123", "", false},
		{"readable by others", "0123456789abcdef0123\n", 0o644, "0123456789abcdef0123", "", true},
		{"short", "s3cret\n", 0o600, "", "the token has 6 characters; it needs at least 16", false},
		{"empty", "\n", 0o600, "", "is empty", false},
		{"two words", "0123456789abcdef0123 x\n", 0o600, "", "more than one word", false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.WriteFile(path, []byte(c.contents), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, c.mode); err != nil { // past the umask
			t.Fatal(err)
		}
		var logged bytes.Buffer
		token, err := apiToken(&config.Node{APITokenFile: path}, slog.New(slog.NewTextHandler(&logged, nil)))
		switch {
		case c.err == "" && (err != nil || token != c.token):
			t.Errorf("%s: %q %v, want %q", c.name, token, err, c.token)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), path)):
			t.Errorf("%s: %q %v, want an error naming the file with %q", c.name, token, err, c.err)
		}
		if warned := strings.Contains(logged.String(), "readable by others") && strings.Contains(logged.String(), path); warned != c.warns {
			t.Errorf("%s: warned %v, want %v: %s", c.name, warned, c.warns, logged.String())
		}
	}
}

// run refuses an API beyond loopback without a token or TLS before it touches the
// host, with validate's message; api_insecure_remote is the way past it.
func TestRunRefusesAnOpenRemoteAPI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lb1.yaml")
	if err := os.WriteFile(path, []byte("node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\n  api: 0.0.0.0:9100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(t.Context(), path, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `node.api: "0.0.0.0:9100" listens beyond loopback without a token`) ||
		!strings.Contains(err.Error(), "api_insecure_remote: true") {
		t.Fatalf("run with an open API on 0.0.0.0: %v, want validate's refusal", err)
	}
}
