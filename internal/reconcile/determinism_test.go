package reconcile_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// TestTablesIdenticalAcrossNodes loads the real data plane twice — two nodes — and
// programs them from configs that list the same services and backends in different
// orders, with different histories (one node saw a backend come and go, so its ids
// differ). Read back from the kernel, every service's Maglev ring must name the same
// backend address in every slot: a flow that ECMP moves between nodes keeps its backend.
func TestTablesIdenticalAcrossNodes(t *testing.T) {
	testenv.NeedRoot(t, "needs root to load BPF programs")
	be := func(s string, w uint32) config.Backend {
		return config.Backend{Address: netip.MustParseAddr(s), Weight: w}
	}
	svc := func(name, vip string, port uint16, bes ...config.Backend) config.Service {
		return config.Service{Name: name, VIP: netip.MustParseAddr(vip), Port: port, Protocol: config.TCP,
			Forwarding: config.IPIP, Scheduler: config.Maglev, TableSize: 1021, Backends: bes,
			Health: config.Health{Kind: config.HealthNone}}
	}
	web := []config.Backend{be("10.0.1.1", 1), be("10.0.1.2", 2), be("10.0.1.3", 1), be("10.0.1.4", 0)}
	web6 := []config.Backend{be("fd00:1::1", 1), be("fd00:1::2", 1), be("fd00:1::3", 1)}
	dns := []config.Backend{be("10.0.2.1", 1), be("10.0.2.2", 1)}
	nodeA := &config.Config{Services: []config.Service{
		svc("web", "198.51.100.10", 80, web...),
		svc("web6", "2001:db8::10", 80, web6...),
		svc("dns", "198.51.100.53", 53, dns...),
	}}
	rev := func(b []config.Backend) []config.Backend { b = slices.Clone(b); slices.Reverse(b); return b }
	nodeB := &config.Config{Services: []config.Service{
		svc("dns", "198.51.100.53", 53, rev(dns)...),
		svc("web", "198.51.100.10", 80, rev(web)...),
		svc("web6", "2001:db8::10", 80, rev(web6)...),
	}}
	// node B first ran with an extra backend and a service that is gone since
	history := &config.Config{Services: []config.Service{
		svc("old", "198.51.100.99", 80, be("10.0.9.9", 1)),
		svc("web", "198.51.100.10", 80, append([]config.Backend{be("10.0.1.9", 1)}, web...)...),
	}}

	load := func() (*datapath.LB, *reconcile.Reconciler) {
		lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: netip.MustParseAddr("10.0.0.11"), NodeAddr6: netip.MustParseAddr("fd00::11")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lb.Close() })
		return lb, reconcile.New(lb)
	}
	lbA, recA := load()
	lbB, recB := load()
	if err := recA.Apply(nodeA, reconcile.AlwaysUp); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*config.Config{history, nodeB} {
		if err := recB.Apply(c, reconcile.AlwaysUp); err != nil {
			t.Fatal(err)
		}
	}

	ringOf := func(lb *datapath.LB, rec *reconcile.Reconciler, name string) (ids []uint32, addrs []netip.Addr) {
		t.Helper()
		for _, s := range rec.Snapshot() {
			if s.Config.Name != name {
				continue
			}
			ring, err := lb.Ring(s.ID)
			if err != nil {
				t.Fatal(err)
			}
			byID := map[uint32]netip.Addr{}
			for _, id := range ring {
				if _, ok := byID[id]; !ok {
					if byID[id], err = lb.BackendAddr(id); err != nil {
						t.Fatal(err)
					}
				}
				addrs = append(addrs, byID[id])
			}
			return ring, addrs
		}
		t.Fatalf("no service %s", name)
		return nil, nil
	}
	sameIDs := true
	for _, name := range []string{"web", "web6", "dns"} {
		idsA, a := ringOf(lbA, recA, name)
		idsB, b := ringOf(lbB, recB, name)
		if len(a) != 1021 {
			t.Fatalf("%s: ring of %d slots, want 1021", name, len(a))
		}
		sameIDs = sameIDs && slices.Equal(idsA, idsB)
		if !slices.Equal(a, b) {
			diff := 0
			for i := range a {
				if a[i] != b[i] {
					diff++
				}
			}
			t.Errorf("%s: the two nodes' rings differ in %d of %d slots", name, diff, len(a))
		}
		// the draining backend (weight 0) holds no slot; every other one does
		seen := map[netip.Addr]int{}
		for _, x := range a {
			seen[x]++
		}
		if seen[netip.MustParseAddr("10.0.1.4")] != 0 {
			t.Errorf("%s: the draining backend holds %d slots", name, seen[netip.MustParseAddr("10.0.1.4")])
		}
		t.Logf("%s: slots per backend %v", name, fmt.Sprint(seen))
	}
	if sameIDs {
		t.Error("the two nodes have the same backend ids: the test no longer proves that ids do not matter")
	}
}
