package reconcile

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/bgp"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/health"
)

// A source that sends only what changed (Update.Delta) ends where one that sends
// everything ends: the same maps, rings, backend states, health targets,
// announcements (with their attributes) and view, after every step of a random walk
// of adds, changes, key moves, removals, health changes and services that become
// tunnel services or share a VIP.
func TestDeltaEndsWhereWholeEnds(t *testing.T) {
	delta, whole := newRig(t, true, 0), newRig(t, true, 0)
	for _, r := range []*rig{delta, whole} {
		// another source's service: a delta is checked against it as a whole update is
		if err := r.c.Submit(Update{Source: "file", Services: []config.Service{svc("own", "198.51.100.99", 80, "10.0.9.1")}}); err != nil {
			t.Fatal(err)
		}
		r.c.Attached()
	}
	rnd := rand.New(rand.NewPCG(1, 26))
	state := map[string]config.Service{}
	for step := range 400 {
		changed, gone := walk(rnd, state)
		all := slices.Sorted(maps.Keys(state))
		var list, send []config.Service
		for _, name := range all {
			list = append(list, state[name])
		}
		for _, name := range changed {
			send = append(send, state[name])
		}
		errD := delta.c.Submit(Update{Source: "fleet", Services: send, Gone: gone, Delta: true})
		errW := whole.c.Submit(Update{Source: "fleet", Services: list})
		if (errD == nil) != (errW == nil) {
			t.Fatalf("step %d: delta %v, whole %v", step, errD, errW)
		}
		if step%7 == 0 { // a backend's health changes: both settle every service
			for _, r := range []*rig{delta, whole} {
				r.health.down[netip.MustParseAddr(fmt.Sprintf("10.0.1.%d", step%5))] = step%2 == 0
				r.c.HealthChanged()
			}
		}
		sameRigs(t, step, delta, whole)
	}
}

// walk changes state at random as a fleet would, and returns the names it added or
// changed (and some it left as they were: an update may name a service that did not
// change) and those it removed. Keys (VIP, port) stay unique.
func walk(rnd *rand.Rand, state map[string]config.Service) (changed, gone []string) {
	used := map[string]string{}
	for name, s := range state {
		used[fmt.Sprintf("%s:%d", s.VIP, s.Port)] = name
	}
	freeKey := func() (string, uint16) {
		for {
			vip, port := fmt.Sprintf("198.51.100.%d", 10+rnd.IntN(4)), uint16(80+rnd.IntN(6))
			if _, ok := used[fmt.Sprintf("%s:%d", vip, port)]; !ok {
				used[fmt.Sprintf("%s:%d", vip, port)] = "taken"
				return vip, port
			}
		}
	}
	for range 1 + rnd.IntN(3) {
		name := fmt.Sprintf("s%02d", rnd.IntN(16))
		s, ok := state[name]
		switch op := rnd.IntN(10); {
		case !ok:
			vip, port := freeKey()
			var backends []string
			for j := range 1 + rnd.IntN(3) {
				backends = append(backends, fmt.Sprintf("10.0.1.%d", (j+rnd.IntN(5))%5))
			}
			s = svc(name, vip, port, slices.Compact(slices.Sorted(slices.Values(backends)))...)
			if rnd.IntN(2) == 0 {
				s = withCheck(s)
			}
		case op == 0:
			delete(state, name)
			gone = append(gone, name)
			changed = slices.DeleteFunc(changed, func(c string) bool { return c == name })
			continue
		case op == 1: // a new VIP:port: another service to the data plane
			s.VIP, s.Port = func() (netip.Addr, uint16) { v, p := freeKey(); return netip.MustParseAddr(v), p }()
		case op == 2: // a tunnel service, or back
			if s.Forwarding == config.Tunnel {
				s.Forwarding, s.Backends = config.IPIP, []config.Backend{{Address: netip.MustParseAddr("10.0.1.4"), Weight: 1}}
			} else {
				s.Forwarding, s.Backends, s.Health = config.Tunnel, nil, config.Health{}
			}
		case op == 3: // the BGP attributes the VIP carries
			s.BGP.Communities = []config.Community{config.Community(65000<<16 | rnd.IntN(3))}
		case op == 4 && len(s.Backends) > 0:
			s.Backends = slices.Clone(s.Backends)
			s.Backends[0].Weight = uint32(rnd.IntN(3))
		case op == 5:
			s = withCheck(s)
		case op == 6:
			s.Health = config.Health{}
		}
		state[name] = s
		changed = append(changed, name)
		gone = slices.DeleteFunc(gone, func(g string) bool { return g == name })
	}
	slices.Sort(changed)
	return slices.Compact(changed), gone
}

