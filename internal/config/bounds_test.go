package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/decode"
)

// A file whose aliases expand without bound is refused by Parse (and so by `manifold
// validate`), with the line and the limit named. At de322de Parse accepted both: a
// merge it had seen adds nothing to its own walk, but the store expands every alias.
func TestAliasBombIsRefused(t *testing.T) {
	for file, want := range map[string]string{
		"testdata/invalid-merge-bomb.yaml":  "testdata/invalid-merge-bomb.yaml:10: too many aliases: they expand to more than 65536 nodes beyond those written (the limit), at alias *d",
		"testdata/invalid-merge-cycle.yaml": "testdata/invalid-merge-cycle.yaml:5: alias *n refers to a node that contains it: it would expand forever",
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(file, data); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", file, err, want)
		}
	}
	deep := hdr + "services:\n  - name: web\n    vip: 198.51.100.10\n    health: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "\n"
	if _, err := Parse("t.yaml", []byte(deep)); err == nil || err.Error() != "t.yaml:8: nested more than 64 levels deep (the limit)" {
		t.Errorf("nested 72 deep: %v", err)
	}
}

// A file larger than decode.MaxFileSize is refused before it is read whole.
func TestLargeFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(decode.MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := path + ": the file is larger than the limit of 33554432 bytes"
	if _, err := Load(path); err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// node.name keys the fleet's records and labels metrics and logs: 1..253 of a-z A-Z
// 0-9 . _ - (a Kubernetes Node's name fits). At de322de NUL, 100 KB and bidi
// characters were accepted.
func TestNodeName(t *testing.T) {
	file := func(name string) string {
		return "node:\n  name: \"" + name + "\"\n  interfaces: [eth0]\n  address: 10.0.0.11\n"
	}
	for _, ok := range []string{"lb1", "worker-1.eu-west.example.com", "a_b", strings.Repeat("n", 253)} {
		if _, err := Parse("t.yaml", []byte(file(ok))); err != nil {
			t.Errorf("%.40q: %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		`lb\0`:                       `t.yaml:2: node.name: "lb\x00" is not a valid name (1..253 of a-z A-Z 0-9 . _ -)`,
		`lb\u202egnp.exe`:            `t.yaml:2: node.name: "lb\u202egnp.exe" is not a valid name (1..253 of a-z A-Z 0-9 . _ -)`,
		strings.Repeat("n", 254):     `t.yaml:2: node.name: "` + strings.Repeat("n", 40) + `"... is not a valid name (1..253 of a-z A-Z 0-9 . _ -)`,
		strings.Repeat("n", 100_000): `t.yaml:2: node.name: "` + strings.Repeat("n", 40) + `"... is not a valid name (1..253 of a-z A-Z 0-9 . _ -)`,
		"lb 1":                       `t.yaml:2: node.name: "lb 1" is not a valid name (1..253 of a-z A-Z 0-9 . _ -)`,
		"":                           "t.yaml:2: node.name: must not be empty",
	} {
		if _, err := Parse("t.yaml", []byte(file(name))); err == nil || err.Error() != want {
			t.Errorf("%.40q: %v,\nwant %s", name, err, want)
		}
	}
}
