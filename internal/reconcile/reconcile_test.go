package reconcile

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
)

// fakeDP is an in-memory data plane that checks, after every single write, the
// invariant packets rely on: a ring only names backends that are up, of its service.
type fakeDP struct {
	t        *testing.T
	services map[datapath.ServiceKey]datapath.Service
	vipAddrs map[netip.Addr]uint32
	rings    map[uint32][]uint32
	backends map[uint32]datapath.Backend
	settings datapath.Settings
	writes   int
	failAt   int // the failAt-th write fails (0: never)
	failFrom int // every write from the failFrom-th on fails (0: never)
	// capacities of the maps in ids (0 included); 0: the compiled ones
	maxServices, maxBackends uint32
}

func newFake(t *testing.T) *fakeDP {
	return &fakeDP{t: t, services: map[datapath.ServiceKey]datapath.Service{}, vipAddrs: map[netip.Addr]uint32{},
		rings: map[uint32][]uint32{}, backends: map[uint32]datapath.Backend{}}
}

var errInjected = errors.New("injected map error")

func (f *fakeDP) write() error {
	f.writes++
	if f.failAt != 0 && f.writes == f.failAt || f.failFrom != 0 && f.writes >= f.failFrom {
		return errInjected
	}
	return nil
}

func (f *fakeDP) check() {
	f.t.Helper()
	for sid, ring := range f.rings {
		for _, id := range ring {
			b, ok := f.backends[id]
			if !ok || b.State != datapath.BackendUp || b.ServiceID != sid {
				f.t.Fatalf("write %d: ring of service %d names backend %d in state %v (service %d)", f.writes, sid, id, b.State, b.ServiceID)
			}
		}
	}
	for k, s := range f.services {
		if f.vipAddrs[k.VIP] == 0 {
			f.t.Fatalf("write %d: service %v visible without its VIP address", f.writes, k)
		}
		_ = s
	}
}

// PutServices writes entry by entry, as the kernel's batch does.
func (f *fakeDP) PutServices(keys []datapath.ServiceKey, services []datapath.Service) (int, error) {
	for i, k := range keys {
		if err := f.write(); err != nil {
			return i, err
		}
		f.services[k] = services[i]
		f.check()
	}
	return len(keys), nil
}
func (f *fakeDP) DeleteService(k datapath.ServiceKey) error {
	if err := f.write(); err != nil {
		return err
	}
	delete(f.services, k)
	f.check()
	return nil
}
func (f *fakeDP) PutVIPAddrs(addrs []netip.Addr, services []uint32) error {
	for i, a := range addrs {
		if err := f.write(); err != nil {
			return err
		}
		f.vipAddrs[a] = services[i]
	}
	return nil
}
func (f *fakeDP) DeleteVIPAddr(a netip.Addr) error {
	if err := f.write(); err != nil {
		return err
	}
	delete(f.vipAddrs, a)
	f.check()
	return nil
}

// PutRings writes ring by ring, as the kernel's batch does: a failure part way leaves
// the rings before it in.
func (f *fakeDP) PutRings(rings map[uint32][]uint32) error {
	for _, id := range slices.Sorted(maps.Keys(rings)) {
		if err := f.write(); err != nil {
			return err
		}
		f.rings[id] = slices.Clone(rings[id])
		f.check()
	}
	return nil
}
func (f *fakeDP) DeleteRing(id uint32) error {
	if err := f.write(); err != nil {
		return err
	}
	delete(f.rings, id)
	return nil
}

// PutBackends writes slot by slot, as the kernel's batch does: a failure part way
// leaves the slots before it written.
func (f *fakeDP) PutBackends(ids []uint32, backends []datapath.Backend) (int, error) {
	for i, id := range ids {
		if err := f.write(); err != nil {
			return i, err
		}
		f.backends[id] = backends[i]
		f.check()
	}
	return len(ids), nil
}
func (f *fakeDP) DeleteBackend(id uint32) error {
	if err := f.write(); err != nil {
		return err
	}
	delete(f.backends, id)
	f.check()
	return nil
}
func (f *fakeDP) ResetServiceCounters(uint32) error { return f.write() }