// sameRigs fails when two controllers program or show anything differently (but the
// ids the maps use, which depend on the order ids were freed in).
func sameRigs(t *testing.T, step int, a, b *rig) {
	t.Helper()
	va, vb := a.c.View(), b.c.View()
	if la, lb := statusesOf(a, va), statusesOf(b, vb); !reflect.DeepEqual(la, lb) {
		t.Fatalf("step %d: data plane\n delta %v\n whole %v", step, la, lb)
	}
	if !reflect.DeepEqual(va.Tunnels, vb.Tunnels) || !reflect.DeepEqual(va.Edge, vb.Edge) {
		t.Fatalf("step %d: tunnels %v / %v, edge %v / %v", step, va.Tunnels, vb.Tunnels, va.Edge, vb.Edge)
	}
	for _, s := range b.c.served {
		aa, oka := va.Announcement(s.Name)
		ab, okb := vb.Announcement(s.Name)
		if aa != ab || oka != okb {
			t.Fatalf("step %d: %s announced %+v %v / %+v %v", step, s.Name, aa, oka, ab, okb)
		}
	}
	for name := range b.c.owner {
		if _, ok := a.c.owner[name]; !ok {
			t.Fatalf("step %d: %s not served by delta", step, name)
		}
	}
	if len(a.c.owner) != len(b.c.owner) || len(a.c.served) != len(b.c.served) {
		t.Fatalf("step %d: served %d / %d", step, len(a.c.served), len(b.c.served))
	}
	if !reflect.DeepEqual(a.speaker.announced, b.speaker.announced) {
		t.Fatalf("step %d: speaker\n delta %v\n whole %v", step, a.speaker.announced, b.speaker.announced)
	}
	if ta, tb := targetsSet(a.health.targets), targetsSet(b.health.targets); !maps.Equal(ta, tb) {
		t.Fatalf("step %d: health targets %v / %v", step, ta, tb)
	}
	if len(a.dp.services) != len(b.dp.services) || len(a.dp.rings) != len(b.dp.rings) || len(a.dp.backends) != len(b.dp.backends) || !maps.Equal(a.dp.vipAddrs, b.dp.vipAddrs) {
		t.Fatalf("step %d: maps differ: services %d/%d rings %d/%d backends %d/%d vips %v/%v", step,
			len(a.dp.services), len(b.dp.services), len(a.dp.rings), len(b.dp.rings), len(a.dp.backends), len(b.dp.backends), a.dp.vipAddrs, b.dp.vipAddrs)
	}
}

// statusesOf is each service of the view with its backends' states and its ring (as
// addresses), checked against what the reconciler has.
func statusesOf(r *rig, v View) []string {
	var out []string
	snap := r.c.maps.Snapshot()
	if len(snap) != len(v.Services) {
		r.t.Fatalf("view has %d services, the reconciler %d", len(v.Services), len(snap))
	}
	for i, s := range v.Services {
		if !reflect.DeepEqual(*s, *snap[i]) {
			r.t.Fatalf("view's %s differs from the reconciler's:\n %+v\n %+v", s.Config.Name, *s, *snap[i])
		}
		var b []string
		for _, bk := range s.Backends {
			b = append(b, fmt.Sprintf("%s w%d %v", bk.Address, bk.Weight, bk.State))
		}
		ring := map[netip.Addr]int{}
		for _, a := range r.c.maps.RingAddrs(s.Config.Name) {
			ring[a]++
		}
		out = append(out, fmt.Sprintf("%s %s:%d %v %v ring %v", s.Config.Name, s.Config.VIP, s.Config.Port, s.Config.BGP, b, ring))
	}
	return out
}

func targetsSet(ts []health.Target) map[health.Target]bool {
	out := map[health.Target]bool{}
	for _, t := range ts {
		out[t] = true
	}
	return out
}

