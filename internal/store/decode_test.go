package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file whose aliases expand without bound is refused when the node opens it, and
// the tree the API reads and edits (parseTree) refuses it too, before expanding
// anything. At de322de Open accepted both files; Redacted (GET /api/v1/config) of the
// bomb took a second and a gigabyte, and of the cycle overflowed the stack, which
// kills the process.
func TestAliasBombsAreRefused(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"invalid-merge-bomb.yaml", "more than 65536 nodes beyond those written (the limit)"},
		{"invalid-merge-cycle.yaml", "alias *n refers to a node that contains it"},
	} {
		data, err := os.ReadFile(filepath.Join("../config/testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), c.file)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(path); err == nil || !strings.Contains(err.Error(), c.want) {
			if err == nil {
				s.Redacted() // what the API's read did with it
			}
			t.Errorf("Open(%s): %v, want an error with %q", c.file, err, c.want)
		}
		if _, err := parseTree(data); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTree(%s): %v, want an error with %q", c.file, err, c.want)
		}
	}
}
