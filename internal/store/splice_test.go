package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// spliceFile is a config file of n services as an operator writes it: a head comment
// and line comments on each, blank lines between, dashes at column dash, a tunnels
// section (a tunnel service) and the node section after the services list, and a
// comment at the end.
func spliceFile(n, dash int) []byte {
	var b strings.Builder
	pad := strings.Repeat(" ", dash)
	b.WriteString("# the node of the splice tests\nservices:\n")
	for i := range n {
		fmt.Fprintf(&b, "%s# service s%d, of team %d\n", pad, i, i%3)
		vip := 10 + i%4
		if i == 1 {
			vip = 50 // a tunnel service's vip is its own
		}
		fmt.Fprintf(&b, "%s- name: s%d\n%s  vip: 198.51.100.%d # vip of s%d\n%s  port: %d\n", pad, i, pad, vip, i, pad, 80+i)
		if i == 1 {
			fmt.Fprintf(&b, "%s  forwarding: tunnel\n", pad)
			continue
		}
		fmt.Fprintf(&b, "%s  backends:\n", pad)
		for j := range 3 {
			fmt.Fprintf(&b, "%s    - address: 10.%d.0.%d # backend %d of s%d\n", pad, i, j+1, j, i)
		}
		fmt.Fprintf(&b, "%s  health: {kind: none}\n\n", pad)
	}
	b.WriteString("# the node itself\nnode:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\n")
	b.WriteString("tunnels:\n  cert_file: edge.crt\n  key_file: edge.key\n  tokens_file: tokens.yaml\n# end\n")
	return []byte(b.String())
}

func openData(t testing.TB, data []byte) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wholeTree is a store of the same file whose edits render and parse the whole tree,
// as every edit did before splicing: the reference an edit spliced in must agree with.
func wholeTree(s *Store) *Store {
	data, cfg, _ := s.current()
	return &Store{path: s.path, data: data, cfg: cfg, memory: true}
}

// blocks are the lines of each service as the file has them, by name.
func blocks(s *Store) map[string]string {
	data, cfg, l := s.current()
	out := map[string]string{}
	for i, sp := range l.spans {
		out[cfg.Services[i].Name] = string(data[sp.start:sp.end])
	}
	return out
}

