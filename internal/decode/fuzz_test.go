package decode

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// seeds adds the repository's YAML files (config examples and testdata) and a few
// hostile shapes to a fuzz target's corpus.
func seeds(f *testing.F, globs ...string) {
	for _, g := range globs {
		files, _ := filepath.Glob(g)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, s := range []string{
		"", "a: &a {<<: *a}\n", "a: &a [*a]\n", "a: &x [1]\nb: [*x, *x, *x]\n",
		"a0: &a0 {k: v}\na1: &a1 {<<: [*a0, *a0, *a0]}\na2: {<<: [*a1, *a1, *a1]}\n",
		strings.Repeat("[", 70) + strings.Repeat("]", 70), `{"a": [1, 2.5, "x", true, null, {"b": {}}]}`,
	} {
		f.Add([]byte(s))
	}
}

// FuzzYAML: any input is a tree within the bounds or an error, never a panic; the tree
// expanded (as the store expands it) stays within MaxAliasNodes more nodes and
// MaxDepth levels; written out and read back it is read the same.
func FuzzYAML(f *testing.F) {
	seeds(f, "../config/testdata/*.yaml", "../../deploy/examples/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := YAML(data)
		if err != nil {
			var de *Error
			if errors.As(err, &de) && de.Msg == "" {
				t.Fatalf("empty message: %#v", de)
			}
			return
		}
		written := count(doc, map[*yaml.Node]bool{})
		expanded, depth := expand(t, doc, 0, written+MaxAliasNodes)
		if n := count(expanded, map[*yaml.Node]bool{}); n > written+MaxAliasNodes {
			t.Fatalf("%d nodes written expand to %d", written, n)
		}
		if depth > MaxDepth {
			t.Fatalf("expanded, the tree is %d deep", depth)
		}
		out := encode(t, expanded)
		again, err := YAML(out)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("written out, the document does not read back: %v\n%s", err, out)
		}
		if err == nil && !bytes.Equal(encode(t, again), out) {
			t.Fatalf("read back, the document is written differently:\n%s\n---\n%s", out, encode(t, again))
		}
	})
}

// FuzzJSON: any body is a tree within MaxDepth or an error, never a panic; the tree
// written as YAML reads back the same.
func FuzzJSON(f *testing.F) {
	seeds(f)
	f.Add([]byte(`{"name": "web", "vip": "198.51.100.10", "backends": [{"address": "10.0.1.1", "weight": 3}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := JSON(data)
		if err != nil {
			return
		}
		if _, depth := expand(t, n, 0, 1<<30); depth > MaxDepth {
			t.Fatalf("a tree %d deep", depth)
		}
		doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{n}}
		out := encode(t, doc)
		again, err := YAML(out)
		if err != nil {
			t.Fatalf("written as YAML, the body does not read back: %v\n%s", err, out)
		}
		if !bytes.Equal(encode(t, again), out) {
			t.Fatalf("read back, the body is written differently:\n%s\n---\n%s", out, encode(t, again))
		}
	})
}

// count counts distinct nodes, not following aliases.
func count(n *yaml.Node, seen map[*yaml.Node]bool) int {
	if seen[n] {
		return 0
	}
	seen[n] = true
	c := 1
	for _, k := range n.Content {
		c += count(k, seen)
	}
	return c
}

// expand copies a tree with its aliases replaced by copies of their targets (what the
// store does), failing the test past budget nodes; it returns the copy and its depth
// in mappings and lists.
func expand(t *testing.T, n *yaml.Node, depth, limit int) (*yaml.Node, int) {
	t.Helper()
	budget := &limit
	var walk func(n *yaml.Node, depth int) (*yaml.Node, int)
	walk = func(n *yaml.Node, depth int) (*yaml.Node, int) {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		if *budget--; *budget < 0 {
			t.Fatal("the aliases expand past the limit")
		}
		if depth > MaxDepth+1 {
			t.Fatalf("nested deeper than %d", MaxDepth)
		}
		c := *n
		c.Anchor, c.Content = "", make([]*yaml.Node, len(n.Content))
		inner := depth
		if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
			inner++
		}
		deepest := inner
		for i, k := range n.Content {
			var d int
			c.Content[i], d = walk(k, inner)
			deepest = max(deepest, d)
		}
		return &c, deepest
	}
	return walk(n, depth)
}

func encode(t *testing.T, doc *yaml.Node) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil // yaml.v3 refuses to write some trees it read (an error, not a crash)
	}
	enc.Close()
	return b.Bytes()
}
