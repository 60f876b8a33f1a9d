package lab

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// Every test builds its own lab under this prefix, one test at a time.
// MANIFOLD_LAB_PREFIX gives a test run a prefix of its own, so that two runs on one
// machine (two developers, two checkouts) do not remove each other's namespaces.
var prefix = envOr("MANIFOLD_LAB_PREFIX", "mfl")

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var (
	vip4 = netip.MustParseAddr("198.51.100.10")
	vip6 = netip.MustParseAddr("2001:db8:100::10")
)

// family is what the table-driven lab tests run over.
type family struct {
	name string
	vip  netip.Addr
	addr func(*Host) netip.Addr // a host's address of this family
}

var families = []family{
	{"IPv4", vip4, func(h *Host) netip.Addr { return h.Addr4 }},
	{"IPv6", vip6, func(h *Host) netip.Addr { return h.Addr6 }},
}

func (f family) url() string { return URL(f.vip, 80) }

// manifoldBin is built once by TestMain, with the race detector; MANIFOLD_BIN names a
// prebuilt one instead (a relative path is taken from the module root, like `make
// build`'s bin/manifold).
var (
	manifoldBin string
	buildErr    error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Geteuid() == 0 {
		manifoldBin, buildErr = buildManifold()
	}
	// An interrupted test binary runs no t.Cleanup; the lab's processes, each in a
	// process group of its own, got no signal either. Remove the lab here.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintf(os.Stderr, "interrupted: removing the %s-* namespaces\n", prefix)
		if err := Cleanup(prefix); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(130)
	}()
	os.Exit(m.Run())
}

func buildManifold() (string, error) {
	root, err := filepath.Abs("../..") // the module root, from test/lab
	if err != nil {
		return "", err
	}
	if bin := os.Getenv("MANIFOLD_BIN"); bin != "" {
		if !filepath.IsAbs(bin) {
			bin = filepath.Join(root, bin)
		}
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("MANIFOLD_BIN: %w", err)
		}
		return bin, nil
	}
	// -race: the daemon's goroutines (run loop, API, health checks, BGP) run under the
	// race detector, and Lab.Close fails the test whose daemon reported a race.
	cmd := hostprog.Command(hostprog.Go, "build", "-race", "-o", "bin/manifold-race", "./cmd/manifold")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -race -o bin/manifold-race ./cmd/manifold: %w\n%s", err, out)
	}
	return filepath.Join(root, "bin", "manifold-race"), nil
}

// requireLab skips a test that cannot build a lab on this machine.
func requireLab(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "needs root")
	if err := hostprog.Check(hostprog.Nginx, hostprog.Ethtool, hostprog.Curl); err != nil {
		testenv.Missing(t, err)
	}
}

// requireManifold skips a test that cannot build a lab here, and fails one whose
// manifold binary did not build.
func requireManifold(t *testing.T) {
	t.Helper()
	requireLab(t)
	if buildErr != nil {
		t.Fatalf("cannot build manifold (make build shows the same): %v", buildErr)
	}
}

// newLab builds client, router, the given LB nodes and be1..be3, torn down (and
// dumped first, on failure) when the test ends.
func newLab(t *testing.T, lbNodes ...string) *Lab {
	t.Helper()
	hosts := []HostSpec{{Role: "client", Kind: Client}}
	for _, role := range lbNodes {
		hosts = append(hosts, HostSpec{Role: role, Kind: LBNode})
	}
	for _, role := range []string{"be1", "be2", "be3"} {
		hosts = append(hosts, HostSpec{Role: role, Kind: Backend})
	}
	return newLabOf(t, hosts...)
}

