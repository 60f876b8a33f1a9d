package link

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The ports chosen for the tunnels are, by ip(8)'s own reading of the namespace's
// route, on the paths they were chosen for: a path of its own for each of 4 tunnels,
// and with 6 tunnels on 4 paths, tunnels i and i+4 share path i with ports of their
// own. A route with one path chooses nothing.
func TestSourcePortsSpreadOverPaths(t *testing.T) {
	r := newRouteNS(t)
	peer := netip.MustParseAddr("10.9.9.9")
	single := netip.MustParseAddr("10.9.9.10")
	r.in(t, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/fib_multipath_hash_policy", []byte("1"), 0); err != nil {
			return err
		}
		var hops []*netlink.NexthopInfo
		for _, tu := range r.tunnels {
			hops = append(hops, &netlink.NexthopInfo{LinkIndex: tu.ifindex})
		}
		if err := netlink.RouteAdd(&netlink.Route{Dst: hostNet(peer), MultiPath: hops}); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{Dst: hostNet(single), LinkIndex: r.tunnels[0].ifindex})
	})
	const port = 51820
	// a range holding the tunnels' own ports, which must never be chosen
	const lo, hi = port - 100, port + 2000
	devOf := func(sport, dport uint16) string {
		b, err := hostprog.InNetns(context.Background(), r.name, hostprog.IP, "route", "get", peer.String(),
			"ipproto", "udp", "sport", fmt.Sprint(sport), "dport", fmt.Sprint(dport)).CombinedOutput()
		m := getDev.FindSubmatch(b)
		if err != nil || m == nil {
			t.Fatalf("ip route get: %v: %s", err, b)
		}
		return string(m[1])
	}
	for _, tunnels := range []int{4, 6} {
		var sources [][]uint16
		var paths int
		r.in(t, func() (err error) {
			sources, paths, err = sourcePorts(kernelPath, peer, port, tunnels, lo, hi)
			return err
		})
		if paths != 4 || len(sources) != tunnels {
			t.Fatalf("%d tunnels: %d paths, ports for %d tunnels; want 4 paths", tunnels, paths, len(sources))
		}
		used := map[uint16]int{}
		pathOf := map[int]string{}
		for i, ports := range sources {
			if len(ports) == 0 {
				t.Fatalf("%d tunnels: tunnel %d has no port", tunnels, i)
			}
			for _, p := range ports {
				if j, ok := used[p]; ok {
					t.Errorf("%d tunnels: port %d given to tunnels %d and %d", tunnels, p, j, i)
				}
				used[p] = i
				if p >= port && p < port+uint16(tunnels) {
					t.Errorf("%d tunnels: tunnel %d may send from port %d, a tunnel's own", tunnels, i, p)
				}
				if p < lo || p > hi {
					t.Errorf("%d tunnels: tunnel %d may send from port %d, outside %d-%d", tunnels, i, p, lo, hi)
				}
				dev := devOf(p, port+uint16(i))
				if want, ok := pathOf[i]; ok && dev != want {
					t.Errorf("%d tunnels: tunnel %d's port %d goes over %s, its first over %s", tunnels, i, p, dev, want)
				}
				pathOf[i] = dev
			}
		}
		for i := range tunnels {
			for j := range i {
				if same := pathOf[i] == pathOf[j]; same != (i%4 == j%4) {
					t.Errorf("%d tunnels: tunnels %d and %d over %s and %s", tunnels, j, i, pathOf[j], pathOf[i])
				}
			}
		}
		t.Logf("%d tunnels: %v", tunnels, pathOf)
	}
	r.in(t, func() error {
		sources, paths, err := sourcePorts(kernelPath, single, port, 4, lo, hi)
		if err == nil && (sources != nil || paths != 1) {
			t.Errorf("one path: %d paths, ports %v; want 1 path and none chosen", paths, sources)
		}
		return err
	})
}
