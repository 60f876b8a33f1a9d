package lab

import (
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The nodes behind a route reflector (gobgpd) that sends BIRD every path with
// add-path, and beside ExaBGP as a plain peer: either way the router ends with one
// next hop per node that serves a VIP, and loses a node that stops.

func TestRouteReflectorAddPath(t *testing.T) {
	if err := hostprog.Check(hostprog.GoBGPd, hostprog.GoBGP); err != nil {
		testenv.Missing(t, err)
	}
	a := newActiveActive(t, ActiveActiveSpec{Router: "none", Nodes: 3, Backends: 1, Health: activeHealth, HoldTime: holdTime})
	var clients []string
	for _, n := range a.Nodes {
		c := a.Configs[n.Role]
		// iBGP with the reflector, which is on the router
		c.BGP.Peers = []BGPPeer{{Address: n.Gateway4, ASN: NodeASN, Port: ReflectorPort, HoldTime: holdTime}}
		a.Configs[n.Role] = c
		clients = append(clients, n.Role)
	}
	if _, err := a.StartReflector(NodeASN, a.NodeAddrs(WebVIP4, clients...)); err != nil {
		t.Fatal(err)
	}
	bird, err := a.StartBirdConfig(ReflectedBirdConfig(NodeASN))
	if err != nil {
		t.Fatal(err)
	}
	a.Bird = bird
	t.Cleanup(func() {
		if t.Failed() {
			for _, args := range [][]string{{"neighbor"}, {"global", "rib", "-a", "ipv4"}} {
				out, _ := a.ReflectorShow(args...)
				t.Logf("gobgp %v:\n%s", args, out)
			}
		}
	})
	for _, role := range clients {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}
	took := waitRoutes(t, a, webVIPs, 15*time.Second, clients...)
	waitRoutes(t, a, partialVIPs, 5*time.Second, "lb1", "lb2")
	t.Logf("3 next hops through the reflector for both web VIPs %s after the last node started", took.Round(time.Millisecond))
	if err := a.StopNode("lb3", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, a, webVIPs, 5*time.Second, "lb1", "lb2")
}

func TestExaBGPPeer(t *testing.T) {
	if err := hostprog.Check(hostprog.ExaBGP, hostprog.Sh); err != nil {
		testenv.Missing(t, err)
	}
	a := newActiveActive(t, ActiveActiveSpec{Router: "none", Nodes: 2, Backends: 1, Health: activeHealth, HoldTime: holdTime})
	exa, err := a.StartExaBGP(a.Nodes, NodeASN)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"lb1", "lb2"} {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}
	for _, vip := range append(webVIPs, partialVIPs...) {
		if err := exa.WaitNextHops(vip, a.NodeAddrs(vip, "lb1", "lb2"), 15*time.Second); err != nil {
			t.Fatalf("%v\nexabgp's log:\n%s", err, tail(exa.Log(), 30))
		}
	}
	if err := a.StopNode("lb2", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, vip := range webVIPs {
		if err := exa.WaitNextHops(vip, a.NodeAddrs(vip, "lb1"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}
