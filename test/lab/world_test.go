package lab

// TestWorld: the global accelerator end to end (world.go draws it, worldacts.go holds
// its acts). Constant-rate generators in every region offer new connections to web,
// one service steered over three origins: eu and us (routed, IPIP) and home (behind
// NAT, reached by tunnel, 30 ms from every site). Each act asserts the bounds of issue
// 27 over windows of the origins' own counts:
//   - steady state: each region on its closest origin (ams on eu, nyc on us, sin on
//     home) and spread over its site's two nodes; every origin sees the clients' own
//     addresses (DSR for eu and us, the PROXY header for home); plain, not steered,
//     spreads over both routed backends;
//   - a surge in ams spills to home, its next closest, within 10 s, and no origin takes
//     more than its capacity + 2 % after that (two 10 s windows);
//   - eu failing: its share is 0 on every node within 3 s, and home takes ams's
//     connections;
//   - sin's site frozen: sin's new connections reach another site within 1 s of BFD's
//     detection, no long-lived connection held at ams (on home, tunnelled) or nyc (on
//     us, routed) breaks, the ones lost with sin are counted and reported;
//   - the etcd member of the leading controller's region killed: a controller keeps
//     deciding, every node keeps taking new flows, no request fails.

import (
	"net/netip"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// the constant rate, new connections per second from each region's client
const worldWebRate = 20

func TestWorld(t *testing.T) {
	requireManifold(t)
	if err := hostprog.Check(hostprog.Etcd, hostprog.Bird, hostprog.Birdc, hostprog.Nft); err != nil {
		testenv.Missing(t, err)
	}
	start := time.Now()
	w, err := NewWorld(WorldSpec{Prefix: prefix, Dir: t.TempDir(), Logf: t.Logf, Manifold: manifoldBin, BFD: WorldBFD,
		Capacity: WorldCapacity, SteerInterval: 500 * time.Millisecond, SteerLease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range WorldRegions {
				proto, _ := w.Routers[r].Show("protocols")
				t.Logf("r-%s's protocols:\n%s", r, proto)
			}
			w.Dump(t)
		}
	})
	t.Logf("the world is up %v after the start: every region's router routes the VIPs over its own site, every edge has both of home's connectors",
		time.Since(start).Round(time.Millisecond))
	// the core has every site's route: where a region's router turns once its own
	// site withdraws
	var regionRouters []netip.Addr
	for _, r := range WorldRegions {
		regionRouters = append(regionRouters, w.Host("r-"+r).Addr4)
	}
	if _, err := w.WaitNextHops(WorldWebVIP, regionRouters, 10*time.Second); err != nil {
		t.Fatalf("the core: %v", err)
	}

	t.Logf("steady state: every region offers %d new connections/s to web", worldWebRate)
	loads := w.StartLoads(worldWebRate)
	t.Cleanup(loads.Stop)
	for _, act := range []func() (Problems, error){
		func() (Problems, error) { return w.SteadyState(t.Logf, loads) },
		func() (Problems, error) { return w.Surge(t.Logf, loads, worldWebRate) },
		func() (Problems, error) { return w.OriginFails(t.Logf, "eu") },
		func() (Problems, error) { return w.SiteFrozen(t.Logf, "sin") },
		func() (Problems, error) { return w.EtcdMemberKilled(t.Logf, loads) },
	} {
		problems, err := act()
		for _, p := range problems {
			t.Error(p)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("  (%v after the start)", time.Since(start).Round(time.Millisecond))
	}
}
