package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The active-active tests: three nodes announce the VIPs to a real BIRD over eBGP
// (with TCP MD5), BIRD installs one multipath route per VIP, and the router's kernel
// hashes client flows over the nodes by 5-tuple.

const (
	holdTime  = 3 * time.Second
	drainTime = time.Second
	// health checks of the active-active lab: removal within interval × fall +
	// interval = 1.5 s
	checkInterval = 500 * time.Millisecond
	checkFall     = 2
)

// connectRetryBound is how long a node may take to re-establish a session the router
// dropped: the speaker's retry interval (internal/bgp.ConnectRetry, 3 s) plus BIRD's
// error wait and the handshake.
const connectRetryBound = 10 * time.Second

var activeHealth = &Health{Kind: "http", Port: 80, Path: "/", Interval: checkInterval, Timeout: 300 * time.Millisecond, Rise: 2, Fall: checkFall}

func newActiveActive(t *testing.T, spec ActiveActiveSpec) *ActiveActive {
	t.Helper()
	requireLab(t)
	if spec.Router == "frr" {
		if err := CheckFRR(); err != nil {
			testenv.Missing(t, err)
		}
	} else if err := hostprog.Check(hostprog.Bird, hostprog.Birdc); err != nil {
		testenv.Missing(t, err)
	}
	if buildErr != nil {
		t.Fatalf("cannot build manifold (make build shows the same): %v", buildErr)
	}
	spec.Prefix, spec.Dir, spec.Logf, spec.Manifold = prefix, t.TempDir(), t.Logf, manifoldBin
	a, err := NewActiveActive(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("router:\n%s", a.Describe())
			if a.Bird != nil {
				if out, err := a.Bird.Show("protocols"); err == nil {
					t.Logf("birdc show protocols:\n%s", out)
				}
			}
			if a.FRR != nil {
				if out, err := a.FRR.Show("bgp summary"); err == nil {
					t.Logf("vtysh show bgp summary:\n%s", out)
				}
			}
		}
		a.Dump(t)
	})
	return a
}

var (
	webVIPs     = []netip.Addr{WebVIP4, WebVIP6}
	partialVIPs = []netip.Addr{PartialVIP4, PartialVIP6}
)

