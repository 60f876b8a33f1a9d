package store

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
)

// open copies a testdata file into a temporary directory and opens it.
func open(t *testing.T, name string) *Store {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// commit commits ch and checks that a node started on the file now (Open) runs
// exactly ch's config.
func commit(t *testing.T, s *Store, ch *Change) {
	t.Helper()
	if err := s.Commit(ch); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Config(), ch.Config) {
		t.Fatal("the store's config is not the change's")
	}
	again, err := Open(s.Path())
	if err != nil {
		t.Fatalf("the written file does not load: %v\n%s", err, read(t, s))
	}
	if !reflect.DeepEqual(again.Config(), ch.Config) {
		t.Fatalf("after a restart the config differs from the committed change\n%s", read(t, s))
	}
}

func read(t *testing.T, s *Store) string {
	t.Helper()
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func service(t *testing.T, cfg *config.Config, name string) *config.Service {
	t.Helper()
	i := slices.IndexFunc(cfg.Services, func(s config.Service) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("no service %q", name)
	}
	return &cfg.Services[i]
}

func weight(t *testing.T, cfg *config.Config, svc, addr string) uint32 {
	t.Helper()
	for _, b := range service(t, cfg, svc).Backends {
		if b.Address == netip.MustParseAddr(addr) {
			return b.Weight
		}
	}
	t.Fatalf("service %s has no backend %s", svc, addr)
	return 0
}

// An edit changes the one value asked for, and keeps comments, flow style and every
// other field of the file.
func TestSetWeightKeepsTheRest(t *testing.T) {
	s := open(t, "node.yaml")
	before := s.Config()
	ch, err := s.SetWeight("web", "10.0.1.2", []byte(`{"weight": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if w := weight(t, s.Config(), "web", "10.0.1.2"); w != 7 {
		t.Errorf("weight = %d, want 7", w)
	}
	want := *before
	want.Services = slices.Clone(before.Services)
	want.Services[0].Backends = slices.Clone(before.Services[0].Backends)
	want.Services[0].Backends[1].Weight = 7
	if !reflect.DeepEqual(s.Config(), &want) {
		t.Errorf("more than the weight changed:\n%s", read(t, s))
	}
	file := read(t, s)
	for _, keep := range []string{"# lb1 — edited by hand and through the API", "# the shop", "# rack 1", "# rotate monthly", "{kind: tcp, interval: 2s}", "api_token: s3cret"} {
		if !strings.Contains(file, keep) {
			t.Errorf("the file lost %q:\n%s", keep, file)
		}
	}
}

// Drain keeps the weight it replaces in the file, so undrain restores it, after a
// restart too; a second drain or undrain changes nothing.
func TestDrainUndrainRestoresWeight(t *testing.T) {
	s := open(t, "node.yaml")
	ch, err := s.Drain("web", "10.0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if w := weight(t, s.Config(), "web", "10.0.1.1"); w != 0 {
		t.Fatalf("drained weight = %d, want 0", w)
	}
	drained := read(t, s)
	if ch, err = s.Drain("web", "10.0.1.1"); err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if read(t, s) != drained {
		t.Errorf("a second drain rewrote the file")
	}

	s, err = Open(s.Path()) // a restart
	if err != nil {
		t.Fatal(err)
	}
	if ch, err = s.Undrain("web", "10.0.1.1"); err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if w := weight(t, s.Config(), "web", "10.0.1.1"); w != 3 {
		t.Errorf("undrained weight = %d, want the 3 it had", w)
	}
	if strings.Contains(read(t, s), "manifold: drained") {
		t.Errorf("undrain left the drain mark:\n%s", read(t, s))
	}

	// weight set to 0 by hand: undrain does not know better than the default
	if ch, err = s.SetWeight("web", "10.0.1.2", []byte(`{"weight": 0}`)); err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if ch, err = s.Undrain("web", "10.0.1.2"); err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if w := weight(t, s.Config(), "web", "10.0.1.2"); w != config.DefaultWeight {
		t.Errorf("undrained weight = %d, want %d", w, config.DefaultWeight)
	}
}

// Services that share nodes through anchors, aliases and merge keys: editing one
// changes none of the others.
func TestEditsDoNotLeakThroughAliases(t *testing.T) {
	s := open(t, "anchors.yaml")
	before := s.Config()
	ch, err := s.Drain("web", "10.0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	after := s.Config()
	if w := weight(t, after, "web", "10.0.1.1"); w != 0 {
		t.Errorf("web 10.0.1.1 weight = %d, want 0", w)
	}
	for _, other := range []string{"web-tls", "dns"} {
		if !reflect.DeepEqual(service(t, after, other), service(t, before, other)) {
			t.Errorf("draining a backend of web changed %s", other)
		}
	}
	ch, err = s.PutService("web-tls", []byte(`{"vip": "198.51.100.10", "port": 443, "backends": [{"address": "10.0.1.9"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if !reflect.DeepEqual(service(t, s.Config(), "web"), service(t, after, "web")) {
		t.Errorf("replacing web-tls changed web")
	}
}

func TestPutServiceCreatesAndReplaces(t *testing.T) {
	s := open(t, "node.yaml")
	ch, err := s.PutService("api", []byte(`{"vip": "198.51.100.20", "port": 443, "backends": [{"address": "10.0.2.1", "weight": 2}, {"address": "10.0.2.2"}], "health": {"kind": "http", "path": "/healthz"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Created {
		t.Error("Created = false for a new service")
	}
	commit(t, s, ch)
	api := service(t, s.Config(), "api")
	if api.Protocol != config.TCP || api.TableSize != config.DefaultTableSize(2) || api.Health.Port != 443 || len(api.Backends) != 2 || api.Backends[1].Weight != 1 {
		t.Errorf("defaults not applied as for a file: %+v", api)
	}
	if !strings.Contains(read(t, s), "  - name: api\n    vip: 198.51.100.20\n") {
		t.Errorf("the new service is not written as an operator would:\n%s", read(t, s))
	}

	ch, err = s.PutService("web", []byte(`{"name": "web", "vip": "198.51.100.10", "port": 8080, "backends": [{"address": "10.0.1.5"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Created {
		t.Error("Created = true for a replaced service")
	}
	commit(t, s, ch)
	web := service(t, s.Config(), "web")
	if web.Port != 8080 || len(web.Backends) != 1 || web.Health.Kind != config.HealthNone {
		t.Errorf("web not replaced as a whole: %+v", web)
	}
	if names := serviceNames(s.Config()); !slices.Equal(names, []string{"web", "dns", "api"}) {
		t.Errorf("services %v: a replaced service must keep its place", names)
	}

	ch, err = s.DeleteService("dns")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if names := serviceNames(s.Config()); !slices.Equal(names, []string{"web", "api"}) {
		t.Errorf("after deleting dns: %v", names)
	}
}

func serviceNames(c *config.Config) []string {
	var out []string
	for _, s := range c.Services {
		out = append(out, s.Name)
	}
	return out
}

// Every refused edit says why, with the field relative to the request, and writes
// nothing.
func TestRefusedEditsChangeNothing(t *testing.T) {
	type edit func(s *Store) (*Change, error)
	put := func(name, body string) edit {
		return func(s *Store) (*Change, error) { return s.PutService(name, []byte(body)) }
	}
	setWeight := func(svc, addr, body string) edit {
		return func(s *Store) (*Change, error) { return s.SetWeight(svc, addr, []byte(body)) }
	}
	const be = `"backends": [{"address": "10.0.2.1"}]`
	cases := []struct {
		name  string
		edit  edit
		kind  Kind
		field string
		msg   string
	}{
		{"not JSON", put("api", `{"vip": `), Invalid, "", "not valid JSON"},
		{"trailing data", put("api", `{} {}`), Invalid, "", "data after"},
		{"duplicate key", put("api", `{"vip": "198.51.100.20", "vip": "198.51.100.21"}`), Invalid, "", `duplicate key "vip"`},
		{"not an object", put("api", `["web"]`), Invalid, "", "must be a JSON object"},
		{"other name", put("api", `{"name": "web2", "vip": "198.51.100.20", `+be+`}`), Invalid, "name", `must be the name in the URL ("api")`},
		{"bad name", put("a b", `{"vip": "198.51.100.20", `+be+`}`), Invalid, "name", "is not a valid name"},
		{"no vip", put("api", `{`+be+`}`), Invalid, "vip", "required"},
		{"unknown field", put("api", `{"vip": "198.51.100.20", "colour": "blue", `+be+`}`), Invalid, "colour", "unknown field"},
		{"string port", put("api", `{"vip": "198.51.100.20", "port": "80", `+be+`}`), Invalid, "port", `must be an integer, got string "80"`},
		{"float port", put("api", `{"vip": "198.51.100.20", "port": 80.5, `+be+`}`), Invalid, "port", "must be an integer"},
		{"negative weight", put("api", `{"vip": "198.51.100.20", "backends": [{"address": "10.0.2.1", "weight": -1}]}`), Invalid, "backends[0].weight", "must not be negative"},
		{"family", put("api", `{"vip": "198.51.100.20", "backends": [{"address": "2001:db8::1"}]}`), Invalid, "backends[0].address", "is IPv6 but the vip is IPv4"},
		{"duplicate backend", put("api", `{"vip": "198.51.100.20", "backends": [{"address": "10.0.2.1"}, {"address": "10.0.2.1"}]}`), Invalid, "backends[1].address", "duplicate backend: same address as backends[0]"},
		{"same vip", put("api", `{"vip": "198.51.100.10", "port": 80, `+be+`}`), Conflict, "vip", `served by service "web" already`},
		{"delete unknown", func(s *Store) (*Change, error) { return s.DeleteService("nope") }, NotFound, "name", `no service "nope"`},
		{"weight unknown service", setWeight("nope", "10.0.1.1", `{"weight": 1}`), NotFound, "name", `no service "nope"`},
		{"weight unknown backend", setWeight("web", "10.0.1.9", `{"weight": 1}`), NotFound, "address", "has no backend 10.0.1.9"},
		{"weight bad address", setWeight("web", "10.0.1", `{"weight": 1}`), Invalid, "address", "is not an IPv4 or IPv6 address"},
		{"weight too big", setWeight("web", "10.0.1.1", `{"weight": 65536}`), Invalid, "weight", "out of range (accepted: 0..65535)"},
		{"weight string", setWeight("web", "10.0.1.1", `{"weight": "2"}`), Invalid, "weight", "must be an integer"},
		{"weight missing", setWeight("web", "10.0.1.1", `{}`), Invalid, "weight", "required"},
		{"weight extra field", setWeight("web", "10.0.1.1", `{"weight": 2, "state": "up"}`), Invalid, "state", "unknown field"},
		{"drain unknown backend", func(s *Store) (*Change, error) { return s.Drain("web", "10.0.1.9") }, NotFound, "address", "has no backend"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, "node.yaml")
			before, cfg := read(t, s), s.Config()
			_, err := c.edit(s)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want a *store.Error", err)
			}
			if e.Kind != c.kind || e.Problems[0].Field != c.field || !strings.Contains(e.Problems[0].Message, c.msg) {
				t.Errorf("got kind %d %+v, want kind %d field %q message containing %q", e.Kind, e.Problems, c.kind, c.field, c.msg)
			}
			if read(t, s) != before || s.Config() != cfg {
				t.Error("a refused edit changed the file or the config")
			}
		})
	}
}

// An edit of the file that the node has not loaded is never overwritten: API writes
// are refused until it is applied (SIGHUP: Reread, Commit).
func TestFileEditedOnDiskIsNotOverwritten(t *testing.T) {
	s := open(t, "node.yaml")
	edited := strings.Replace(read(t, s), "weight: 3", "weight: 5", 1)
	if err := os.WriteFile(s.Path(), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.InSync() {
		t.Error("InSync = true with an edited file")
	}
	_, err := s.Drain("web", "10.0.1.2")
	var e *Error
	if !errors.As(err, &e) || e.Kind != Conflict || !strings.Contains(e.Error(), "SIGHUP") {
		t.Fatalf("err = %v, want a Conflict that says to SIGHUP", err)
	}
	if read(t, s) != edited {
		t.Fatal("the operator's edit was overwritten")
	}
	ch, err := s.Reread()
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if ch, err = s.Drain("web", "10.0.1.2"); err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if weight(t, s.Config(), "web", "10.0.1.1") != 5 || weight(t, s.Config(), "web", "10.0.1.2") != 0 {
		t.Errorf("both the file edit and the API change must hold:\n%s", read(t, s))
	}
}

// Revert puts the file back as it was (the kernel refused the change).
func TestRevert(t *testing.T) {
	s := open(t, "node.yaml")
	before, cfg := read(t, s), s.Config()
	ch, err := s.DeleteService("web")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ch); err != nil {
		t.Fatal(err)
	}
	if err := s.Revert(ch); err != nil {
		t.Fatal(err)
	}
	if read(t, s) != before || s.Config() != cfg {
		t.Error("Revert did not restore the file and the config")
	}
}

// The file keeps its mode, a symlink stays a symlink, and no temporary file is left.
func TestWriteKeepsModeAndLink(t *testing.T) {
	s := open(t, "node.yaml")
	dir := filepath.Dir(s.Path())
	link := filepath.Join(dir, "current.yaml")
	if err := os.Symlink(filepath.Base(s.Path()), link); err != nil {
		t.Fatal(err)
	}
	s, err := Open(link)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Drain("web", "10.0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v %v", fi.Mode(), err)
	}
	target := filepath.Join(dir, "node.yaml")
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600 kept", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

func TestRedacted(t *testing.T) {
	s := open(t, "node.yaml")
	out, err := s.Redacted()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cret", "hunter2"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("secret %q shown:\n%s", secret, out)
		}
	}
	if !strings.Contains(string(out), "api_token: <redacted>") || !strings.Contains(string(out), "password: <redacted>") {
		t.Errorf("the token field is not shown redacted:\n%s", out)
	}
}
