package store

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/reconcile"
)

// sink stands in for the node's run loop: it runs each update's transaction as the
// controller does (Commit, then the "kernel", Revert when the kernel refuses).
type sink struct {
	got    []reconcile.Update
	refuse error // what the next update gets from the "kernel" after its Commit
	before error // what the next update gets before its Commit (a conflict)
}

func (s *sink) Submit(_ context.Context, u reconcile.Update) error {
	s.got = append(s.got, u)
	if err := s.before; err != nil {
		s.before = nil
		return err
	}
	if err := u.Commit(); err != nil {
		return err
	}
	if err := s.refuse; err != nil {
		s.refuse = nil
		if rerr := u.Revert(); rerr != nil {
			return rerr
		}
		return &reconcile.KernelError{Err: err}
	}
	return nil
}

func newSource(t *testing.T) (*Source, *sink, *bytes.Buffer) {
	st := open(t, "node.yaml")
	var logs bytes.Buffer
	sk := &sink{}
	return NewSource(st, sk, slog.New(slog.NewTextHandler(&logs, nil))), sk, &logs
}

func TestSourceChangeCommitsAndLogs(t *testing.T) {
	src, sk, logs := newSource(t)
	if err := src.Change(context.Background(), func(st *Store) (*Change, error) { return st.Drain("web", "10.0.1.2") }); err != nil {
		t.Fatal(err)
	}
	if len(sk.got) != 1 || sk.got[0].Source != SourceName || !sk.got[0].Delta || len(sk.got[0].Services) != 1 {
		t.Fatalf("updates %+v", sk.got)
	}
	if !strings.Contains(read(t, src.Store()), "weight: 0") {
		t.Errorf("the drain is not in the file:\n%s", read(t, src.Store()))
	}
	if !strings.Contains(logs.String(), "config changed through the API") {
		t.Errorf("not logged: %s", logs.String())
	}
}

func TestSourceChangeRefusedByTheKernelLeavesTheFile(t *testing.T) {
	src, sk, _ := newSource(t)
	before := read(t, src.Store())
	sk.refuse = errors.New("map full")
	err := src.Change(context.Background(), func(st *Store) (*Change, error) { return st.Drain("web", "10.0.1.2") })
	var se *Error
	if !errors.As(err, &se) || se.Kind != Failed || !strings.Contains(se.Problems[0].Message, "map full") {
		t.Fatalf("err = %v, want a Failed store error with the kernel's reason", err)
	}
	if read(t, src.Store()) != before {
		t.Error("the file kept a change the kernel refused")
	}
	if src.Store().Config().Services[0].Backends[1].Weight != 1 {
		t.Error("the store's config kept a change the kernel refused")
	}
}

func TestSourceConflictIsAConflictError(t *testing.T) {
	src, sk, _ := newSource(t)
	before := read(t, src.Store())
	sk.before = &reconcile.ConflictError{Message: "service web of file: kubernetes serves a service of that name"}
	err := src.Change(context.Background(), func(st *Store) (*Change, error) { return st.Drain("web", "10.0.1.2") })
	var se *Error
	if !errors.As(err, &se) || se.Kind != Conflict {
		t.Fatalf("err = %v, want a Conflict store error", err)
	}
	if read(t, src.Store()) != before {
		t.Error("a refused change reached the file")
	}
}

