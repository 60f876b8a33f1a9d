package lab

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// BFD against BIRD's and FRR's (bfdd): a node that freezes (SIGSTOP: its sessions stay
// open, nothing answers) leaves the router's routes within multiplier × interval, not
// the hold time.

// bfdTimers are the issue's: 100 ms, 3 packets.
var bfdTimers = &RouterBFD{Interval: 100 * time.Millisecond, Multiplier: 3}

// bfdSlack is added to multiplier × interval + 100 ms for a loaded 2-core machine: the
// router's and the node's timers run late under load, and the route is read by polling
// `ip route` every 20 ms. It keeps the bound far below the 3 s hold time.
const bfdSlack = 600 * time.Millisecond

func TestBFD(t *testing.T) {
	for _, router := range []string{"bird", "frr"} {
		t.Run(router, func(t *testing.T) { testBFD(t, router) })
	}
}

func testBFD(t *testing.T, router string) {
	a := newActiveActive(t, ActiveActiveSpec{Router: router, Nodes: 2, Backends: 1, Health: activeHealth, HoldTime: holdTime, BFD: bfdTimers})
	for _, role := range []string{"lb1", "lb2"} {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}
	// GoBGP's BFD (v4.8.0) may reset a session once, about 3 s after it first comes
	// up, before it settles: the sessions get the connect retry bound twice
	waitRoutes(t, a, webVIPs, 2*connectRetryBound, "lb1", "lb2")
	var last string
	if err := Eventually(10*time.Second, 50*time.Millisecond, func() error {
		up, out, err := a.BFDSessionsUp()
		last = out
		if err == nil && up != 2 {
			err = fmt.Errorf("%d BFD sessions up, want 2", up)
		}
		for _, role := range []string{"lb1", "lb2"} {
			if err != nil {
				break
			}
			var st *wire.Status
			if st, err = a.Status(role); err == nil && st.BGP.Peers[0].BFD != "up" {
				err = fmt.Errorf("%s says its BFD is %q", role, st.BGP.Peers[0].BFD)
			}
		}
		return err
	}); err != nil {
		t.Fatalf("%v:\n%s", err, last)
	}
	waitRoutes(t, a, webVIPs, 2*connectRetryBound, "lb1", "lb2")
	gone := FrozenNodeGone(t, a, "lb2")
	bound := time.Duration(bfdTimers.Multiplier)*bfdTimers.Interval + 100*time.Millisecond
	t.Logf("%s: frozen lb2 gone from the routes after %s (BFD %s × %d + 100 ms = %s; hold time %s)",
		router, gone.Round(time.Millisecond), bfdTimers.Interval, bfdTimers.Multiplier, bound, holdTime)
	if gone > bound+bfdSlack {
		t.Errorf("lb2's routes outlived BFD's detection: %s, bound %s + %s slack", gone, bound, bfdSlack)
	}
}

// FrozenNodeGone freezes a node (SIGSTOP), returns how long until the router routes
// the web VIPs without it, and thaws it once the router has it back.
func FrozenNodeGone(t *testing.T, a *ActiveActive, role string) time.Duration {
	t.Helper()
	var rest []string
	for _, n := range a.Nodes {
		if n.Role != role {
			rest = append(rest, n.Role)
		}
	}
	n := a.Running[role]
	start := time.Now()
	if err := n.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer n.Signal(syscall.SIGCONT)
	waitRoutes(t, a, webVIPs, holdTime+time.Second, rest...)
	gone := time.Since(start)
	if err := n.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// the thawed node's BFD expires at once and resets its session, and may once more
	// as the session comes back (see testBFD)
	waitRoutes(t, a, webVIPs, 2*connectRetryBound, append(rest, role)...)
	return gone
}
