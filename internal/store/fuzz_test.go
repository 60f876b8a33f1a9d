package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
)

// fuzzStore opens a copy of testdata/node.yaml for a fuzz target.
func fuzzStore(f *testing.F) *Store {
	data, err := os.ReadFile("testdata/node.yaml")
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(f.TempDir(), "node.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		f.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		f.Fatal(err)
	}
	return s
}

// checkChange asserts what a write's outcome must be: a *Error with problems, or a
// change whose file parses to exactly the change's config.
func checkChange(t *testing.T, path string, ch *Change, err error) {
	t.Helper()
	if err != nil {
		var se *Error
		if !errors.As(err, &se) || len(se.Problems) == 0 {
			t.Fatalf("error is not a *store.Error with problems: %#v", err)
		}
		return
	}
	cfg, perr := config.Parse(path, ch.data)
	if perr != nil || !reflect.DeepEqual(cfg, ch.Config) {
		t.Fatalf("the change's file does not parse to its config: %v\n%s", perr, ch.data)
	}
}

// FuzzBody: any API write body (a service for PUT, {"weight": N}) gives a change whose
// file is what it says or a *store.Error, never a panic, however it nests (the API's
// JSON reader is decode.JSON). Nothing is committed: the store is never changed.
func FuzzBody(f *testing.F) {
	s := fuzzStore(f)
	for _, b := range []string{
		`{"vip": "198.51.100.20", "port": 443, "backends": [{"address": "10.0.2.1", "weight": 2}], "health": {"kind": "http", "port": 80, "path": "/"}}`,
		`{"weight": 7}`, `{"weight": null}`, `{"vip": [[[[[]]]]]}`, `{"name": "web", "vip": "198.51.100.10"}`, `[]`, `{}`,
	} {
		f.Add([]byte(b))
	}
	before := s.Revision()
	f.Fuzz(func(t *testing.T, data []byte) {
		ch, err := s.PutService("api", data)
		checkChange(t, s.Path(), ch, err)
		ch, err = s.SetWeight("web", "10.0.1.2", data)
		checkChange(t, s.Path(), ch, err)
		if s.Revision() != before {
			t.Fatal("an edit changed the store without a commit")
		}
	})
}

// FuzzServiceDoc: any service document read from the fleet's etcd composes into a
// node's config or an error, never a panic; a composed service, taken apart and
// composed again, gives the same config; and config.ParseService, which the fleet
// decodes each document with, takes the same documents into the same service.
func FuzzServiceDoc(f *testing.F) {
	s := fuzzStore(f)
	for _, d := range []string{
		"name: web\nvip: 198.51.100.10\nport: 80\nbackends:\n  - address: 10.0.1.1 # rack 1\n    weight: 3\n",
		"name: x\nvip: 198.51.100.30\nbackends: &b [{address: 10.0.3.1}]\nhealth: {kind: tcp}\n",
		"&a {<<: *a}", "name: [[[[[[[[]]]]]]]]",
	} {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mem, err := Compose(s, []ServiceDoc{{Name: "x", YAML: data}})
		svc, perr := config.ParseService("x", data, s.Config())
		if err != nil {
			if perr == nil && !hasVersion(data) {
				t.Fatalf("ParseService took a document Compose refuses (%v):\n%s", err, data)
			}
			return
		}
		out, cfg, _ := mem.current()
		if perr != nil || !reflect.DeepEqual(*svc, cfg.Services[0]) {
			t.Fatalf("ParseService: %v\n%+v\n%+v", perr, svc, cfg.Services[0])
		}
		docs, err := (&Change{data: out, Config: cfg}).ServiceDocs()
		if err != nil {
			t.Fatalf("a composed document does not come apart: %v\n%s", err, out)
		}
		again, err := Compose(s, docs)
		if err != nil || !reflect.DeepEqual(again.Config(), cfg) {
			t.Fatalf("composed again: %v\n%s", err, out)
		}
	})
}

// hasVersion tells whether a service document has a top-level v (the format version,
// which the fleet's documents may carry and a config file's services may not).
func hasVersion(data []byte) bool {
	n, err := decode.YAML(data)
	if err != nil || len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
		return false
	}
	m := n.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "v" {
			return true
		}
	}
	return false
}

// FuzzSplice: for any config file, an edit of one service (a weight, a drain, a new
// service, a replaced one, a deletion) spliced into its bytes gives a file that parses
// whole to exactly the change's config, and the change or refusal an edit of the
// whole tree gives; the services it does not edit keep their lines. Nothing is written.
func FuzzSplice(f *testing.F) {
	for _, n := range []int{1, 3} {
		for _, dash := range []int{0, 2} {
			f.Add(spliceFile(n, dash))
		}
	}
	if data, err := os.ReadFile("testdata/node.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("node: {name: lb1, interfaces: [eth0], address: 10.0.0.11}\nservices:\n- name: a # x\n  vip: 198.51.100.10\n  backends:\n  - address: 10.0.0.1\n# c\n---\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "node.yaml")
		cfg, root, err := config.ParseTree(path, data)
		if err != nil {
			return
		}
		l := layoutOf(root, data, cfg)
		if l == nil {
			return
		}
		s := &Store{path: path, data: data, cfg: cfg, layout: l, memory: true}
		svc := cfg.Services[len(cfg.Services)/2]
		edits := []func(*Store) (*Change, error){
			put("fz", `{"vip": "198.51.100.77", "port": 8080, "backends": [{"address": "10.0.9.1"}]}`),
			put(svc.Name, `{"vip": "198.51.100.78", "backends": [{"address": "10.0.9.2", "weight": 4}]}`),
			func(st *Store) (*Change, error) { return st.DeleteService(svc.Name) },
		}
		if len(svc.Backends) > 0 {
			b := svc.Backends[len(svc.Backends)-1].Address.String()
			edits = append(edits,
				func(st *Store) (*Change, error) { return st.SetWeight(svc.Name, b, []byte(`{"weight": 9}`)) },
				func(st *Store) (*Change, error) { return st.Drain(svc.Name, b) })
		}
		for i, edit := range edits {
			ch, err := edit(s)
			want, werr := edit(wholeTree(s))
			// a splice may make what the whole tree's rendering cannot (yaml.v3
			// renders an empty list after a key's line comment as text it cannot
			// read back: `services: #` with its one service deleted); what it makes
			// is what a parse of the whole file gives (checkChange)
			if !reflect.DeepEqual(err, werr) && !(err == nil && werr != nil) {
				t.Fatalf("edit %d: spliced: %v; whole tree: %v\n%s", i, err, werr, data)
			}
			if err != nil {
				continue
			}
			checkChange(t, path, ch, nil)
			if werr == nil && !reflect.DeepEqual(ch.Config, want.Config) {
				t.Fatalf("edit %d: not the whole tree's config\n%s\n%s", i, data, ch.data)
			}
			// the lines before the edited service's are the file's
			if at := l.spans[min(slices.IndexFunc(cfg.Services, func(o config.Service) bool { return o.Name == svc.Name }), len(l.spans)-1)].start; !bytes.Equal(ch.data[:at], data[:at]) {
				t.Fatalf("edit %d changed what comes before the service\n%s\n%s", i, data, ch.data)
			}
		}
	})
}
