package lab

// The live lab of global steering: two edge sites, each a router running BIRD and two
// nodes announcing the VIP to it over BGP (ECMP at the router), two origins of two
// backends each, etcd, two controllers, clients that offer more than the closest
// origin takes.
//
//	c-sjc ─┐                ┌─ lb-sjc1  etcd; controller a
//	       r-sjc (BIRD) ────┤                                 ┌─ us1 us2  origin us, 100/s
//	         │              └─ lb-sjc2                        │
//	         └──────────────────────── router ────────────────┤
//	         ┌─────────────────────────┘                      │
//	       r-ams (BIRD) ────┬─ lb-ams1  controller b          └─ eu1 eu2  origin eu, 400/s
//	c-ams ─┘                └─ lb-ams2
//
// Each site's client reaches its own site's nodes, as anycast takes a client to the
// closest edge: its edge router has the VIP from its nodes' BGP sessions and spreads
// the client's connections over them by their 5-tuple.
//
// Distance: the lab has no netem, so the RTT is the application's (OriginServer): the
// backends answer the HTTP health check after the RTT from the checking node's site,
// us near sjc and eu near ams. The origins are listed eu first: sjc going to us first
// shows that the measured RTT, not the list, decides.

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/metrics"
	"github.com/manifoldlb/manifold/internal/steer"
	"github.com/manifoldlb/manifold/internal/testenv"
)

const (
	steerInterval = time.Second
	steerLease    = 2 * time.Second
	// the health check: a backend is down after fall failed checks
	steerCheckInterval = 500 * time.Millisecond
	steerCheckFall     = 2
	// detection is the health check's detection time: fall checks, and the interval the
	// failure may start in
	detection = steerCheckInterval*steerCheckFall + steerCheckInterval
	// publication is how long a node's record may take to show a change (it publishes
	// every second)
	publication = time.Second

	usCapacity, euCapacity   = 100, 400
	sjcLow, sjcHigh, amsRate = 60, 125, 25
)

// rttOf is the RTT from each site to each origin.
var rttOf = map[string]map[string]time.Duration{
	"us": {"sjc": 5 * time.Millisecond, "ams": 40 * time.Millisecond},
	"eu": {"sjc": 40 * time.Millisecond, "ams": 5 * time.Millisecond},
}

// rttSlack is what a measured RTT may exceed the configured one by: the connect and
// the HTTP exchange of the check, in a -race build on a shared machine.
const rttSlack = 20 * time.Millisecond

// steerSites are the lab's sites, each with its nodes.
var steerSites = map[string][]string{"sjc": {"lb-sjc1", "lb-sjc2"}, "ams": {"lb-ams1", "lb-ams2"}}