// Random edits of one service each (weights, drains, undrains, new and replaced
// services, deletions), spliced into the file: after each, the file parsed whole from
// disk gives exactly the services the store holds, every other service's lines
// (comments included) are as they were byte for byte, and the change or refusal is
// the one an edit of the whole tree makes.
func TestSplicedEditsAreWholeEdits(t *testing.T) {
	for _, dash := range []int{0, 2, 4} {
		t.Run(fmt.Sprintf("dash at %d", dash), func(t *testing.T) {
			s := openData(t, spliceFile(12, dash))
			if s.layout == nil {
				t.Fatal("the file's services cannot be spliced")
			}
			rng := rand.New(rand.NewPCG(uint64(dash), 26))
			kept := blocks(s)
			refused, made := 0, 0
			for round := range 300 {
				cfg := s.Config()
				// mostly a service and backend there are, sometimes none
				name := fmt.Sprintf("s%d", 12+rng.IntN(4))
				backend := fmt.Sprintf("10.%d.0.%d", rng.IntN(16), 1+rng.IntN(3))
				if rng.IntN(4) != 0 {
					svc := cfg.Services[rng.IntN(len(cfg.Services))]
					name = svc.Name
					if len(svc.Backends) > 0 {
						backend = svc.Backends[rng.IntN(len(svc.Backends))].Address.String()
					}
				}
				var what string
				var edit func(*Store) (*Change, error)
				switch op := rng.IntN(6); op {
				case 0, 1:
					w := rng.IntN(8)
					what = fmt.Sprintf("weight %s %s %d", name, backend, w)
					edit = func(st *Store) (*Change, error) {
						return st.SetWeight(name, backend, fmt.Appendf(nil, `{"weight": %d}`, w))
					}
				case 2:
					what = "drain " + name + " " + backend
					edit = func(st *Store) (*Change, error) { return st.Drain(name, backend) }
				case 3:
					what = "undrain " + name + " " + backend
					edit = func(st *Store) (*Change, error) { return st.Undrain(name, backend) }
				case 4:
					body := fmt.Sprintf(`{"vip": "198.51.100.%d", "port": %d, "backends": [{"address": "%s", "weight": %d}, {"address": "10.99.0.%d"}], "health": {"kind": "none"}}`,
						10+rng.IntN(5), 80+rng.IntN(16), backend, 1+rng.IntN(5), 1+rng.IntN(200))
					if rng.IntN(5) == 0 {
						body = fmt.Sprintf(`{"vip": "198.51.100.%d", "port": %d, "forwarding": "tunnel"}`, []int{10, 11, 50}[rng.IntN(3)], 80+rng.IntN(16))
					}
					what = "put " + name + " " + body
					edit = func(st *Store) (*Change, error) { return st.PutService(name, []byte(body)) }
				case 5:
					if len(cfg.Services) < 4 {
						continue
					}
					what = "delete " + name
					edit = func(st *Store) (*Change, error) { return st.DeleteService(name) }
				}
				want, werr := edit(wholeTree(s))
				ch, err := edit(s)
				if (err == nil) != (werr == nil) || err != nil && !reflect.DeepEqual(err, werr) {
					t.Fatalf("round %d, %s: spliced: %v; whole tree: %v", round, what, err, werr)
				}
				if err != nil {
					refused++
					continue
				}
				if !reflect.DeepEqual(ch.Config, want.Config) || ch.Summary != want.Summary || ch.Created != want.Created {
					t.Fatalf("round %d, %s: the spliced change is not the whole tree's\n%+v\n%+v", round, what, ch.Config.Services, want.Config.Services)
				}
				changed, gone := ch.Changes()
				wchanged, wgone := want.Changes()
				if !reflect.DeepEqual(changed, wchanged) || !reflect.DeepEqual(gone, wgone) {
					t.Fatalf("round %d, %s: the spliced change names %v gone %v; the whole tree's %v gone %v", round, what, changed, gone, wchanged, wgone)
				}
				commit(t, s, ch)
				made++
				if s.layout == nil {
					t.Fatalf("round %d, %s: the file cannot be spliced any more\n%s", round, what, read(t, s))
				}
				if !bytes.Equal(ch.data, []byte(read(t, s))) {
					t.Fatal("the file on disk is not the change's")
				}
				// every service but the one edited keeps its lines; the layout is the
				// one a parse of the whole file finds
				after := blocks(s)
				for n, b := range kept {
					if n != name && after[n] != b {
						t.Fatalf("round %d, %s: service %s changed:\n%q\n%q", round, what, n, b, after[n])
					}
				}
				delete(kept, name)
				if b, ok := after[name]; ok {
					kept[name] = b
				}
				fresh, err := Open(s.Path())
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(fresh.layout, s.layout) {
					t.Fatalf("round %d, %s: the layout kept is not the file's\n%+v\n%+v", round, what, s.layout, fresh.layout)
				}
			}
			// the comments outside any service: the file's head, each service's head
			// comment, the node section's, the end
			text := read(t, s)
			for _, c := range []string{"# the node of the splice tests\nservices:\n", "# the node itself\nnode:\n", "# end\n"} {
				if !strings.Contains(text, c) {
					t.Errorf("lost %q", c)
				}
			}
			if refused == 0 || made < 100 {
				t.Errorf("%d edits made, %d refused: the rounds test too little", made, refused)
			}
		})
	}
}

// An edit spliced in is refused when an edit of the whole tree is, with the same error.
func TestSplicedRefusals(t *testing.T) {
	s := openData(t, spliceFile(4, 2))
	for _, c := range []struct {
		what string
		edit func(*Store) (*Change, error)
		want string
	}{
		{"duplicate vip:port", put("s9", `{"vip": "198.51.100.10", "port": 80}`), "vip: 198.51.100.10 port 80/tcp is served by service \"s0\" already"},
		{"a tunnel's vip", put("s9", `{"vip": "198.51.100.50", "port": 443}`), "forwarding: vip 198.51.100.50 is also the vip of services[1]"},
		{"a vip made a tunnel's", put("s0", `{"vip": "198.51.100.10", "port": 81, "forwarding": "tunnel"}`), ""},
		{"a later service's vip made a tunnel's", put("s0", `{"vip": "198.51.100.12", "port": 443, "forwarding": "tunnel"}`), "services[2].forwarding: vip 198.51.100.12 is also the vip of services[0]"},
		{"bad address", put("s9", `{"vip": "198.51.100.20", "backends": [{"address": "10.0.0.300"}]}`), "backends[0].address"},
		{"backend of the other family", put("s9", `{"vip": "198.51.100.20", "backends": [{"address": "2001:db8::1"}]}`), "backends[0].address"},
		{"duplicate backend", put("s9", `{"vip": "198.51.100.20", "backends": [{"address": "10.0.0.5"}, {"address": "10.0.0.5"}]}`), "duplicate backend: same address as backends[0]"},
		{"unknown origin", put("s9", `{"vip": "198.51.100.20", "origins": [{"name": "a"}], "backends": [{"address": "10.0.0.5", "origin": "b"}]}`), "backends[0].origin"},
		{"too many backends", put("s9", `{"vip": "198.51.100.20", "table_size": 2, "backends": [{"address": "10.0.0.5"}, {"address": "10.0.0.6"}]}`), "table_size"},
		{"unknown field", put("s9", `{"vip": "198.51.100.20", "wieght": 1}`), "wieght"},
		{"another name", put("s9", `{"name": "s8", "vip": "198.51.100.20"}`), "must be the name in the URL"},
		{"weight too big", func(st *Store) (*Change, error) { return st.SetWeight("s0", "10.0.0.1", []byte(`{"weight": 1e9}`)) }, "weight"},
		{"weight of a string", func(st *Store) (*Change, error) { return st.SetWeight("s0", "10.0.0.1", []byte(`{"weight": "x"}`)) }, "weight"},
		{"no such backend", func(st *Store) (*Change, error) { return st.Drain("s0", "10.9.9.9") }, "has no backend"},
		{"no such service", func(st *Store) (*Change, error) { return st.DeleteService("s9") }, "no service"},
	} {
		want, werr := c.edit(wholeTree(s))
		ch, err := c.edit(s)
		if !reflect.DeepEqual(err, werr) {
			t.Errorf("%s: spliced: %v; whole tree: %v", c.what, err, werr)
		}
		switch {
		case c.want == "" && (err != nil || !reflect.DeepEqual(ch.Config, want.Config)):
			t.Errorf("%s: refused or not the whole tree's: %v", c.what, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.what, err, c.want)
		}
	}
	if _, _, l := s.current(); !reflect.DeepEqual(s.Config(), mustOpen(t, s.Path()).Config()) || l == nil {
		t.Error("a refused edit changed the store")
	}
}