// waitRoutes waits until every vip has exactly the given nodes as next hops.
func waitRoutes(t *testing.T, a *ActiveActive, vips []netip.Addr, timeout time.Duration, nodes ...string) time.Duration {
	t.Helper()
	took, err := a.WaitRoutes(vips, timeout, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	return took
}

// spread sends n requests to vip from fresh source ports; it fails the test on any
// error and returns requests per backend and the packet share of every node.
func spread(t *testing.T, a *ActiveActive, vip netip.Addr, n int) (perBackend map[string]int, share map[string]float64) {
	t.Helper()
	before := map[string]uint64{}
	for _, node := range a.Nodes {
		before[node.Role] = forwarded(t, node)
	}
	perBackend = map[string]int{}
	for i := range n {
		body, err := HTTPGet(a.Client.NS, URL(vip, 80), 0)
		if err != nil {
			t.Fatalf("request %d of %d to %s: %v", i+1, n, vip, err)
		}
		perBackend[strings.TrimSpace(body)]++
	}
	var total uint64
	delta := map[string]uint64{}
	for _, node := range a.Nodes {
		delta[node.Role] = forwarded(t, node) - before[node.Role]
		total += delta[node.Role]
	}
	share = map[string]float64{}
	for role, d := range delta {
		share[role] = float64(d) / float64(total)
	}
	return perBackend, share
}

// conn is a long-lived keep-alive connection and the backend that answered it first.
type conn struct {
	vip     netip.Addr
	c       *KeepAliveConn
	backend string
}

// openConns opens n connections, closed when the test owning t ends.
func openConns(t *testing.T, a *ActiveActive, vip netip.Addr, n int) []*conn {
	t.Helper()
	var out []*conn
	for range n {
		c, err := DialKeepAlive(a.Client.NS, URL(vip, 80), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		body, err := c.Do()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &conn{vip: vip, c: c, backend: strings.TrimSpace(body)})
	}
	return out
}

// exercise sends one request on every connection: each must still answer, from the
// same backend.
func exercise(t *testing.T, conns []*conn, when string) {
	t.Helper()
	broken := 0
	for _, c := range conns {
		body, err := c.c.Do()
		if err == nil && strings.TrimSpace(body) != c.backend {
			err = fmt.Errorf("answered by %s, was %s", strings.TrimSpace(body), c.backend)
		}
		if err != nil {
			broken++
			if broken <= 3 {
				t.Errorf("%s: connection %d to %s: %v", when, c.c.LocalPort(), c.vip, err)
			}
		}
	}
	if broken > 0 {
		t.Fatalf("%s: %d of %d long-lived connections broken", when, broken, len(conns))
	}
	t.Logf("%s: all %d long-lived connections answered by their backend", when, len(conns))
}

// TestActiveActive runs the life of an active-active deployment on one lab: announce,
// spread, a peer that refuses, graceful and abrupt node loss with long-lived
// connections, backend failure and recovery, a service with every backend down.
func TestActiveActive(t *testing.T) {
	a := newActiveActive(t, ActiveActiveSpec{Nodes: 3, Backends: 4, Health: activeHealth,
		HoldTime: holdTime, DrainTime: drainTime, Password: "lab-md5-key", RefusingPeer: true})
	all := []string{"lb1", "lb2", "lb3"}
	for _, role := range all {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("announce", func(t *testing.T) {
		// within 3 s of the last node starting (each must first see a backend healthy)
		took := waitRoutes(t, a, webVIPs, 3*time.Second, all...)
		t.Logf("3-way multipath routes for both web VIPs %s after the last node started", took.Round(time.Millisecond))
		waitRoutes(t, a, partialVIPs, 3*time.Second, "lb1", "lb2")
		for _, role := range all {
			st, err := a.Status(role)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range st.Services {
				if !s.Announced {
					t.Errorf("%s says %s is not announced: %s", role, s.Name, s.Reason)
				}
			}
		}
	})

	t.Run("spread", func(t *testing.T) {
		for _, vip := range webVIPs {
			perBackend, share := spread(t, a, vip, 300)
			t.Logf("%s: 300 requests, per backend %v, node shares %v", vip, perBackend, share)
			for _, be := range a.Backends {
				if perBackend[be.Role] == 0 {
					t.Errorf("%s: backend %s got no request", vip, be.Role)
				}
			}
			for _, role := range all {
				if share[role] < 0.15 {
					t.Errorf("%s: node %s carried %.0f%% of the packets, want at least 15%%", vip, role, 100*share[role])
				}
			}
		}
	})

	t.Run("refusing peer", func(t *testing.T) {
		// every node has a second peer that refuses the session: the node retries and
		// logs it, and forwards all along (the spread above went through every node)
		for _, role := range all {
			st, err := a.Status(role)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.BGP.Peers) != 2 || !st.BGP.Peers[0].Up || st.BGP.Peers[1].Up {
				t.Errorf("%s: peers %+v, want the router up and the refusing peer down", role, st.BGP.Peers)
			}
			refusing := a.Host(role).Gateway6.String()
			line, err := a.Running[role].WaitLog(2*time.Second, func(l string) bool {
				return strings.Contains(l, "BGP peer not established, retrying") && strings.Contains(l, refusing)
			})
			if err != nil {
				t.Errorf("%s: no log line about the refusing peer %s: %v", role, refusing, err)
			} else {
				t.Logf("%s: %s", role, line)
			}
		}
	})

	var conns []*conn // opened for the whole test, exercised after every change
	for _, vip := range webVIPs {
		conns = append(conns, openConns(t, a, vip, 100)...)
	}
	t.Run("sigterm drains", func(t *testing.T) {
		load := StartLoad(a.Client.NS, webVIPs)
		start := time.Now()
		if err := a.StopNode("lb3", syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited := time.Since(start)
		waitRoutes(t, a, webVIPs, time.Second, "lb1", "lb2")
		time.Sleep(300 * time.Millisecond) // traffic after the detach
		sent, failed, firstErr := load.Finish()
		t.Logf("SIGTERM: lb3 exited after %s; %d new requests meanwhile, %d failed", exited.Round(time.Millisecond), sent, failed)
		if failed > 0 {
			t.Errorf("%d of %d new requests failed while lb3 drained (first: %v)", failed, sent, firstErr)
		}
		if exited < drainTime {
			t.Errorf("lb3 exited %s after SIGTERM, before its drain time %s", exited, drainTime)
		}
		exercise(t, conns, "after lb3 left")
	})

	t.Run("node added", func(t *testing.T) {
		if err := a.StartNode("lb3"); err != nil {
			t.Fatal(err)
		}
		took := waitRoutes(t, a, webVIPs, 3*time.Second, all...)
		t.Logf("lb3 back in the routes %s after it started", took.Round(time.Millisecond))
		exercise(t, conns, "after lb3 came back")
	})

	t.Run("sigkill", func(t *testing.T) {
		start := time.Now()
		if err := a.StopNode("lb2", syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitRoutes(t, a, webVIPs, holdTime+time.Second, "lb1", "lb3")
		waitRoutes(t, a, partialVIPs, time.Second, "lb1")
		gone := time.Since(start)
		t.Logf("SIGKILL: lb2 gone from the routes after %s (hold time %s)", gone.Round(time.Millisecond), holdTime)
		if gone > holdTime+time.Second {
			t.Errorf("lb2's routes outlived the hold time: %s", gone)
		}
		if err := a.StartNode("lb2"); err != nil {
			t.Fatal(err)
		}
		waitRoutes(t, a, webVIPs, 3*time.Second, all...)
		waitRoutes(t, a, partialVIPs, 3*time.Second, "lb1", "lb2")
		exercise(t, conns, "after lb2 was killed and restarted")
	})

	t.Run("frozen node", func(t *testing.T) {
		// A node that stops answering without closing its sessions (hung, or cut off)
		// is noticed by the router's hold timer alone. Its XDP program keeps
		// forwarding meanwhile: the kernel runs it, not the process.
		n := a.Running["lb3"]
		start := time.Now()
		if err := n.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer n.Signal(syscall.SIGCONT)
		waitRoutes(t, a, webVIPs, holdTime+time.Second, "lb1", "lb2")
		gone := time.Since(start)
		t.Logf("frozen lb3 gone from the routes after %s (hold time %s)", gone.Round(time.Millisecond), holdTime)
		if err := n.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		took := waitRoutes(t, a, webVIPs, connectRetryBound, all...)
		t.Logf("lb3 back in the routes %s after it resumed", took.Round(time.Millisecond))
		exercise(t, conns, "after lb3 froze and resumed")
	})

	t.Run("backend fails and recovers", func(t *testing.T) {
		be1 := a.Host("be1")
		if err := a.StopNginx("be1"); err != nil {
			t.Fatal(err)
		}
		bound := checkInterval*checkFall + checkInterval
		removed := waitBackendState(t, a, all, be1, "down", bound+time.Second)
		t.Logf("be1 down on every node %s after its server stopped (bound %s)", removed.Round(time.Millisecond), bound)
		if removed > bound+250*time.Millisecond { // 250 ms: the status poll and process start-up
			t.Errorf("be1 removed after %s, want within interval × fall + interval = %s", removed, bound)
		}
		for _, vip := range webVIPs {
			perBackend, _ := spread(t, a, vip, 100)
			if perBackend["be1"] != 0 {
				t.Errorf("%s: be1 got %d of 100 requests after it was marked down", vip, perBackend["be1"])
			}
		}
		if err := a.StartNginx("be1"); err != nil {
			t.Fatal(err)
		}
		back := waitBackendState(t, a, all, be1, "up", 5*time.Second)
		t.Logf("be1 up again on every node %s after its server restarted", back.Round(time.Millisecond))
		for _, vip := range webVIPs {
			perBackend, _ := spread(t, a, vip, 100)
			if perBackend["be1"] == 0 {
				t.Errorf("%s: be1 got none of 100 requests after it recovered", vip)
			}
		}
	})

	t.Run("all backends down", func(t *testing.T) {
		for _, be := range a.Backends {
			if err := a.StopNginx(be.Role); err != nil {
				t.Fatal(err)
			}
		}
		// every node withdraws every VIP: no route left on the router
		waitRoutes(t, a, append(webVIPs, partialVIPs...), 5*time.Second)
		for _, role := range all {
			st, err := a.Status(role)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range st.Services {
				if s.Announced || s.Reason != "no healthy backend" {
					t.Errorf("%s: %s announced=%v (%s), want withdrawn: no healthy backend", role, s.Name, s.Announced, s.Reason)
				}
			}
		}
		if err := a.StartNginx("be2"); err != nil {
			t.Fatal(err)
		}
		waitRoutes(t, a, webVIPs, 5*time.Second, all...)
		waitRoutes(t, a, partialVIPs, 5*time.Second, "lb1", "lb2")
		for _, vip := range webVIPs {
			perBackend, _ := spread(t, a, vip, 30)
			if perBackend["be2"] != 30 {
				t.Errorf("%s: requests went to %v, want all to be2, the only healthy backend", vip, perBackend)
			}
		}
	})
}

// waitBackendState waits until every node gives backend be (both families) the state
// want in the web services, and returns how long that took.
func waitBackendState(t *testing.T, a *ActiveActive, nodes []string, be *Host, want wire.BackendState, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	err := Eventually(timeout, 20*time.Millisecond, func() error {
		for _, role := range nodes {
			st, err := a.Status(role)
			if err != nil {
				return err
			}
			for _, s := range []struct {
				name string
				addr netip.Addr
			}{{"web-v4", be.Addr4}, {"web-v6", be.Addr6}} {
				got, err := BackendState(st, s.name, s.addr)
				if err != nil {
					return err
				}
				if got != want {
					return fmt.Errorf("%s: %s %s is %s, want %s", role, s.name, s.addr, got, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// TestFRRPeer runs docs/bgp.md's FRR example: two nodes peer with FRR (MD5, IPv6 over
// the IPv4 session), zebra installs a 2-way multipath route for each VIP, traffic
// flows, and a node stopped with SIGTERM leaves the route.
func TestFRRPeer(t *testing.T) {
	a := newActiveActive(t, ActiveActiveSpec{Router: "frr", Nodes: 2, Backends: 2, Health: activeHealth,
		HoldTime: holdTime, DrainTime: drainTime, Password: "lab-md5-key"})
	for _, role := range []string{"lb1", "lb2"} {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}
	waitRoutes(t, a, append(webVIPs, partialVIPs...), 10*time.Second, "lb1", "lb2")
	for _, vip := range webVIPs {
		perBackend, share := spread(t, a, vip, 100)
		t.Logf("%s via FRR: per backend %v, node shares %v", vip, perBackend, share)
		if share["lb1"] == 0 || share["lb2"] == 0 {
			t.Errorf("%s: a node carried nothing: %v", vip, share)
		}
	}
	if err := a.StopNode("lb2", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, a, webVIPs, 2*time.Second, "lb1")
}
