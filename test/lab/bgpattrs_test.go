package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The announcements' attributes against real routers: communities of the node and of
// a service, a MED and a prepend that makes a node the backup of a VIP, as BIRD and
// FRR show them; then changed on a reload.

// routerAttrs reads the router's paths to vip, by next hop.
func routerAttrs(a *ActiveActive, vip netip.Addr) (map[netip.Addr]RouteAttrs, string, error) {
	prefix := netip.PrefixFrom(vip, vip.BitLen())
	if a.FRR != nil {
		return a.FRR.RouteAttrs(prefix)
	}
	return a.Bird.RouteAttrs(prefix)
}

// waitAttrs waits until the router's path to vip from each node has the attributes
// want gives it (and there is no path from any other node).
func waitAttrs(t *testing.T, a *ActiveActive, vip netip.Addr, want map[string]RouteAttrs) {
	t.Helper()
	var last string
	err := Eventually(5*time.Second, 50*time.Millisecond, func() error {
		got, out, err := routerAttrs(a, vip)
		last = out
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("%s: paths from %v, want from %d nodes", vip, got, len(want))
		}
		for role, w := range want {
			nh := a.NodeAddrs(vip, role)[0]
			if g, ok := got[nh]; !ok || g != w {
				return fmt.Errorf("%s from %s (%s): %+v, want %+v", vip, role, nh, g, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nrouter:\n%s", err, last)
	}
}

func TestBGPAttributes(t *testing.T) {
	for _, router := range []string{"bird", "frr"} {
		t.Run(router, func(t *testing.T) { testBGPAttributes(t, router) })
	}
}

func testBGPAttributes(t *testing.T, router string) {
	a := newActiveActive(t, ActiveActiveSpec{Router: router, Nodes: 2, Backends: 1, Health: activeHealth, HoldTime: holdTime})
	med := uint32(50)
	lb1 := a.Configs["lb1"]
	lb1.BGP.Communities = []string{"65001:100"}
	lb1.BGP.LargeCommunities = []string{"65001:1:1"}
	for i := range lb1.Services {
		if strings.HasPrefix(lb1.Services[i].Name, "web") {
			lb1.Services[i].BGP = &ServiceBGP{Communities: []string{"65001:200", "no-export"}, LargeCommunities: []string{"65001:2:2"},
				MED: &med, Prepend: 2}
		}
	}
	a.Configs["lb1"] = lb1
	for _, role := range []string{"lb1", "lb2"} {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}
	plain := RouteAttrs{ASPath: "65001"}
	nodeOnly := RouteAttrs{ASPath: "65001", Communities: "65001:100", LargeCommunities: "65001:1:1"}
	backup := RouteAttrs{ASPath: "65001 65001 65001", MED: "50", Communities: "65001:100 65001:200 65535:65281",
		LargeCommunities: "65001:1:1 65001:2:2"}
	for _, vip := range webVIPs {
		waitAttrs(t, a, vip, map[string]RouteAttrs{"lb1": backup, "lb2": plain})
	}
	for _, vip := range partialVIPs {
		waitAttrs(t, a, vip, map[string]RouteAttrs{"lb1": nodeOnly, "lb2": plain})
	}
	// the prepend makes lb1 the backup of the web VIPs: the router forwards to lb2 only
	waitRoutes(t, a, webVIPs, 5*time.Second, "lb2")
	waitRoutes(t, a, partialVIPs, 5*time.Second, "lb1", "lb2")
	t.Logf("%s: lb1's web routes carry %+v and are the backup; partial routes %+v", router, backup, nodeOnly)

	t.Run("reload", func(t *testing.T) {
		// the service's attributes gone and the node's changed, without a restart
		lb1.BGP.Communities = []string{"65001:101"}
		lb1.BGP.LargeCommunities = nil
		for i := range lb1.Services {
			lb1.Services[i].BGP = nil
		}
		if err := a.Running["lb1"].Reload(lb1); err != nil {
			t.Fatal(err)
		}
		changed := RouteAttrs{ASPath: "65001", Communities: "65001:101"}
		for _, vip := range append(webVIPs, partialVIPs...) {
			waitAttrs(t, a, vip, map[string]RouteAttrs{"lb1": changed, "lb2": plain})
		}
		waitRoutes(t, a, webVIPs, 5*time.Second, "lb1", "lb2")
	})
}