// newLabOf builds a lab of the given hosts, torn down (and dumped first, on failure)
// when the test ends.
func newLabOf(t *testing.T, hosts ...HostSpec) *Lab {
	t.Helper()
	l, err := New(Spec{Prefix: prefix, Hosts: hosts, Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	t.Cleanup(func() { l.Dump(t) })
	return l
}

// testLab is a lab with nginx and `manifold backend` on every backend and `manifold
// run` on every LB node, the VIPs routed to the first node.
type testLab struct {
	*Lab
	client   *Host
	backends []*Host
	nginx    map[string]*Process // by backend role
	agents   map[string]*Process // by backend role
	nodes    map[string]*Node    // by LB node role
}

func startLab(t *testing.T, lbNodes []string, health *Health) *testLab {
	t.Helper()
	tl := startBackends(t, lbNodes)
	for i, h := range tl.HostsOf(LBNode) {
		// Every other node lists its backends in reverse: the order must not matter.
		bes := slices.Clone(tl.backends)
		if i%2 == 1 {
			slices.Reverse(bes)
		}
		n, err := tl.StartNode(manifoldBin, h, nodeConfig(h, bes, health))
		if err != nil {
			t.Fatal(err)
		}
		tl.nodes[h.Role] = n
	}
	tl.routeVIPs(t, tl.Host(lbNodes[0]))
	return tl
}

// startBackends builds the lab and starts nginx and `manifold backend` on every
// backend; the LB nodes are left to the caller.
func startBackends(t *testing.T, lbNodes []string) *testLab {
	t.Helper()
	requireManifold(t)
	tl := &testLab{Lab: newLab(t, lbNodes...), nginx: map[string]*Process{}, agents: map[string]*Process{}, nodes: map[string]*Node{}}
	tl.client = tl.Host("client")
	tl.backends = tl.HostsOf(Backend)
	for _, be := range tl.backends {
		p, err := tl.StartNginx(be)
		if err != nil {
			t.Fatal(err)
		}
		tl.nginx[be.Role] = p
		if tl.agents[be.Role], err = tl.StartBackendAgent(manifoldBin, be, vip4, vip6); err != nil {
			t.Fatal(err)
		}
	}
	return tl
}

func nodeConfig(h *Host, backends []*Host, health *Health) NodeConfig {
	c := NodeConfig{Name: h.Role, Address: h.Addr4, Address6: h.Addr6}
	for _, f := range families {
		s := Service{Name: "web-" + strings.ToLower(f.name), VIP: f.vip, Port: 80, Health: health}
		for _, be := range backends {
			s.Backends = append(s.Backends, f.addr(be))
		}
		c.Services = append(c.Services, s)
	}
	return c
}

// routeVIPs points the router's routes for both VIPs at node and waits until new
// connections through it reach every backend.
func (tl *testLab) routeVIPs(t *testing.T, node *Host) {
	t.Helper()
	for _, f := range families {
		if err := tl.RouteVIP(f.vip, node); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range families {
		tl.waitReaches(t, f, roles(tl.backends))
	}
}

// waitReaches waits until new connections to f's VIP have reached every backend of want.
func (tl *testLab) waitReaches(t *testing.T, f family, want []string) {
	t.Helper()
	seen := map[string]bool{}
	var lastErr error
	err := Eventually(20*time.Second, 10*time.Millisecond, func() error {
		body, err := HTTPGet(tl.client.NS, f.url(), 0)
		if err != nil {
			lastErr = err
		} else {
			seen[strings.TrimSpace(body)] = true
		}
		for _, be := range want {
			if !seen[be] {
				return fmt.Errorf("%s via the VIP: reached %v of %v (last error: %v)", f.name, keys(seen), want, lastErr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitAvoids waits until 30 new connections in a row to f's VIP succeed without
// reaching backend bad: (2/3)^30 ≈ 5e-6 is the chance of such a run before a change
// that should remove bad from three backends has been applied.
func (tl *testLab) waitAvoids(t *testing.T, f family, bad string) {
	t.Helper()
	streak := 0
	err := Eventually(20*time.Second, time.Millisecond, func() error {
		body, err := HTTPGet(tl.client.NS, f.url(), 0)
		switch {
		case err != nil:
			streak = 0
			return err
		case strings.TrimSpace(body) == bad:
			streak = 0
			return fmt.Errorf("%s: a new connection still reached %s", f.name, bad)
		}
		if streak++; streak < 30 {
			return fmt.Errorf("%s: %d new connections in a row avoid %s", f.name, streak, bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// held is one keep-alive connection and the backend it answered from.
type held struct {
	f       family
	conn    *KeepAliveConn
	backend string
}

// holdConns opens n keep-alive connections per family, sends one request on each and
// checks that together they reach every backend.
func (tl *testLab) holdConns(t *testing.T, n int) []*held {
	t.Helper()
	var hs []*held
	for _, f := range families {
		per := map[string]int{}
		for range n {
			c, err := DialKeepAlive(tl.client.NS, f.url(), 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			body, err := c.Do()
			if err != nil {
				t.Fatal(err)
			}
			h := &held{f: f, conn: c, backend: strings.TrimSpace(body)}
			per[h.backend]++
			hs = append(hs, h)
		}
		t.Logf("%s: %d keep-alive connections per backend: %v", f.name, n, per)
		if len(per) != len(tl.backends) {
			t.Fatalf("%s: %d keep-alive connections reached only %v", f.name, n, keys(per))
		}
	}
	return hs
}

// TestTopology checks the lab itself with plain kernel routing, without manifold: the
// client reaches every backend's nginx in both families, and a VIP on a backend's lo,
// routed straight to it, answers with the VIP as source.
func TestTopology(t *testing.T) {
	requireLab(t)
	l := newLab(t, "lb1")
	client, be1 := l.Host("client"), l.Host("be1")
	for _, be := range l.HostsOf(Backend) {
		if _, err := l.StartNginx(be); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			for _, be := range l.HostsOf(Backend) {
				body, err := HTTPGet(client.NS, URL(f.addr(be), 80), 0)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSpace(body); got != be.Role {
					t.Errorf("GET %s answered %q, want %q", URL(f.addr(be), 80), got, be.Role)
				}
			}
			if err := be1.addAddr("lo", f.vip, f.vip.BitLen()); err != nil {
				t.Fatal(err)
			}
			if err := be1.WaitLocal(3*time.Second, f.vip); err != nil {
				t.Fatal(err)
			}
			if err := l.RouteVIP(f.vip, be1); err != nil {
				t.Fatal(err)
			}
			body, err := HTTPGet(client.NS, f.url(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(body); got != "be1" {
				t.Errorf("GET %s answered %q, want be1", f.url(), got)
			}
		})
	}
}

// TestSpreadAndDSR: new connections to the VIP spread over every backend, and the
// replies do not go through the LB node.
//
// The proof is in the interface counters over the run: the LB node's eth0 receives and
// sends (XDP_TX) about as many packets as the client sent, while the client received
// about as many as the backends sent. Had the replies crossed the LB node, its counters
// would carry the client's received packets too.
func TestSpreadAndDSR(t *testing.T) {
	tl := startLab(t, []string{"lb1"}, nil)
	lb := tl.Host("lb1")
	const conns = 300
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			before := tl.counters(t, lb)
			forwardedBefore := forwarded(t, lb)
			per := map[string]int{}
			for i := range conns {
				body, err := HTTPGet(tl.client.NS, f.url(), 0)
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				per[strings.TrimSpace(body)]++
			}
			after := tl.counters(t, lb)
			fwd := forwarded(t, lb) - forwardedBefore
			t.Logf("%d new connections per backend: %v", conns, per)
			for _, be := range tl.backends {
				if n := per[be.Role]; n*5 < conns {
					t.Errorf("%s got %d of %d connections, want at least 20%%", be.Role, n, conns)
				}
			}

			d := after.minus(before)
			t.Logf("packets: client sent %d, received %d; %s eth0 received %d, sent %d, manifold_packets_total +%d; backends sent %d",
				d.clientTx, d.clientRx, lb.Role, d.lbRx, d.lbTx, fwd, d.backendsTx)
			slack := d.clientTx/20 + 20 // neighbour discovery and the like
			if d.lbRx+slack < d.clientTx || d.lbTx+slack < d.clientTx {
				t.Errorf("%s received %d and sent %d packets, fewer than the %d the client sent: the requests did not all go through it",
					lb.Role, d.lbRx, d.lbTx, d.clientTx)
			}
			if d.lbRx > d.clientTx+slack || d.lbTx > d.clientTx+slack {
				t.Errorf("%s received %d and sent %d packets for the client's %d (the client received %d): replies went through the LB node",
					lb.Role, d.lbRx, d.lbTx, d.clientTx, d.clientRx)
			}
			// the node's own count (manifold_packets_total) must be the packets the
			// client sent to the VIP: no more, and no fewer than all but ARP/ND
			if fwd > d.clientTx || fwd+slack < d.clientTx {
				t.Errorf("manifold_packets_total grew by %d; the client sent %d packets to the VIP", fwd, d.clientTx)
			}
			if d.backendsTx+slack < d.clientRx {
				t.Errorf("the backends sent %d packets, the client received %d: the replies did not come from the backends",
					d.backendsTx, d.clientRx)
			}
		})
	}
}

// forwarded sums manifold_packets_total over every service and backend of a node, as
// scraped from its /metrics.
func forwarded(t *testing.T, lb *Host) uint64 {
	t.Helper()
	_, families, err := Scrape(lb, "127.0.0.1:9100")
	if err != nil {
		t.Fatal(err)
	}
	return uint64(MetricSum(families, "manifold_packets_total"))
}

// A reload with a bad file changes nothing: the daemon says why, keeps running, keeps
// every backend (the bad file also drops one, which must not take effect), and counts
// the failure.
func TestBadReloadChangesNothing(t *testing.T) {
	tl := startLab(t, []string{"lb1"}, nil)
	node := tl.nodes["lb1"]
	bad := append(nodeConfig(tl.Host("lb1"), tl.backends[:2], nil).YAML(), "colour: blue\n"...)
	if err := writeFileAtomic(node.ConfigPath, bad); err != nil {
		t.Fatal(err)
	}
	if err := node.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line, err := node.WaitLog(10*time.Second, func(l string) bool { return strings.Contains(l, "reload rejected") })
	if err != nil {
		t.Fatalf("no rejection logged: %v", err)
	}
	if !strings.Contains(line, "colour: unknown field") {
		t.Errorf("the rejection does not say why: %s", line)
	}
	for _, f := range families {
		tl.waitReaches(t, f, roles(tl.backends)) // be3 included: nothing was applied
	}
	if !node.Running() {
		t.Fatalf("manifold run exited after a bad reload: %v", node.ExitErr())
	}
	out, err := tl.Host("lb1").Output(hostprog.Curl, "-sf", "http://127.0.0.1:9100/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nmanifold_config_reload_failures_total 1\n") {
		t.Errorf("reload failure not counted:\n%s", grepLines(out, "manifold_config_reload"))
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

type packetCounts struct{ clientTx, clientRx, lbRx, lbTx, backendsTx uint64 }

func (a packetCounts) minus(b packetCounts) packetCounts {
	return packetCounts{a.clientTx - b.clientTx, a.clientRx - b.clientRx, a.lbRx - b.lbRx, a.lbTx - b.lbTx, a.backendsTx - b.backendsTx}
}

func (tl *testLab) counters(t *testing.T, lb *Host) packetCounts {
	t.Helper()
	stats := func(h *Host) (rx, tx uint64) {
		s, err := h.LinkStats(HostLink)
		if err != nil {
			t.Fatal(err)
		}
		return s.RxPackets, s.TxPackets
	}
	var c packetCounts
	c.clientRx, c.clientTx = stats(tl.client)
	c.lbRx, c.lbTx = stats(lb)
	for _, be := range tl.backends {
		_, tx := stats(be)
		c.backendsTx += tx
	}
	return c
}

// TestSameBackendOnEveryNode: two nodes with the same backends, listed in another
// order, send the same flows (same client ports) to the same backends.
func TestSameBackendOnEveryNode(t *testing.T) {
	tl := startLab(t, []string{"lb1", "lb2"}, nil)
	const flows = 60
	const firstPort = 61000 // above the default ephemeral range
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			first := tl.flowsThrough(t, f, tl.Host("lb1"), firstPort, flows, roles(tl.backends))
			second := tl.flowsThrough(t, f, tl.Host("lb2"), firstPort, flows, roles(tl.backends))
			per := map[string]int{}
			for port := firstPort; port < firstPort+flows; port++ {
				per[first[port]]++
				if first[port] != second[port] {
					t.Errorf("client port %d: lb1 chose %s, lb2 chose %s", port, first[port], second[port])
				}
			}
			t.Logf("%d flows per backend: %v", flows, per)
			if len(per) != len(tl.backends) {
				t.Errorf("%d flows reached only %v: the check is too weak", flows, keys(per))
			}
		})
	}
}

// flowsThrough routes f's VIP through node (waiting until new connections reach each
// of reach), sends one connection from each client port of [firstPort, firstPort+flows)
// and returns the backend that answered each; it fails the test if the flows did not
// go through node.
func (tl *testLab) flowsThrough(t *testing.T, f family, node *Host, firstPort, flows int, reach []string) map[int]string {
	t.Helper()
	if err := tl.RouteVIP(f.vip, node); err != nil {
		t.Fatal(err)
	}
	tl.waitReaches(t, f, reach)
	rx0, err := node.LinkStats(HostLink)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for port := firstPort; port < firstPort+flows; port++ {
		body, err := HTTPGet(tl.client.NS, f.url(), port)
		if err != nil {
			t.Fatalf("through %s: %v", node.Role, err)
		}
		got[port] = strings.TrimSpace(body)
	}
	rx1, err := node.LinkStats(HostLink)
	if err != nil {
		t.Fatal(err)
	}
	if n := rx1.RxPackets - rx0.RxPackets; n < 3*uint64(flows) {
		t.Fatalf("%s received %d packets for %d connections: the flows did not go through it", node.Role, n, flows)
	}
	return got
}

// TestReloadKeepsEstablishedFlows: removing a backend with a config reload (SIGHUP)
// breaks none of the connections held to the other backends.
func TestReloadKeepsEstablishedFlows(t *testing.T) {
	tl := startLab(t, []string{"lb1"}, nil)
	node := tl.nodes["lb1"]
	conns := tl.holdConns(t, 100)

	removed, kept := tl.backends[2], tl.backends[:2]
	if err := node.Reload(nodeConfig(tl.Host("lb1"), kept, nil)); err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		tl.waitAvoids(t, f, removed.Role)
	}

	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			checked, removedOK := 0, 0
			for _, h := range conns {
				if h.f.name != f.name {
					continue
				}
				body, err := h.conn.Do()
				if h.backend == removed.Role {
					if err == nil {
						removedOK++
					}
					continue
				}
				checked++
				if err != nil {
					t.Errorf("connection from port %d to %s broke: %v", h.conn.LocalPort(), h.backend, err)
				} else if got := strings.TrimSpace(body); got != h.backend {
					t.Errorf("connection from port %d moved from %s to %s", h.conn.LocalPort(), h.backend, got)
				}
			}
			t.Logf("%d connections to remaining backends checked; %d to removed %s still answered", checked, removedOK, removed.Role)
		})
	}
	if !node.Running() {
		t.Fatalf("manifold run exited after the reload: %v", node.ExitErr())
	}
}

// TestHealthCheckMarksBackendDown: when a backend's nginx stops, the health check
// marks it down; new connections and held flows, re-dialled on the same 5-tuple, go
// to the live backends only.
func TestHealthCheckMarksBackendDown(t *testing.T) {
	health := &Health{Kind: "tcp", Port: 80, Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 1, Fall: 2}
	tl := startLab(t, []string{"lb1"}, health)
	node := tl.nodes["lb1"]
	conns := tl.holdConns(t, 60)

	dead := tl.backends[1]
	if err := tl.nginx[dead.Role].Stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		addr := f.addr(dead).String()
		line, err := node.WaitLog(10*time.Second, func(line string) bool {
			return strings.Contains(line, addr) && strings.Contains(strings.ToLower(line), "down")
		})
		if err != nil {
			t.Fatalf("%s: manifold did not log %s (%s) going down: %v", f.name, dead.Role, addr, err)
		}
		t.Logf("manifold: %s", line)
	}
	for _, f := range families {
		tl.waitAvoids(t, f, dead.Role)
	}

	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			const fresh = 150
			per := map[string]int{}
			for i := range fresh {
				body, err := HTTPGet(tl.client.NS, f.url(), 0)
				if err != nil {
					t.Fatalf("new connection %d: %v", i, err)
				}
				per[strings.TrimSpace(body)]++
			}
			t.Logf("%d new connections per backend: %v", fresh, per)
			if per[dead.Role] > 0 {
				t.Errorf("%d new connections reached %s, which is down", per[dead.Role], dead.Role)
			}

			rehashed := map[string]int{}
			for _, h := range conns {
				if h.f.name != f.name {
					continue
				}
				if h.backend != dead.Role {
					// Established flows keep their backend while it is up.
					body, err := h.conn.Do()
					if err != nil {
						t.Errorf("connection from port %d to %s (up) broke: %v", h.conn.LocalPort(), h.backend, err)
					} else if got := strings.TrimSpace(body); got != h.backend {
						t.Errorf("connection from port %d moved from %s (up) to %s", h.conn.LocalPort(), h.backend, got)
					}
					continue
				}
				port := h.conn.LocalPort()
				h.conn.Close()
				body, err := HTTPGet(tl.client.NS, f.url(), port)
				if err != nil {
					t.Errorf("new connection from port %d (was on %s): %v", port, dead.Role, err)
					continue
				}
				got := strings.TrimSpace(body)
				rehashed[got]++
				if got == dead.Role {
					t.Errorf("flow from port %d still reaches %s, which is down", port, dead.Role)
				}
			}
			t.Logf("flows of %s re-dialled on the same 5-tuple, per backend: %v", dead.Role, rehashed)
		})
	}
	if !node.Running() {
		t.Fatalf("manifold run exited: %v", node.ExitErr())
	}
}

// TestBackendAgentReload: SIGHUP makes `manifold backend` apply a changed backend.vips
// (a VIP added goes on lo and is decapsulated, one dropped leaves lo), refuses a change
// that needs a restart and keeps what runs, and traffic through the node goes on.
func TestBackendAgentReload(t *testing.T) {
	tl := startLab(t, []string{"lb1"}, nil)
	be := tl.backends[0]
	agent := tl.agents[be.Role]
	extra := netip.MustParseAddr("198.51.100.77")
	// the agent's log lines about a SIGHUP, in order: each reload waits for one more
	answers := func() []string {
		var out []string
		for line := range strings.Lines(agent.Log()) {
			if strings.Contains(line, "SIGHUP") {
				out = append(out, strings.TrimSpace(line))
			}
		}
		return out
	}
	reload := func(iface string, vips ...netip.Addr) string {
		t.Helper()
		before := len(answers())
		if _, err := tl.WriteBackendAgentConfig(be, iface, "", vips...); err != nil {
			t.Fatal(err)
		}
		if err := agent.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		err := Eventually(10*time.Second, 20*time.Millisecond, func() error {
			if len(answers()) > before {
				return nil
			}
			if !agent.Running() {
				return fmt.Errorf("manifold backend exited on SIGHUP: %v", agent.ExitErr())
			}
			return errors.New("manifold backend logged nothing about the SIGHUP")
		})
		if err != nil {
			t.Fatal(err)
		}
		return answers()[before]
	}

	if line := reload(HostLink, vip4, vip6, extra); !strings.Contains(line, "reloaded") {
		t.Fatalf("adding a VIP: %s", line)
	}
	if err := be.WaitLocal(5*time.Second, extra); err != nil {
		t.Errorf("the VIP added by the reload is not on lo: %v", err)
	}
	if line := reload("eth9", vip4, vip6); !strings.Contains(line, "refused") || !strings.Contains(line, "backend.interface changed") {
		t.Errorf("a changed interface was not refused: %s", line)
	}
	if local, err := be.IsLocal(extra); err != nil || !local {
		t.Errorf("a refused reload changed what runs: %s local %v (%v)", extra, local, err)
	}
	if line := reload(HostLink, vip4, vip6); !strings.Contains(line, "reloaded") {
		t.Fatalf("dropping a VIP: %s", line)
	}
	if local, err := be.IsLocal(extra); err != nil || local {
		t.Errorf("the VIP dropped by the reload is still on lo (%v)", err)
	}
	if !agent.Running() {
		t.Fatalf("manifold backend exited after SIGHUP: %v", agent.ExitErr())
	}
	for _, f := range families {
		tl.waitReaches(t, f, []string{be.Role})
	}
}

// TestDaemonsUndoOnExit: on SIGTERM, `manifold run` exits 0 and detaches its XDP
// program; `manifold backend` exits 0 and removes its decapsulation program and the
// VIPs from lo.
func TestDaemonsUndoOnExit(t *testing.T) {
	tl := startLab(t, []string{"lb1"}, nil)
	lb, be := tl.Host("lb1"), tl.backends[0]
	if progs, err := be.TCXIngress(HostLink); err != nil || len(progs) == 0 {
		t.Logf("%s: no tcx ingress program seen while the agent runs (%v): the check after it exits proves little", be.Role, err)
	}

	// the lab leaves forwarding off on the node: manifold run turns it on, says so, and
	// puts it back when it exits
	forwarding := []string{"net.ipv4.conf." + HostLink + ".forwarding", "net.ipv6.conf." + HostLink + ".forwarding"}
	for _, name := range forwarding {
		if v, err := lb.SysctlValue(name); err != nil || v != "1" {
			t.Errorf("%s: %s = %q (%v) while manifold run serves, want 1", lb.NS, name, v, err)
		}
		if !strings.Contains(tl.nodes[lb.Role].Log(), `msg="sysctl set" name=`+name+" value=1") {
			t.Errorf("manifold run did not log that it set %s", name)
		}
	}
	if err := tl.nodes[lb.Role].Stop(); err != nil {
		t.Errorf("manifold run: %v", err)
	}
	if id, err := lb.XDPProgID(HostLink); err != nil || id != 0 {
		t.Errorf("%s:%s after manifold run exited: XDP program id %d (%v), want none", lb.NS, HostLink, id, err)
	}
	for _, name := range forwarding {
		if v, err := lb.SysctlValue(name); err != nil || v != "0" {
			t.Errorf("%s: %s = %q (%v) after manifold run exited, want the 0 it found", lb.NS, name, v, err)
		}
	}

	if err := tl.agents[be.Role].Stop(); err != nil {
		t.Errorf("manifold backend: %v", err)
	}
	for _, f := range families {
		if local, err := be.IsLocal(f.vip); err != nil || local {
			t.Errorf("%s: VIP %s still local after manifold backend exited (%v)", be.NS, f.vip, err)
		}
	}
	if progs, err := be.TCXIngress(HostLink); err != nil || len(progs) > 0 {
		t.Errorf("%s:%s after manifold backend exited: tcx ingress programs %v (%v), want none", be.NS, HostLink, progs, err)
	}
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// serveHTTP runs a plain HTTP server (net/http, nothing of manifold's) with handler in
// h's namespace, listening on addr (":port" for every address). It stops when the test
// ends, which fails if the server ended otherwise.
func serveHTTP(t *testing.T, h *Host, addr string, handler http.HandlerFunc) {
	t.Helper()
	var ln net.Listener
	err := InNamespace(h.NS, func() (err error) {
		ln, err = net.Listen("tcp", addr) // the socket stays in the namespace
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: RequestTimeout}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("HTTP server on %s: %v", h.Role, err)
		}
	})
}