func (f *fakeDP) Capacity() (services, backends uint32) {
	return cmp.Or(f.maxServices, datapath.MaxServices), cmp.Or(f.maxBackends, datapath.MaxBackends)
}

func (f *fakeDP) PutSettings(s datapath.Settings) error {
	if err := f.write(); err != nil {
		return err
	}
	f.settings = s
	return nil
}

func svc(name, vip string, port uint16, backends ...string) config.Service {
	s := config.Service{Name: name, VIP: netip.MustParseAddr(vip), Port: port, Protocol: config.TCP,
		Forwarding: config.IPIP, Scheduler: config.Maglev, TableSize: 251}
	for _, b := range backends {
		s.Backends = append(s.Backends, config.Backend{Address: netip.MustParseAddr(b), Weight: 1})
	}
	return s
}

func cfgOf(services ...config.Service) *config.Config { return &config.Config{Services: services} }

func ringOwners(r *Reconciler, name string) map[netip.Addr]int {
	out := map[netip.Addr]int{}
	for _, a := range r.RingAddrs(name) {
		out[a]++
	}
	return out
}

func TestApplyProgramsServices(t *testing.T) {
	f := newFake(t)
	r := New(f)
	web := svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.2", "10.0.1.3")
	dns := svc("dns", "198.51.100.10", 53, "10.0.2.1")
	if err := r.Apply(cfgOf(web, dns), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if len(f.services) != 2 || len(f.rings) != 2 || len(f.backends) != 4 {
		t.Fatalf("services %d rings %d backends %d, want 2 2 4", len(f.services), len(f.rings), len(f.backends))
	}
	if f.vipAddrs[web.VIP] != 2 {
		t.Errorf("VIP address carries %d services, want 2", f.vipAddrs[web.VIP])
	}
	if owners := ringOwners(r, "web"); len(owners) != 3 {
		t.Errorf("web ring owners %v, want 3 backends", owners)
	}
	// nothing changes: nothing is written
	n := f.writes
	if err := r.Apply(cfgOf(web, dns), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if f.writes-n != 0 {
		t.Errorf("re-applying the same config made %d writes, want 0", f.writes-n)
	}
	// one backend of one service changes: its slot, its ring, the one it leaves
	web.Backends[2].Address = netip.MustParseAddr("10.0.1.4")
	n = f.writes
	if err := r.Apply(cfgOf(web, dns), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if f.writes-n != 3 {
		t.Errorf("replacing one backend made %d writes, want 3 (backend in, ring, backend out)", f.writes-n)
	}
	if owners := ringOwners(r, "web"); len(owners) != 3 || owners[netip.MustParseAddr("10.0.1.4")] == 0 {
		t.Errorf("web ring owners %v after the change", owners)
	}
}

// Two nodes with differently ordered configs hold identical rings.
func TestRingsAreOrderIndependent(t *testing.T) {
	a, b := New(newFake(t)), New(newFake(t))
	if err := a.Apply(cfgOf(svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4"), svc("x", "198.51.100.11", 80, "10.0.9.9")), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(cfgOf(svc("y", "198.51.100.12", 80, "10.0.8.8"), svc("web", "198.51.100.10", 80, "10.0.1.3", "10.0.1.1", "10.0.1.4", "10.0.1.2")), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.RingAddrs("web"), b.RingAddrs("web")) {
		t.Error("the same service and backends gave different rings on two nodes")
	}
	// the service name is not part of the table: a renamed service keeps its table
	c := New(newFake(t))
	if err := c.Apply(cfgOf(svc("renamed", "198.51.100.10", 80, "10.0.1.4", "10.0.1.3", "10.0.1.2", "10.0.1.1")), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.RingAddrs("web"), c.RingAddrs("renamed")) {
		t.Error("renaming a service changed its ring")
	}
}

func TestBackendStates(t *testing.T) {
	f := newFake(t)
	r := New(f)
	web := svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.2", "10.0.1.3")
	if err := r.Apply(cfgOf(web), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	state := func(addr string) datapath.BackendState {
		for _, s := range r.Snapshot() {
			for _, b := range s.Backends {
				if b.Address == netip.MustParseAddr(addr) {
					if f.backends[b.ID].State != b.State {
						t.Fatalf("reconciler believes %v, map holds %v", b.State, f.backends[b.ID].State)
					}
					return b.State
				}
			}
		}
		return datapath.BackendUnused
	}
	// drain .2 (weight 0), .3 fails its health check
	web.Backends[1].Weight = 0
	down := netip.MustParseAddr("10.0.1.3")
	if err := r.Apply(cfgOf(web), func(_ *config.Service, b *config.Backend) bool { return b.Address != down }); err != nil {
		t.Fatal(err)
	}
	if s := state("10.0.1.2"); s != datapath.BackendDraining {
		t.Errorf("weight 0 backend is %v, want draining", s)
	}
	if s := state("10.0.1.3"); s != datapath.BackendDown {
		t.Errorf("unhealthy backend is %v, want down", s)
	}
	if owners := ringOwners(r, "web"); len(owners) != 1 || owners[netip.MustParseAddr("10.0.1.1")] != 251 {
		t.Errorf("ring owners %v, want only 10.0.1.1", owners)
	}
	// everything down: no ring at all, the service stays (packets are counted as no_backend)
	if err := r.Apply(cfgOf(web), func(*config.Service, *config.Backend) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.rings[r.services["web"].id]; ok || len(f.services) != 1 {
		t.Errorf("all backends down: ring present=%v, services=%d", ok, len(f.services))
	}
	// back up
	web.Backends[1].Weight = 1
	if err := r.Apply(cfgOf(web), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if owners := ringOwners(r, "web"); len(owners) != 3 {
		t.Errorf("after recovery ring owners %v, want 3", owners)
	}
}

func TestRemoveBackendAndService(t *testing.T) {
	f := newFake(t)
	r := New(f)
	web := svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.2", "10.0.1.3")
	if err := r.Apply(cfgOf(web), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	removedID := r.services["web"].backends[netip.MustParseAddr("10.0.1.2")].id
	web.Backends = slices.Delete(web.Backends, 1, 2)
	if err := r.Apply(cfgOf(web), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.backends[removedID]; ok {
		t.Error("removed backend's slot is still in the map")
	}
	// a new backend does not get the removed one's id (stale flow entries point nowhere)
	web.Backends = append(web.Backends, config.Backend{Address: netip.MustParseAddr("10.0.1.9"), Weight: 1})
	if err := r.Apply(cfgOf(web), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if id := r.services["web"].backends[netip.MustParseAddr("10.0.1.9")].id; id == removedID {
		t.Errorf("backend id %d reused at once", id)
	}
	// the service goes: everything of it goes
	if err := r.Apply(cfgOf(), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if len(f.services)+len(f.rings)+len(f.backends)+len(f.vipAddrs) != 0 {
		t.Errorf("left behind: %d services, %d rings, %d backends, %d VIP addresses", len(f.services), len(f.rings), len(f.backends), len(f.vipAddrs))
	}
}

func TestServiceKeyChangeReplacesService(t *testing.T) {
	f := newFake(t)
	r := New(f)
	if err := r.Apply(cfgOf(svc("web", "198.51.100.10", 80, "10.0.1.1")), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(cfgOf(svc("web", "198.51.100.20", 8080, "10.0.1.1")), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	if len(f.services) != 1 || len(f.vipAddrs) != 1 || f.vipAddrs[netip.MustParseAddr("198.51.100.20")] != 1 {
		t.Errorf("services %v, VIP addresses %v", f.services, f.vipAddrs)
	}
}

// A kernel error half way leaves the previous state in place.
func TestFailedApplyRestoresPreviousState(t *testing.T) {
	old := cfgOf(svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.2"))
	next := cfgOf(svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.3"), svc("new", "198.51.100.11", 80, "10.0.2.1"))
	for failAt := 1; ; failAt++ {
		f := newFake(t)
		r := New(f)
		if err := r.Apply(old, AlwaysUp); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint(r.RingAddrs("web"))
		f.failAt = f.writes + failAt
		err := r.Apply(next, AlwaysUp)
		if err == nil {
			if failAt == 1 {
				t.Fatal("no write was made")
			}
			break // failAt went past the last write
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("error %v does not wrap the map error", err)
		}
		if got := fmt.Sprint(r.RingAddrs("web")); got != want {
			t.Errorf("fail at write %d: web ring %s, want the old %s", failAt, got, want)
		}
		if _, ok := r.services["new"]; ok {
			t.Errorf("fail at write %d: the new service survived a failed apply", failAt)
		}
	}
}

// A service's forwarding reaches every one of its backend slots, and a change of it is
// written to each backend in its current state; node settings are written once.
func TestForwardingAndSettings(t *testing.T) {
	f := newFake(t)
	r := New(f)
	web := svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.2")
	web.Backends[1].Weight = 0 // draining: must stay draining through the change
	cfg := cfgOf(web)
	cfg.Node = config.Node{EntropySource: true, EntropyPrefix4: netip.MustParsePrefix("172.16.0.0/16"), NewFlowRate: 1000, ForwardTransit: true}
	if err := r.Apply(cfg, AlwaysUp); err != nil {
		t.Fatal(err)
	}
	want := datapath.Settings{Entropy4: netip.MustParsePrefix("172.16.0.0/16"), NewFlowRate: 1000, ForwardTransit: true}
	if f.settings != want {
		t.Errorf("settings %+v, want %+v", f.settings, want)
	}
	for id, b := range f.backends {
		if b.GUE {
			t.Errorf("backend %d is GUE under forwarding: ipip", id)
		}
	}
	cfg.Services[0].Forwarding, cfg.Services[0].GUEPort = config.GUE, 7000
	n := f.writes
	if err := r.Apply(cfg, AlwaysUp); err != nil {
		t.Fatal(err)
	}
	// two backends rewritten; the ring, the service entry and the settings did not change
	if f.writes-n != 2 {
		t.Errorf("switching to GUE made %d writes, want 2", f.writes-n)
	}
	states := map[datapath.BackendState]int{}
	for id, b := range f.backends {
		if !b.GUE || b.GUEPort != 7000 {
			t.Errorf("backend %d: GUE %v port %d, want GUE to 7000", id, b.GUE, b.GUEPort)
		}
		states[b.State]++
	}
	if states[datapath.BackendUp] != 1 || states[datapath.BackendDraining] != 1 {
		t.Errorf("backend states %v after the forwarding change, want one up, one draining", states)
	}
	cfg.Services[0].Forwarding, cfg.Services[0].BackendPort = config.NAT, 8080
	if err := r.Apply(cfg, AlwaysUp); err != nil {
		t.Fatal(err)
	}
	for id, b := range f.backends {
		if !b.NAT || b.GUE || b.NATPort != 8080 {
			t.Errorf("backend %d: NAT %v to port %d, GUE %v; want NAT to 8080", id, b.NAT, b.NATPort, b.GUE)
		}
	}
	// entropy off: the prefixes are not passed on even if the model holds them
	cfg.Node.EntropySource = false
	if s := SettingsOf(&cfg.Node); s.Entropy4.IsValid() || s.NewFlowRate != 1000 {
		t.Errorf("settings without entropy: %+v", s)
	}
}

// A new table size is a new ring, though the backends are the same.
func TestTableSizeChangeRebuildsRing(t *testing.T) {
	f := newFake(t)
	r := New(f)
	web := svc("web", "198.51.100.10", 80, "10.0.1.1", "10.0.1.2")
	if err := r.Apply(cfgOf(web), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	web.TableSize = 509
	if err := r.Apply(cfgOf(web), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	for id, ring := range f.rings {
		if len(ring) != 509 {
			t.Errorf("ring of service %d has %d slots, want 509", id, len(ring))
		}
	}
}

// The node's defaults are the capacities compiled into the program.
func TestDefaultCapacitiesAreTheProgramsOwn(t *testing.T) {
	if config.DefaultMaxServices != datapath.MaxServices || config.DefaultMaxBackends != datapath.MaxBackends {
		t.Errorf("node.max_services %d, node.max_backends %d; the program holds %d and %d",
			config.DefaultMaxServices, config.DefaultMaxBackends, datapath.MaxServices, datapath.MaxBackends)
	}
}

// The id allocators take their bounds from the data plane's maps (sized at load): a
// service or backend beyond them is refused by name, and the services already in keep
// their state.
func TestCapacityComesFromTheDataplane(t *testing.T) {
	for _, c := range []struct {
		name                     string
		maxServices, maxBackends uint32
		want                     string
	}{
		{"services", 3, 0, "service c: no free service id (limit 2, node.max_services)"},
		{"backends", 0, 3, "service b: backend 10.0.2.2: no free backend id (limit 2, node.max_backends)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t)
			f.maxServices, f.maxBackends = c.maxServices, c.maxBackends
			r := New(f)
			a := svc("a", "198.51.100.10", 80, "10.0.1.1")
			b := svc("b", "198.51.100.11", 80, "10.0.2.1")
			if err := r.Apply(cfgOf(a, b), AlwaysUp); err != nil {
				t.Fatal(err)
			}
			b = svc("b", "198.51.100.11", 80, "10.0.2.1", "10.0.2.2")
			err := r.Apply(cfgOf(a, b, svc("c", "198.51.100.12", 80, "10.0.3.1")), AlwaysUp)
			if err == nil || err.Error() != c.want {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if len(f.services) != 2 || len(f.backends) != 2 {
				t.Errorf("after the refusal: %d services, %d backends, want the 2 and 2 of before", len(f.services), len(f.backends))
			}
		})
	}
}

// An Apply writes only the services that changed: with 200 services in, an identical
// Apply writes nothing, a changed backend writes only its service, a health change
// only the backend's state and its ring, and a change the data plane does not read
// (BGP) nothing, though the reconciler takes it. A service whose last Apply failed
// half-way is written again even with its config unchanged.
func TestApplyWritesOnlyWhatChanged(t *testing.T) {
	f := newFake(t)
	r := New(f)
	var services []config.Service
	for i := range 200 {
		services = append(services, svc(fmt.Sprintf("svc%03d", i), fmt.Sprintf("198.51.100.%d", i), 80,
			fmt.Sprintf("10.1.%d.1", i), fmt.Sprintf("10.1.%d.2", i)))
	}
	if err := r.Apply(cfgOf(services...), AlwaysUp); err != nil {
		t.Fatal(err)
	}
	writes := func(what string, cfg *config.Config, healthy HealthFunc, want int) {
		t.Helper()
		before := f.writes
		if err := r.Apply(cfg, healthy); err != nil {
			t.Fatal(err)
		}
		if n := f.writes - before; n != want {
			t.Errorf("%s: %d map writes, want %d", what, n, want)
		}
	}
	writes("the same config again", cfgOf(services...), AlwaysUp, 0)

	services[7].Backends[1].Address = netip.MustParseAddr("10.9.9.9")
	// the new backend's slot, the ring, the old backend's slot deleted
	writes("one backend of one service replaced", cfgOf(services...), AlwaysUp, 3)
	if owners := ringOwners(r, "svc007"); owners[netip.MustParseAddr("10.9.9.9")] == 0 {
		t.Errorf("svc007's ring %v lacks its new backend", owners)
	}

	sick := netip.MustParseAddr("10.1.42.1")
	health := func(_ *config.Service, b *config.Backend) bool { return b.Address != sick }
	// the ring without it, then its slot down
	writes("one backend fails its health check", cfgOf(services...), health, 2)
	if s := f.backends[r.services["svc042"].backends[sick].id].State; s != datapath.BackendDown {
		t.Errorf("the unhealthy backend's slot is %v, want down", s)
	}
	writes("health unchanged", cfgOf(services...), health, 0)

	med := uint32(50)
	services[3].BGP.MED = &med
	writes("a BGP attribute changed", cfgOf(services...), health, 0)
	if got := r.services["svc003"].cfg.BGP.MED; got == nil || *got != med {
		t.Errorf("the reconciler did not take the service's new BGP settings: MED %v", got)
	}

	// An Apply fails half-way (its ring written, not its backend's state) and so does
	// the restore after it: the kernel now holds neither config. The next Apply of the
	// old config must write that service again, although the reconciler's record of
	// its config is the old one.
	old := services[9]
	old.Backends = slices.Clone(old.Backends)
	services[9].Backends[0].Weight = 0
	f.failFrom = f.writes + 2
	if err := r.Apply(cfgOf(services...), health); !errors.Is(err, errInjected) {
		t.Fatalf("Apply with failing writes: %v", err)
	}
	f.failFrom = 0
	services[9] = old
	if err := r.Apply(cfgOf(services...), health); err != nil {
		t.Fatal(err)
	}
	if owners := ringOwners(r, "svc009"); len(owners) != 2 {
		t.Errorf("svc009's ring has %d backends after the retry, want both again: %v", len(owners), owners)
	}
	id := r.services["svc009"].id
	if got := len(f.rings[id]); got != 251 || slices.Contains(f.rings[id], 0) {
		t.Errorf("svc009's ring in the map: %d slots", got)
	}
	first := r.services["svc009"].backends[netip.MustParseAddr("10.1.9.1")].id
	if !slices.Contains(f.rings[id], first) {
		t.Error("svc009's ring in the map still lacks the backend the failed Apply drained")
	}
}

// Every field of a service's config is compared by sameDataplane or sameRest: a field
// neither compares would be dropped by an Apply that skips the service as unchanged.
// Adding a field to config.Service fails this test until one of them (and the
// changes below) names it.
func TestUnchangedComparesEveryField(t *testing.T) {
	base := svc("web", "198.51.100.10", 80, "10.0.1.1")
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		changed := base
		changed.Backends = slices.Clone(base.Backends)
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch v := f.Addr().Interface().(type) {
		case *string:
			*v += "x"
		case *netip.Addr:
			*v = v.Next()
		case *uint16:
			*v++
		case *uint32:
			*v++
		case *config.Protocol:
			*v = config.UDP
		case *config.Forwarding:
			*v = config.GUE
		case *config.Scheduler:
			*v = config.MaglevSource
		case *config.ProxyProtocol:
			*v = config.ProxyV1
		case *[]config.Origin:
			*v = append(*v, config.Origin{Name: "dc1"})
		case *[]config.Backend:
			(*v)[0].Weight++
		case *config.Health:
			v.Port++
		case *config.ServiceBGP:
			v.Prepend++
		default:
			t.Fatalf("config.Service.%s (%s): compare it in sameDataplane or sameRest, and change it here", typ.Field(i).Name, f.Type())
		}
		if sameDataplane(&base, &changed) && sameRest(&base, &changed) {
			t.Errorf("a change of config.Service.%s is not seen", typ.Field(i).Name)
		}
	}
	for _, bgp := range []config.ServiceBGP{{Communities: []config.Community{1}}, {LargeCommunities: []config.LargeCommunity{{Global: 1, Local1: 2, Local2: 3}}}, {MED: new(uint32)}} {
		changed := base
		changed.BGP = bgp
		if sameRest(&base, &changed) {
			t.Errorf("a change of the service's BGP attributes (%+v) is not seen", bgp)
		}
	}
}
