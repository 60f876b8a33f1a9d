package lab

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestResumedNodeCatchesUpBeforeTraffic: a node stopped (SIGSTOP) while a backend goes
// away comes back (SIGCONT) with its rings of before, and its BGP session comes back by
// itself. It must not take traffic before it has checked its backends again: the chaos
// soak's node-cont rounds broke connections that the router moved onto a resumed node
// whose table still held a backend the other nodes had dropped (or lacked one they had
// added). Here lb1 is stopped until lb2 has taken the stopped backend out; the check
// is slow to fall (16 checks of 500 ms), so lb1's checks alone, going on from where
// they were, would keep the backend in its table for seconds after its sessions are
// back. The router must never route the VIP over lb1 while lb1 still calls that
// backend up.
func TestResumedNodeCatchesUpBeforeTraffic(t *testing.T) {
	slowFall := &Health{Kind: "http", Port: 80, Path: "/", Interval: 500 * time.Millisecond, Timeout: 300 * time.Millisecond, Rise: 2, Fall: 16}
	a := newActiveActive(t, ActiveActiveSpec{Router: "frr", Nodes: 2, Backends: 2, Health: slowFall, HoldTime: holdTime, BFD: bfdTimers})
	for _, role := range []string{"lb1", "lb2"} {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}
	waitRoutes(t, a, webVIPs, 2*connectRetryBound, "lb1", "lb2")
	lb1 := a.Running["lb1"]
	if err := lb1.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer lb1.Signal(syscall.SIGCONT)
	waitRoutes(t, a, webVIPs, holdTime+time.Second, "lb2")
	if err := a.StopNginx("be2"); err != nil {
		t.Fatal(err)
	}
	be2 := a.Backends[1]
	if err := Eventually(20*time.Second, 50*time.Millisecond, func() error {
		if up, err := backendUp(a, "lb2", be2); err != nil || up {
			return fmt.Errorf("lb2 still takes be2 for up (%v)", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := lb1.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	// Until lb1 is routed again: each poll reads the route first, then lb1's view of be2,
	// so a route over lb1 and a be2 still up in the later read mean lb1 was announced
	// while it held be2.
	lb1Addrs := a.NodeAddrs(WebVIP4, "lb1")
	err := Eventually(2*connectRetryBound, 20*time.Millisecond, func() error {
		hops, err := a.NextHops(WebVIP4)
		if err != nil {
			return err
		}
		routed := slices.ContainsFunc(hops, func(h netip.Addr) bool { return slices.Contains(lb1Addrs, h) })
		up, err := backendUp(a, "lb1", be2)
		if err != nil {
			return err
		}
		switch {
		case routed && up:
			t.Fatalf("the router routes %s over lb1 (next hops %v) while lb1 still takes be2, stopped during its freeze, for up", WebVIP4, hops)
		case !routed:
			return fmt.Errorf("lb1 not routed yet (next hops %v)", hops)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lb1 routed again %s after SIGCONT", time.Since(resumed).Round(time.Millisecond))
}

// backendUp is whether a node's status calls a backend up (in any service).
func backendUp(a *ActiveActive, role string, be *Host) (bool, error) {
	st, err := a.Status(role)
	if err != nil {
		return false, err
	}
	up := false
	for _, s := range st.Services {
		for _, b := range s.Backends {
			if b.Address == be.Addr4.String() || b.Address == be.Addr6.String() {
				up = up || b.Health.Up
			}
		}
	}
	return up, nil
}