// A change to one service among many settles that service only: the others' status
// in the view is the same object as before (not rebuilt), the speaker is asked about
// its VIP only, the neighbours about its backends only, and the health checker is not
// handed every target again when the change leaves them as they were.
func TestDeltaSettlesOnlyTheServicesItNames(t *testing.T) {
	r := newRig(t, true, 0)
	var all []config.Service
	// the fake checks every ring after each write: a few hundred services keep it quick
	for i := range 300 {
		all = append(all, withCheck(svc(fmt.Sprintf("s%04d", i), fmt.Sprintf("198.51.%d.%d", 100+i/250, i%250), 80, "10.0.1.1", "10.0.1.2")))
	}
	if err := r.c.Submit(Update{Source: "fleet", Services: all}); err != nil {
		t.Fatal(err)
	}
	r.c.Attached()
	before := r.c.View()
	r.health.targets, r.neigh.last, r.speaker.calls = nil, nil, 0
	writes := r.dp.writes

	changed := all[150]
	changed.Backends = slices.Clone(changed.Backends)
	changed.Backends[1].Weight = 0 // drained
	if err := r.c.Submit(Update{Source: "fleet", Services: []config.Service{changed}, Delta: true}); err != nil {
		t.Fatal(err)
	}
	after := r.c.View()
	if len(after.Services) != 300 {
		t.Fatalf("%d services after the change", len(after.Services))
	}
	for i, s := range after.Services {
		if rebuilt := s != before.Services[i]; rebuilt != (i == 150) {
			t.Fatalf("service %s: status rebuilt %v", s.Config.Name, rebuilt)
		}
	}
	if st := after.Services[150]; st.Backends[1].Weight != 0 || st.Backends[1].State != datapath.BackendDraining {
		t.Fatalf("the changed service's status: %+v", st.Backends)
	}
	if r.health.targets != nil {
		t.Errorf("the health checker was handed %d targets: the change left them as they were", len(r.health.targets))
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.2")}; !slices.Equal(r.neigh.last, want) {
		t.Errorf("neighbours asked for %v, want the changed service's backends %v", r.neigh.last, want)
	}
	if r.speaker.calls != 1 {
		t.Errorf("%d calls to the speaker, want 1 (the changed service's VIP)", r.speaker.calls)
	}
	if n := r.dp.writes - writes; n > 3 {
		t.Errorf("%d map writes for one backend drained", n)
	}

	// a service removed: only its VIP is withdrawn; one added: only its VIP announced
	r.speaker.calls = 0
	added := withCheck(svc("z-new", "203.0.113.1", 80, "10.0.1.3"))
	if err := r.c.Submit(Update{Source: "fleet", Services: []config.Service{added}, Gone: []string{"s0001"}, Delta: true}); err != nil {
		t.Fatal(err)
	}
	v := r.c.View()
	if _, ok := v.Service("s0001"); ok {
		t.Error("the removed service is still in the view")
	}
	if _, ok := v.Announcement("s0001"); ok {
		t.Error("the removed service still has an announcement")
	}
	if s, ok := v.Service("z-new"); !ok || len(s.Backends) != 1 {
		t.Errorf("the added service in the view: %v %v", s, ok)
	}
	if r.speaker.calls != 2 || r.speaker.is(all[1].VIP.String()) {
		t.Errorf("%d calls to the speaker, want 2 (withdraw s0001's VIP, announce z-new's)", r.speaker.calls)
	}
	if _, ok := r.speaker.announced[netip.MustParseAddr(all[1].VIP.String())]; ok {
		t.Error("the removed service's VIP is still announced")
	}
	if !slices.ContainsFunc(r.health.targets, func(tg health.Target) bool { return tg.Addr == netip.MustParseAddr("10.0.1.3") }) {
		t.Error("the added service's backend is not health checked")
	}
}