func TestSteering(t *testing.T) {
	requireLab(t)
	if err := hostprog.Check(hostprog.Etcd, hostprog.Bird, hostprog.Birdc); err != nil {
		testenv.Missing(t, err)
	}
	if buildErr != nil {
		t.Fatalf("cannot build manifold (make build shows the same): %v", buildErr)
	}
	hosts := []HostSpec{{Role: "r-sjc", Kind: EdgeRouter}, {Role: "r-ams", Kind: EdgeRouter}}
	for _, site := range []string{"sjc", "ams"} {
		hosts = append(hosts, HostSpec{Role: "c-" + site, Kind: Client, Via: "r-" + site})
		for _, role := range steerSites[site] {
			hosts = append(hosts, HostSpec{Role: role, Kind: LBNode, Via: "r-" + site})
		}
	}
	for _, role := range []string{"us1", "us2", "eu1", "eu2"} {
		hosts = append(hosts, HostSpec{Role: role, Kind: Backend})
	}
	l := newLabOf(t, hosts...)
	siteOf := map[*Host]string{}
	for site, roles := range steerSites {
		for _, role := range roles {
			siteOf[l.Host(role)] = site
		}
	}
	origins := map[string][]*OriginServer{}
	var backends strings.Builder
	for _, role := range []string{"us1", "us2", "eu1", "eu2"} {
		h, origin := l.Host(role), role[:2]
		if _, err := l.StartBackendAgent(manifoldBin, h, vip4); err != nil {
			t.Fatal(err)
		}
		rtt := map[netip.Addr]time.Duration{}
		for lb, site := range siteOf {
			rtt[lb.Addr4] = rttOf[origin][site]
		}
		o, err := StartOriginServer(h, rtt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = o.Close() })
		origins[origin] = append(origins[origin], o)
		fmt.Fprintf(&backends, "      - {address: %s, origin: %s}\n", h.Addr4, origin)
	}

	first := l.Host("lb-sjc1")
	etcd, err := l.StartEtcd(first)
	if err != nil {
		t.Fatal(err)
	}
	nodeCfg := func(h *Host) NodeConfig {
		return NodeConfig{Name: h.Role, Site: siteOf[h], Address: h.Addr4, Fleet: &Fleet{Endpoints: etcd.Endpoints()},
			// no drain at the end: the test is over by then
			BGP: &BGP{ASN: NodeASN, RouterID: h.Addr4, DrainTime: time.Millisecond, Peers: []BGPPeer{{Address: h.Gateway4, ASN: RouterASN}}}}
	}
	// a node's file ending in its services section, which the service with origins
	// (the lab's NodeConfig knows none) completes
	services := string(NodeConfig{Name: "import", Address: first.Addr4}.YAML()) + fmt.Sprintf(`  - name: web
    vip: %s
    port: 80
    protocol: tcp
    origins:
      - {name: eu, capacity: %d}
      - {name: us, capacity: %d}
    backends:
%s    health: {kind: http, port: %d, path: /health, interval: %s, timeout: 300ms, rise: 1, fall: %d}
`, vip4, euCapacity, usCapacity, backends.String(), HealthPort, steerCheckInterval, steerCheckFall)
	if err := l.FleetImportFile(manifoldBin, first, nodeCfg(first), []byte(services), false); err != nil {
		t.Fatal(err)
	}
	birds := map[string]*Bird{}
	for site, roles := range steerSites {
		var peers []RouterPeer
		for _, role := range roles {
			peers = append(peers, RouterPeer{Name: strings.ReplaceAll(role, "-", "_"), Address: l.Host(role).Addr4, ASN: NodeASN})
		}
		if birds[site], err = l.StartEdgeBird(l.Host("r-"+site), peers, RouterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apis := map[string]*NodeAPI{}
	for lb := range siteOf {
		if _, err := l.StartNode(manifoldBin, lb, nodeCfg(lb)); err != nil {
			t.Fatal(err)
		}
		apis[lb.Role] = NewNodeAPI(lb)
	}
	sjc := apis["lb-sjc1"] // the node whose view of the shares the test follows
	t.Log("each site's router routes the VIP over its two nodes (ECMP)")
	for site, roles := range steerSites {
		var want []netip.Addr
		for _, role := range roles {
			want = append(want, l.Host(role).Addr4)
		}
		took, err := birds[site].WaitNextHops(vip4, want, 30*time.Second)
		if err != nil {
			t.Fatalf("r-%s: %v", site, err)
		}
		t.Logf("  r-%s: %s via %v, %v after the nodes started", site, vip4, want, took.Round(time.Millisecond))
	}
	controllers := map[string]*Process{}
	controllerHost := map[string]*Host{"a": first, "b": l.Host("lb-ams1")}
	for name, h := range controllerHost {
		if controllers[name], err = l.StartSteer(manifoldBin, h, name, etcd.Endpoints(), steerInterval, steerLease); err != nil {
			t.Fatal(err)
		}
	}

	t.Log("the RTT each node measures to each origin (the mean over its backends), and the controller's per site and origin")
	err = Eventually(20*time.Second, 100*time.Millisecond, func() error {
		var fl wire.FleetStatus
		if err := sjc.Get("/api/v1/fleet", &fl); err != nil {
			return err
		}
		seen := 0
		for _, n := range fl.Nodes {
			for _, s := range n.Services {
				if len(s.Backends) != 0 {
					return fmt.Errorf("%s lists %s by backend, want one entry per origin", n.Name, s.Name)
				}
				for _, o := range s.Origins {
					want := rttOf[o.Name][n.Site]
					got := time.Duration(o.RTTMilliseconds * float64(time.Millisecond))
					if got < want || got > want+rttSlack {
						return fmt.Errorf("%s (site %s) measures %v to %s, configured %v", n.Name, n.Site, got, o.Name, want)
					}
					seen++
				}
			}
		}
		if seen != 8 {
			return fmt.Errorf("%d origins in the nodes' records, want 2 per node of 4", seen)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := waitSteering(sjc, 10*time.Second, func(st *wire.Steering) error {
		for _, site := range st.Decision.Sites {
			for _, sh := range site.Shares {
				want := rttOf[sh.Origin][site.Site]
				if got := time.Duration(sh.RTTMs * float64(time.Millisecond)); got < want || got > want+rttSlack {
					return fmt.Errorf("the controller takes %s → %s at %v, configured %v", site.Site, sh.Origin, got, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, site := range st.Decision.Sites {
		for _, sh := range site.Shares {
			t.Logf("  %s → %s: %.1f ms (configured %v)", site.Site, sh.Origin, sh.RTTMs, rttOf[sh.Origin][site.Site])
		}
	}

	t.Logf("below capacity: sjc offers %d/s, ams %d/s; each site all on its closest origin", sjcLow, amsRate)
	loads := map[string]*OfferedLoad{
		"sjc": StartOfferedLoad(l.Host("c-sjc").NS, URL(vip4, 80), sjcLow),
		"ams": StartOfferedLoad(l.Host("c-ams").NS, URL(vip4, 80), amsRate),
	}
	t.Cleanup(func() {
		for _, ld := range loads {
			ld.Stop()
		}
	})
	if _, err := waitSteering(sjc, 20*time.Second, shares(map[string]map[string]float64{"sjc": {"us": 1, "eu": 0}, "ams": {"us": 0, "eu": 1}})); err != nil {
		t.Fatal(err)
	}

	t.Logf("above us's capacity: sjc offers %d/s; within 30 s the shares settle and no origin takes more than its capacity + 5 %%", sjcHigh)
	changed := time.Now()
	loads["sjc"].SetRate(sjcHigh)
	st, err = waitSteering(sjc, 20*time.Second, func(st *wire.Steering) error {
		for _, site := range st.Decision.Sites {
			for _, sh := range site.Shares {
				if math.Abs(sh.Share-sh.Target) > 0.01 {
					return fmt.Errorf("%s → %s: share %.3f, target %.3f (round %d)", site.Site, sh.Origin, sh.Share, sh.Target, st.Round)
				}
			}
		}
		// us takes 100 of sjc's 125/s: 20 % spilled to eu, ± the demand's noise
		if us := st.Shares["sjc"]["us"]; us < 0.7 || us > 0.9 {
			return fmt.Errorf("sjc's share of us is %.3f, want about %.2f", us, float64(usCapacity)/sjcHigh)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	settled := time.Since(changed)
	// The window ends within 30 s of the change. Each flow's origin is a hash: over a
	// window of W seconds, us's count is binomial around its share, ±1.4 % of its
	// capacity at W = 10 s, plus the noise of the demand the target is computed from;
	// 20 s keep the 5 % bound ~3 of those deviations away.
	window := min(30*time.Second-settled, 20*time.Second)
	if window < 10*time.Second {
		t.Fatalf("the shares settled %v after the load change: too late to measure within 30 s", settled.Round(time.Millisecond))
	}
	t.Logf("  settled %v after the change: %s", settled.Round(time.Millisecond), describe(st))
	before, sentBefore, flowsBefore := originConns(origins), sentBy(loads), newFlowsOf(t, siteOf)
	start := time.Now()
	time.Sleep(window) // the measurement's window: the origins count what they take meanwhile
	after, sentAfter, flowsAfter := originConns(origins), sentBy(loads), newFlowsOf(t, siteOf)
	elapsed := time.Since(start).Seconds()
	for site, roles := range steerSites {
		sent := float64(sentAfter[site] - sentBefore[site])
		t.Logf("  %s offered %.1f new connections/s", site, sent/elapsed)
		// ECMP: the router spreads the site's connections over both its nodes (by their
		// 5-tuple: each node's part is binomial, ±1 % of the site's over the window)
		for _, role := range roles {
			part := (flowsAfter[role] - flowsBefore[role]) / sent
			t.Logf("    %s took %.0f %% of them", role, 100*part)
			if part < 0.3 || part > 0.7 {
				t.Errorf("%s took %.0f %% of %s's new connections: the router does not spread them over the site's two nodes", role, 100*part, site)
			}
		}
	}
	if st, err := waitSteering(sjc, 5*time.Second, func(*wire.Steering) error { return nil }); err == nil {
		t.Logf("  after the window: %s", describe(st))
	}
	for origin, capacity := range map[string]float64{"us": usCapacity, "eu": euCapacity} {
		rate := float64(after[origin]-before[origin]) / elapsed
		t.Logf("  %s takes %.1f new connections/s (capacity %.0f/s), counted at its backends over %.1f s", origin, rate, capacity, elapsed)
		if rate > 1.05*capacity {
			t.Errorf("%s takes %.1f/s, above its capacity %.0f/s + 5 %%", origin, rate, capacity)
		}
	}
	// closest first: us is filled, not merely relieved
	if rate := float64(after["us"]-before["us"]) / elapsed; rate < 0.85*usCapacity {
		t.Errorf("us takes %.1f/s of its %d/s: sjc spilled more than it needed to", rate, usCapacity)
	}
	for site, ld := range loads {
		if sent, failed := ld.Counts(); failed > 0 {
			t.Errorf("%s: %d of %d requests failed while the shares moved (the last: %v)", site, failed, sent, ld.LastErr())
		}
	}

	t.Log("the leading controller killed: the standby takes over within the lease, and the shares do not move meanwhile")
	st, err = waitSteering(sjc, 5*time.Second, func(*wire.Steering) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	dead := st.Leader
	standby := map[string]string{"a": "b", "b": "a"}[dead]
	if standby == "" {
		t.Fatalf("the shares were written by %q, not by a controller of the lab", dead)
	}
	checkSteerMetrics(t, controllerHost[dead], dead, true, st)
	checkSteerMetrics(t, controllerHost[standby], standby, false, nil)
	checkDashboard(t, controllerHost[dead], l.Host("lb-sjc1"))
	killed := time.Now()
	if err := controllers[dead].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// nothing is written between the kill and the standby's first round: a round of the
	// dead leader seen after the kill must have been made before it (in flight)
	last := st
	took, err := waitSteering(sjc, steerLease+2*steerInterval+2*time.Second, func(st *wire.Steering) error {
		if st.Leader != dead {
			return nil
		}
		if st.Round != last.Round {
			if at, err := time.Parse(time.RFC3339Nano, st.At); err != nil || at.After(killed) {
				t.Errorf("round %d of %s, made at %s, after it was killed at %s", st.Round, dead, st.At, killed.UTC().Format(time.RFC3339Nano))
			}
		}
		last = st
		return fmt.Errorf("still the shares of %s, round %d", dead, st.Round)
	})
	if err != nil {
		t.Fatal(err)
	}
	takeover := time.Since(killed)
	t.Logf("  %s took over %v after %s was killed (lease %v, interval %v), at round %d",
		took.Leader, takeover.Round(time.Millisecond), dead, steerLease, steerInterval, took.Round)
	if took.Leader != standby || took.Round != last.Round+1 {
		t.Errorf("after %s's round %d came %s's round %d", dead, last.Round, took.Leader, took.Round)
	}
	checkSteerMetrics(t, controllerHost[standby], standby, true, took)
	if takeover > steerLease+2*steerInterval {
		t.Errorf("the standby took over %v after the leader died, more than the lease %v and two rounds", takeover, steerLease)
	}
	// the new leader's first round starts from the shares in force: it moves them the
	// law's step toward its target (or onto it, when that close), as the dead leader's
	// next round would have; a leader that started afresh would jump to its target
	for _, site := range took.Decision.Sites {
		for _, sh := range site.Shares {
			from := last.Shares[site.Site][sh.Origin]
			step := from + steer.DefaultGain*(sh.Target-from)
			if math.Abs(sh.Share-step) > 1e-6 && math.Abs(sh.Share-sh.Target) > 1e-9 {
				t.Errorf("the new leader moved %s's share of %s from %.4f to %.4f (target %.4f): not one step from the shares in force",
					site.Site, sh.Origin, from, sh.Share, sh.Target)
			}
		}
	}

	t.Log("every backend of us fails: its share goes to eu within the health check's detection time, the record's publication and a round")
	failed := time.Now()
	for _, o := range origins["us"] {
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
	}
	bound := detection + publication + steerInterval
	if _, err := waitSteering(sjc, bound+time.Second, shares(map[string]map[string]float64{"sjc": {"us": 0, "eu": 1}, "ams": {"us": 0, "eu": 1}})); err != nil {
		t.Fatal(err)
	}
	moved := time.Since(failed)
	t.Logf("  us's shares went to eu %v after its backends failed (detection %v, + publication %v, + a round %v)",
		moved.Round(time.Millisecond), detection, publication, steerInterval)
	if moved > bound {
		t.Errorf("us's shares moved %v after its backends failed, more than %v", moved, bound)
	}
}

// checkSteerMetrics checks a controller's /metrics: promtool accepts it, it says
// whether it leads and counts its rounds; a leader reports what it wrote (st, or a
// later round), a standby no shares.
func checkSteerMetrics(t *testing.T, h *Host, name string, leading bool, st *wire.Steering) {
	t.Helper()
	// a controller counts a round once its write is done, which the nodes may see first
	var body string
	var families map[string]*dto.MetricFamily
	err := Eventually(3*time.Second, 50*time.Millisecond, func() error {
		var err error
		if body, families, err = Scrape(h, SteerMetrics); err != nil {
			return err
		}
		if _, ok := families["manifold_steering_share"]; ok != leading {
			return fmt.Errorf("controller %s: shares reported %v, want %v", name, ok, leading)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
		return
	}
	if hostprog.Check(hostprog.Promtool) == nil {
		if err := metrics.Promtool(body); err != nil {
			t.Errorf("controller %s: %v", name, err)
		}
	}
	controller := map[string]string{"controller": name}
	if v, _ := MetricValue(families, "manifold_steering_leader", controller); v != float64(bit(leading)) {
		t.Errorf("controller %s: manifold_steering_leader %v, want %v", name, v, bit(leading))
	}
	rounds, _ := MetricValue(families, "manifold_steering_rounds_total", controller)
	if !leading {
		t.Logf("  controller %s: standing by, %.0f rounds written", name, rounds)
		return
	}
	if rounds < 1 {
		t.Errorf("controller %s leads and counts %v rounds", name, rounds)
	}
	for origin, capacity := range map[string]float64{"us": usCapacity, "eu": euCapacity} {
		if v, ok := MetricValue(families, "manifold_steering_origin_capacity", map[string]string{"service": "web", "origin": origin}); v != capacity {
			t.Errorf("controller %s: %s's capacity %v (present %v), want %v", name, origin, v, ok, capacity)
		}
		if _, ok := MetricValue(families, "manifold_steering_origin_load", map[string]string{"service": "web", "origin": origin}); !ok {
			t.Errorf("controller %s reports no load of %s", name, origin)
		}
	}
	// the shares of the round it last wrote: st's, or the next few rounds' (the shares
	// have settled, and move by less than a point a round)
	for site, m := range st.Shares {
		for origin, want := range m {
			got, ok := MetricValue(families, "manifold_steering_share", map[string]string{"service": "web", "site": site, "origin": origin})
			if !ok || math.Abs(got-want) > 0.05 {
				t.Errorf("controller %s: manifold_steering_share of %s → %s is %.3f (present %v); it wrote %.3f", name, site, origin, got, ok, want)
			}
		}
	}
	t.Logf("  controller %s: leading, %.0f rounds written, sjc → us %.3f", name, rounds, st.Shares["sjc"]["us"])
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sentBy is how many requests each site's client has sent.
func sentBy(loads map[string]*OfferedLoad) map[string]uint64 {
	out := map[string]uint64{}
	for site, ld := range loads {
		out[site], _ = ld.Counts()
	}
	return out
}

// originConns is how many connections each origin's backends have accepted.
func originConns(origins map[string][]*OriginServer) map[string]uint64 {
	out := map[string]uint64{}
	for origin, servers := range origins {
		for _, o := range servers {
			out[origin] += o.Conns()
		}
	}
	return out
}

// checkDashboard: every metric the shipped Grafana dashboard queries is in the live
// scrapes of a fleet node with BGP, health checks and steering, and of the leading
// steering controller.
func checkDashboard(t *testing.T, controller, node *Host) {
	t.Helper()
	want, err := DashboardMetrics(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	_, fromController, err := Scrape(controller, SteerMetrics)
	if err != nil {
		t.Fatal(err)
	}
	_, fromNode, err := Scrape(node, "127.0.0.1:9100")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range want {
		if fromController[m] == nil && fromNode[m] == nil {
			t.Errorf("the dashboard queries %s, which neither a live node nor the controller serves", m)
		}
	}
	t.Logf("  the dashboard's %d metrics are all served", len(want))
}

// newFlowsOf is NewFlowsOf, failing the test on an error.
func newFlowsOf(t *testing.T, lbs map[*Host]string) map[string]float64 {
	t.Helper()
	out, err := NewFlowsOf(lbs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