// A reload that changes the node section, or the bgp section's AS or router id, is
// refused whole, counted, and never reaches the sink; a good one does, with the bgp
// section.
func TestSourceReloadRefusesRestartOnlySections(t *testing.T) {
	src, sk, logs := newSource(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := src.Store().Path()
	orig := read(t, src.Store())
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"node section", "name: lb1", "name: lb9", "node: the node section changed"},
		{"bgp asn", "asn: 65001", "asn: 65002", "bgp: asn or router_id changed"},
		{"bad file", "port: 80", "port: eighty", "reload rejected"},
	} {
		if err := os.WriteFile(path, []byte(strings.Replace(orig, tc.from, tc.to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		src.rereadAndApply(ctx)
		if len(sk.got) != 0 {
			t.Fatalf("%s: the reload reached the sink", tc.name)
		}
		if !strings.Contains(logs.String(), tc.want) {
			t.Errorf("%s: log lacks %q:\n%s", tc.name, tc.want, logs.String())
		}
	}
	if asked, failed := src.Reloads(); asked != 3 || failed != 3 {
		t.Errorf("reloads %d, failed %d; want 3 and 3", asked, failed)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(orig, "weight: 3", "weight: 5", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	src.rereadAndApply(ctx)
	if len(sk.got) != 1 || sk.got[0].Services[0].Backends[0].Weight != 5 {
		t.Fatalf("a good reload: updates %+v", sk.got)
	}
	if asked, failed := src.Reloads(); asked != 4 || failed != 3 {
		t.Errorf("reloads %d, failed %d; want 4 and 3", asked, failed)
	}
	// peers change live: the update carries the new bgp section
	if err := os.WriteFile(path, []byte(strings.Replace(orig, "password: hunter2}", "password: hunter2, hold_time: 6s}", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	src.rereadAndApply(ctx)
	if len(sk.got) != 2 || sk.got[1].BGP == nil || sk.got[1].BGP.Peers[0].HoldTime != 6*time.Second {
		t.Fatalf("a reload changing a peer: updates %+v", sk.got)
	}
}

// names is what an update carries, for the comparisons below: "web dns -gone".
func names(u reconcile.Update) string {
	var out []string
	for _, s := range u.Services {
		out = append(out, s.Name)
	}
	for _, g := range u.Gone {
		out = append(out, "-"+g)
	}
	return strings.Join(out, " ")
}

// An API write names the one service it changed (Update.Delta), a reload the services
// that differ from those the node ran, by name; after the node refused an update, the
// next carries every service, and then deltas again.
func TestSourceSendsOnlyWhatChanged(t *testing.T) {
	src, sk, _ := newSource(t)
	ctx := context.Background()
	path := src.Store().Path()
	change := func(edit func(*Store) (*Change, error)) {
		t.Helper()
		if err := src.Change(ctx, edit); err != nil {
			t.Fatal(err)
		}
	}
	reload := func(from, to string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.Replace(read(t, src.Store()), from, to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		src.rereadAndApply(ctx)
	}
	for _, step := range []struct {
		name  string
		do    func()
		delta bool
		want  string
	}{
		{"weight", func() {
			change(func(st *Store) (*Change, error) { return st.SetWeight("dns", "2001:db8:1::1", []byte(`{"weight": 7}`)) })
		}, true, "dns"},
		{"add", func() {
			change(func(st *Store) (*Change, error) {
				return st.PutService("api", []byte(`{"vip": "198.51.100.11", "port": 443, "backends": [{"address": "10.0.1.3"}]}`))
			})
		}, true, "api"},
		{"replace", func() {
			change(func(st *Store) (*Change, error) {
				return st.PutService("api", []byte(`{"vip": "198.51.100.11", "port": 443, "backends": [{"address": "10.0.1.4"}]}`))
			})
		}, true, "api"},
		{"drain", func() { change(func(st *Store) (*Change, error) { return st.Drain("web", "10.0.1.1") }) }, true, "web"},
		{"drain again: no change", func() { change(func(st *Store) (*Change, error) { return st.Drain("web", "10.0.1.1") }) }, true, ""},
		{"remove", func() { change(func(st *Store) (*Change, error) { return st.DeleteService("api") }) }, true, "-api"},
		{"reload renaming", func() { reload("name: web", "name: shop") }, true, "shop -web"},
		{"reload of one weight", func() { reload("weight: 7", "weight: 8") }, true, "dns"},
		{"reload of nothing", func() { reload("# the shop", "# the shop, still") }, true, ""},
		{"refused", func() {
			sk.refuse = errors.New("map full")
			if err := src.Change(ctx, func(st *Store) (*Change, error) { return st.Undrain("shop", "10.0.1.1") }); err == nil {
				t.Fatal("the kernel's refusal was not returned")
			}
		}, true, "shop"},
		{"after a refusal", func() { change(func(st *Store) (*Change, error) { return st.Undrain("shop", "10.0.1.1") }) }, false, "shop dns"},
		{"then deltas again", func() { change(func(st *Store) (*Change, error) { return st.Drain("shop", "10.0.1.2") }) }, true, "shop"},
	} {
		sk.got = nil
		step.do()
		if len(sk.got) != 1 {
			t.Fatalf("%s: %d updates, want 1", step.name, len(sk.got))
		}
		if u := sk.got[0]; u.Delta != step.delta || names(u) != step.want {
			t.Errorf("%s: update of %q (delta %v), want %q (delta %v)", step.name, names(u), u.Delta, step.want, step.delta)
		}
	}
	// what the node runs is the file: the changed services are as the file has them
	if got := src.Store().Config().Services; len(got) != 2 || got[0].Name != "shop" || got[0].Backends[1].Weight != 0 || got[1].Backends[0].Weight != 8 {
		t.Errorf("services %+v", got)
	}
}