func put(name, body string) func(*Store) (*Change, error) {
	return func(st *Store) (*Change, error) { return st.PutService(name, []byte(body)) }
}

func mustOpen(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Files whose services cannot be spliced are edited on the whole tree, as before.
func TestLayoutRefusesWhatItCannotSplice(t *testing.T) {
	const node = "node: {name: lb1, interfaces: [eth0], address: 10.0.0.11}\n"
	for _, c := range []struct{ what, file string }{
		{"flow list", node + "services: [{name: a, vip: 198.51.100.10}]\n"},
		{"anchor", node + "services:\n  - &a {name: a, vip: 198.51.100.10, backends: [{address: 10.0.0.1}]}\n"},
		{"alias", node + "services:\n  - {name: a, vip: 198.51.100.10, backends: &b [{address: 10.0.0.1}]}\n  - {name: b, vip: 198.51.100.11, backends: *b}\n"},
		{"block scalar", node + "services:\n  - name: |-\n      a\n    vip: 198.51.100.10\n"},
		{"dash alone", node + "services:\n  -\n    name: a\n    vip: 198.51.100.10\n"},
		{"crlf", strings.ReplaceAll(node+"services:\n  - name: a\n    vip: 198.51.100.10\n", "\n", "\r\n")},
		{"no services", node},
		{"a Unicode line separator", node + "# a\u2028\nservices:\n  - name: a\n    vip: 198.51.100.10\n"},
	} {
		s := openData(t, []byte(c.file))
		if s.layout != nil {
			t.Errorf("%s: spliced: %+v", c.what, s.layout)
		}
		// and it is still edited, on the whole tree
		ch, err := s.PutService("z", []byte(`{"vip": "198.51.100.99"}`))
		if err != nil {
			t.Errorf("%s: %v", c.what, err)
			continue
		}
		commit(t, s, ch)
	}
}

// sameOnDisk tells the file that holds data from every other, across its blocks.
func TestSameOnDisk(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 10000) // 160 000 bytes: three blocks
	path := filepath.Join(t.TempDir(), "f")
	flip := func(i int) []byte { b := bytes.Clone(big); b[i] ^= 1; return b }
	for _, c := range []struct {
		what       string
		disk, data []byte
		want       bool
	}{
		{"same", big, big, true},
		{"empty", nil, nil, true},
		{"shorter on disk", big[:len(big)-1], big, false},
		{"longer on disk", big, big[:len(big)-1], false},
		{"longer by a block", append(bytes.Clone(big), big[:70000]...), big, false},
		{"a byte in the first block", flip(3), big, false},
		{"a byte in the last block", flip(len(big) - 1), big, false},
		{"a byte at a block's end", flip(64<<10 - 1), big, false},
	} {
		if err := os.WriteFile(path, c.disk, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := sameOnDisk(path, c.data); err != nil || got != c.want {
			t.Errorf("%s: %v %v", c.what, got, err)
		}
	}
	if _, err := sameOnDisk(filepath.Join(t.TempDir(), "none"), nil); err == nil {
		t.Error("a missing file: no error")
	}
}