// A Delta update is checked as a whole one: a name or a VIP:port/protocol another
// source serves is a conflict, and a refused update changes nothing; a key that a
// service of the same update gives up may be taken by another in it.
func TestDeltaConflicts(t *testing.T) {
	r := newRig(t, true, 0)
	mustSubmit := func(u Update) {
		t.Helper()
		if err := r.c.Submit(u); err != nil {
			t.Fatal(err)
		}
	}
	mustSubmit(Update{Source: "file", Services: []config.Service{svc("own", vip1, 80, "10.0.1.1")}})
	mustSubmit(Update{Source: "fleet", Services: []config.Service{svc("a", vip2, 80, "10.0.1.1"), svc("b", vip2, 81, "10.0.1.1")}})
	before := statusesOf(r, r.c.View())
	for _, tc := range []struct {
		what string
		u    Update
		want string
	}{
		{"another source's name", Update{Services: []config.Service{svc("own", vip2, 90, "10.0.1.1")}}, "file serves a service of that name"},
		{"another source's key", Update{Services: []config.Service{svc("c", vip1, 80, "10.0.1.1")}}, "file/own serves"},
		{"a key the source serves already", Update{Services: []config.Service{svc("c", vip2, 81, "10.0.1.1")}}, "fleet/b serves"},
		{"one key claimed twice", Update{Services: []config.Service{svc("c", vip2, 90, "10.0.1.1"), svc("d", vip2, 90, "10.0.1.1")}}, "fleet/c serves"},
		{"a name twice", Update{Services: []config.Service{svc("c", vip2, 90, "10.0.1.1"), svc("c", vip2, 91, "10.0.1.1")}}, "names it twice"},
	} {
		tc.u.Source, tc.u.Delta = "fleet", true
		var ce *ConflictError
		if err := r.c.Submit(tc.u); !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a conflict naming %q", tc.what, err, tc.want)
		}
		if after := statusesOf(r, r.c.View()); !slices.Equal(after, before) {
			t.Fatalf("%s: a refused update changed the node:\n %v\n %v", tc.what, before, after)
		}
	}
	// b goes and c takes its key in the same update; a moves to b's other port
	mustSubmit(Update{Source: "fleet", Delta: true, Gone: []string{"b", "own"}, Services: []config.Service{svc("c", vip2, 81, "10.0.1.2")}})
	v := r.c.View()
	if _, ok := v.Service("b"); ok {
		t.Error("b still served")
	}
	if _, ok := v.Service("own"); !ok {
		t.Error("the fleet's update removed the file's service")
	}
	if s, ok := v.Service("c"); !ok || s.Config.Port != 81 {
		t.Errorf("c: %v %v", s, ok)
	}
}

// A Delta update the kernel refuses leaves every service as it was, the view and the
// announcements included.
func TestDeltaKernelRefusal(t *testing.T) {
	r := newRig(t, true, 0)
	if err := r.c.Submit(Update{Source: "fleet", Services: []config.Service{svc("a", vip1, 80, "10.0.1.1"), svc("b", vip2, 80, "10.0.1.1")}}); err != nil {
		t.Fatal(err)
	}
	r.c.Attached()
	before, announced := statusesOf(r, r.c.View()), maps.Clone(r.speaker.announced)
	for failAt := 1; ; failAt++ {
		r.dp.failAt = r.dp.writes + failAt
		changed := svc("a", vip1, 8080, "10.0.1.2", "10.0.1.3")
		err := r.c.Submit(Update{Source: "fleet", Delta: true, Gone: []string{"b"}, Services: []config.Service{changed, svc("c", vip2, 90, "10.0.1.4")}})
		r.dp.failAt = 0
		if err == nil {
			break // failAt went past the last write
		}
		var ke *KernelError
		if !errors.As(err, &ke) {
			t.Fatalf("fail at write %d: %v", failAt, err)
		}
		if after := statusesOf(r, r.c.View()); !slices.Equal(after, before) {
			t.Fatalf("fail at write %d: the node changed:\n %v\n %v", failAt, before, after)
		}
		if !maps.EqualFunc(r.speaker.announced, announced, func(a, b bgp.Attributes) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("fail at write %d: announced %v", failAt, r.speaker.Announced())
		}
		if len(r.dp.services) != 2 || len(r.dp.rings) != 2 {
			t.Fatalf("fail at write %d: maps hold %d services, %d rings", failAt, len(r.dp.services), len(r.dp.rings))
		}
	}
	if _, ok := r.c.View().Service("c"); !ok {
		t.Fatal("the update that went through did not add c")
	}
}
