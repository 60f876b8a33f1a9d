package reconcile

import (
	"maps"
	"slices"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
)

// mixed is a service of one routed origin (dc: two backends) and one reached by tunnel
// (home), of weight w.
func mixed(w uint32) config.Service {
	s := svc("web", "198.51.100.10", 443, "10.0.1.1", "10.0.1.2")
	s.Origins = []config.Origin{{Name: "dc", Capacity: 100}, {Name: "home", Capacity: 100, Tunnel: true, Weight: w}}
	for i := range s.Backends {
		s.Backends[i].Origin = "dc"
	}
	return s
}

// A service with an origin reached by tunnel gets the local pseudo-backend: a slot at
// the VIP's address written as local, with the ring share of that origin's weight,
// up whatever the health checks say (it has none); weight 0 drains it.
func TestTunnelledOriginIsTheLocalBackend(t *testing.T) {
	f := newFake(t)
	r := New(f)
	s := mixed(2) // 2 of 4: half the ring
	down := func(*config.Service, *config.Backend) bool { return false }
	upAll := func(*config.Service, *config.Backend) bool { return true }
	if err := r.Apply(cfgOf(s), upAll); err != nil {
		t.Fatal(err)
	}
	var local []datapath.Backend
	for _, b := range f.backends {
		if b.Local {
			local = append(local, b)
		}
	}
	if len(local) != 1 || local[0].Addr != s.VIP || local[0].State != datapath.BackendUp || local[0].GUE || local[0].NAT {
		t.Fatalf("local backends written: %+v, want one, up, at the vip %s", local, s.VIP)
	}
	owners := ringOwners(r, "web")
	if n := owners[s.VIP]; n < 251*2/5 || n > 251*3/5 {
		t.Errorf("the local backend holds %d of 251 slots at weight 2 of 4 (owners %v)", n, owners)
	}
	snap := r.Snapshot()
	if l := snap[0].Local; l == nil || l.Address != s.VIP || l.Weight != 2 || l.State != datapath.BackendUp || len(snap[0].Backends) != 2 {
		t.Errorf("snapshot: local %+v, %d backends: want the local pseudo-backend apart, at the vip, weight 2, up", l, len(snap[0].Backends))
	}
	// nothing changed: nothing written
	n := f.writes
	if err := r.Apply(cfgOf(mixed(2)), upAll); err != nil {
		t.Fatal(err)
	}
	if f.writes != n {
		t.Errorf("re-applying the same mixed service made %d writes", f.writes-n)
	}
	// the routed backends fail their checks: the local one stays up, alone in the ring
	if err := r.Apply(cfgOf(mixed(2)), down); err != nil {
		t.Fatal(err)
	}
	if owners := ringOwners(r, "web"); owners[s.VIP] != 251 {
		t.Errorf("routed backends down: ring owners %v, want the local backend's alone", owners)
	}
	// the tunnelled origin's weight 0 (its share 0): draining, out of the ring
	if err := r.Apply(cfgOf(mixed(0)), upAll); err != nil {
		t.Fatal(err)
	}
	if owners := ringOwners(r, "web"); owners[s.VIP] != 0 || len(owners) != 2 {
		t.Errorf("tunnelled weight 0: ring owners %v, want the two routed backends only", owners)
	}
	for _, b := range f.backends {
		if b.Local && b.State != datapath.BackendDraining {
			t.Errorf("tunnelled weight 0: the local backend is %v, want draining (keeps its flows)", b.State)
		}
	}
	// the origin no longer tunnelled (and gone): the local backend goes
	plain := svc("web", "198.51.100.10", 443, "10.0.1.1", "10.0.1.2")
	if err := r.Apply(cfgOf(plain), upAll); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(slices.Collect(maps.Values(f.backends)), func(b datapath.Backend) bool { return b.Local || b.Addr == s.VIP }) {
		t.Errorf("a service without tunnelled origins kept a local backend: %+v", f.backends)
	}
}

// A change of a tunnelled origin's weight is a change of the data plane.
func TestTunnelledWeightIsDataplane(t *testing.T) {
	a, b := mixed(1), mixed(2)
	if sameDataplane(&a, &b) {
		t.Error("a tunnelled origin's weight changed, sameDataplane says the same")
	}
}
