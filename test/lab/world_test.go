package lab

// TestWorld: the global accelerator end to end (world.go draws it). Constant-rate
// generators in every region offer new connections to web (steered over the routed
// origins eu and us) and to tun (a tunnel service steered over home, behind NAT), and
// the acts assert, each over windows of the origins' own counts:
//   - steady state: each region on its closest origin, its connections spread over its
//     site's two nodes; every origin sees the clients' own addresses (DSR for eu and
//     us, the PROXY header for home); plain, not steered, spreads over both backends.
//
// Where it differs from issue 27: the routed origins and the tunnelled one are two
// steered services (web and tun), not one service of three origins, because the XDP
// program cannot yet pass a tunnelled share's new flows up to the node's stack; once
// it can, web takes home as a third origin and the tunnelled origin takes its share
// of web.

import (
	"bufio"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

const (
	worldWindow = 10 * time.Second // the windows
	// constant rates, new connections per second from each region's client
	worldWebRate, worldTunRate = 20, 5
)

var worldCapacity = map[string]float64{"eu": 100, "us": 200, "home": 1000}

// worldBFD are the BFD timers of the world's sessions: a 1 s detection. TestBFD's
// 100 ms × 3 flap here: six -race nodes, four BIRDs, three etcd members and the
// generators share two loaded cores, and a node's BFD that runs 300 ms late resets a
// healthy session. The world's bounds are counted from the detection, whatever it
// takes.
var worldBFD = &RouterBFD{Interval: 250 * time.Millisecond, Multiplier: 4}

func TestWorld(t *testing.T) {
	requireManifold(t)
	if err := hostprog.Check(hostprog.Etcd, hostprog.Bird, hostprog.Birdc, hostprog.Nft); err != nil {
		testenv.Missing(t, err)
	}
	start := time.Now()
	w, err := NewWorld(WorldSpec{Prefix: prefix, Dir: t.TempDir(), Logf: t.Logf, Manifold: manifoldBin, BFD: worldBFD,
		Capacity: worldCapacity, SteerInterval: 500 * time.Millisecond, SteerLease: 2 * time.Second})
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
	ams := w.API["lb-ams1"] // the node whose view of the shares the test follows

	t.Logf("steady state: every region offers %d new connections/s to web and %d/s to tun", worldWebRate, worldTunRate)
	web, tun := map[string]*OfferedLoad{}, map[string]*OfferedLoad{}
	for _, r := range WorldRegions {
		web[r] = StartOfferedLoad(w.Clients[r].NS, URL(WorldWebVIP, 80), worldWebRate)
		tun[r] = StartOfferedLoad(w.Clients[r].NS, URL(WorldTunnelVIP, 80), worldTunRate)
	}
	t.Cleanup(func() {
		for _, r := range WorldRegions {
			web[r].Stop()
			tun[r].Stop()
		}
	})
	closest := map[string]map[string]float64{"ams": {"eu": 1, "us": 0}, "nyc": {"eu": 0, "us": 1}, "sin": {"eu": 0, "us": 1}}
	// each region on its closest origin, once the controller sees every region's demand
	st, err := waitServiceSteering(ams, "web", 30*time.Second, func(st *wire.Steering) error {
		if err := demandSeen(st); err != nil {
			return err
		}
		return shares(closest)(st)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("  web: %s", describe(st))
	st, err = waitServiceSteering(ams, "tun", 30*time.Second, func(st *wire.Steering) error {
		if err := demandSeen(st); err != nil {
			return err
		}
		for _, r := range WorldRegions {
			if sh := st.Shares[r]["home"]; sh != 1 {
				return fmt.Errorf("%s's share of home is %.3f (round %d)", r, sh, st.Round)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("  tun: %s", describe(st))
	if o := st.Decision.Origins; len(o) != 1 || o[0].Load <= 0 {
		t.Errorf("tun's decision: origins %+v, want home taking the load", o)
	}

	before, flowsBefore := w.webClients(), newFlowsOf(t, w.regionOf())
	homeBefore := homeClients(t, w)
	time.Sleep(worldWindow) // the window: the origins count what they take meanwhile
	after, flowsAfter := w.webClients(), newFlowsOf(t, w.regionOf())
	homeAfter := homeClients(t, w)
	for _, r := range WorldRegions {
		client := w.Clients[r].Addr4
		for origin, share := range closest[r] {
			n := after[origin][client] - before[origin][client]
			t.Logf("  %s → %s: %d connections in %v (share %.0f %%)", r, origin, n, worldWindow, 100*share)
			if (n > 0) != (share > 0) {
				t.Errorf("%s's client made %d connections to %s in the window, its share being %.0f %%", r, n, origin, 100*share)
			}
		}
		// ECMP within the site: each node takes about half of the region's new flows
		var site float64
		for _, n := range w.Nodes[r] {
			site += flowsAfter[n.Role] - flowsBefore[n.Role]
		}
		for _, n := range w.Nodes[r] {
			if part := (flowsAfter[n.Role] - flowsBefore[n.Role]) / site; math.IsNaN(part) || part < 0.25 || part > 0.75 {
				t.Errorf("%s took %.0f %% of %s's new flows: the router does not spread them over the site", n.Role, 100*part, r)
			}
		}
		if n := homeAfter[client] - homeBefore[client]; n == 0 {
			t.Errorf("home's nginx logged no request of %s's client (%s) through tun's PROXY header in the window", r, client)
		} else {
			t.Logf("  %s → home (tun): %d requests logged with the client's address from the PROXY header", r, n)
		}
	}
	// every origin sees the clients' own addresses, nothing else
	clients := map[netip.Addr]bool{}
	for _, c := range w.Clients {
		clients[c.Addr4] = true
	}
	for origin, by := range after {
		for addr := range by {
			if !clients[addr] {
				t.Errorf("%s saw a connection to web from %s, not a client's address", origin, addr)
			}
		}
	}
	for addr := range homeAfter {
		if !clients[addr] {
			t.Errorf("home logged a request of tun from %s, not a client's address", addr)
		}
	}
	// plain, not steered: its connections spread over both backends by Maglev alone
	answered := map[string]int{}
	for range 20 {
		body, err := HTTPGet(w.Clients["ams"].NS, URL(WorldPlainVIP, 80), 0)
		if err != nil {
			t.Fatal(err)
		}
		answered[strings.TrimSpace(body)]++
	}
	if answered["eu1"] == 0 || answered["us1"] == 0 {
		t.Errorf("plain's 20 requests from ams were answered by %v: want both backends, plain not being steered", answered)
	}
	for _, r := range WorldRegions {
		for name, ld := range map[string]*OfferedLoad{"web": web[r], "tun": tun[r]} {
			if sent, failed := ld.Counts(); failed > 0 {
				t.Errorf("%s → %s: %d of %d requests failed in steady state (the last: %v)", r, name, failed, sent, ld.LastErr())
			}
		}
	}
	t.Logf("steady state asserted %v after the start", time.Since(start).Round(time.Millisecond))

	worldSurge(t, w, web)
	web["ams"].SetRate(worldWebRate)
	worldOriginFails(t, w)
	worldSiteFrozen(t, w, "sin")
	worldEtcdMemberKilled(t, w, web, tun)
	t.Logf("done %v after the start", time.Since(start).Round(time.Millisecond))
}

// worldSurgeRate is ams's surge: 10 % above eu's capacity, the rest spills to us.
const worldSurgeRate = 110

// worldSurge: ams offers more than eu, its closest origin, takes. Within 10 s its
// share spills to us, the next closest; once the shares settle, over a window, no
// origin takes more than its capacity + 2 %.
func worldSurge(t *testing.T, w *World, web map[string]*OfferedLoad) {
	t.Helper()
	ams := w.API["lb-ams1"]
	t.Logf("surge: ams offers %d/s to web, eu takes %.0f/s", worldSurgeRate, worldCapacity["eu"])
	changed := time.Now()
	web["ams"].SetRate(worldSurgeRate)
	if _, err := waitServiceSteering(ams, "web", 10*time.Second, func(st *wire.Steering) error {
		if st.Shares["ams"]["us"] <= 0 {
			return fmt.Errorf("ams's share of us is %.3f (round %d)", st.Shares["ams"]["us"], st.Round)
		}
		return nil
	}); err != nil {
		t.Fatalf("no spill within 10 s of the surge: %v", err)
	}
	t.Logf("  ams spills to us %v after the surge", time.Since(changed).Round(time.Millisecond))
	st, err := waitServiceSteering(ams, "web", 20*time.Second, func(st *wire.Steering) error {
		for _, site := range st.Decision.Sites {
			for _, sh := range site.Shares {
				if math.Abs(sh.Share-sh.Target) > 0.005 {
					return fmt.Errorf("%s → %s: share %.3f, target %.3f (round %d)", site.Site, sh.Origin, sh.Share, sh.Target, st.Round)
				}
			}
		}
		if us := st.Shares["ams"]["us"]; us < 0.03 || us > 0.2 {
			return fmt.Errorf("ams's share of us is %.3f, want about %.2f", us, 1-worldCapacity["eu"]/worldSurgeRate)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("  settled %v after the surge: %s", time.Since(changed).Round(time.Millisecond), describe(st))
	before := map[string]uint64{"eu": w.Origins["eu"].ConnsTo(WorldWebVIP), "us": w.Origins["us"].ConnsTo(WorldWebVIP)}
	begin := time.Now()
	time.Sleep(worldWindow) // the window: the origins count what they take meanwhile
	elapsed := time.Since(begin).Seconds()
	for _, origin := range []string{"eu", "us"} {
		rate := float64(w.Origins[origin].ConnsTo(WorldWebVIP)-before[origin]) / elapsed
		t.Logf("  %s takes %.1f new connections/s of web (capacity %.0f/s) over %.1f s", origin, rate, worldCapacity[origin], elapsed)
		if rate > 1.02*worldCapacity[origin] {
			t.Errorf("%s takes %.1f/s, above its capacity %.0f/s + 2 %%", origin, rate, worldCapacity[origin])
		}
	}
	// closest first: eu is filled, not merely relieved
	if rate := float64(w.Origins["eu"].ConnsTo(WorldWebVIP)-before["eu"]) / elapsed; rate < 0.9*worldCapacity["eu"] {
		t.Errorf("eu takes %.1f/s of its %.0f/s: ams spilled more than it needed to", rate, worldCapacity["eu"])
	}
	// reported, not asserted: the issue bounds the origins' load, not the requests of
	// the surge (TestSteering asserts none fails while the shares move)
	if sent, failed := web["ams"].Counts(); failed > 0 {
		t.Logf("  ams: %d of %d requests to web failed (the last: %v)", failed, sent, web["ams"].LastErr())
	}
}

// worldOriginFails: eu's backend fails; every node applies shares that give eu
// nothing within 3 s: the health check's detection (1.2 to 1.6 s), a node's publication (1 s)
// and a round (0.5 s).
func worldOriginFails(t *testing.T, w *World) {
	t.Helper()
	t.Log("eu fails: its share is 0 everywhere within 3 s")
	failed := time.Now()
	if err := w.Origins["eu"].Close(); err != nil {
		t.Fatal(err)
	}
	zero := map[string]map[string]float64{"ams": {"eu": 0, "us": 1}, "nyc": {"eu": 0, "us": 1}, "sin": {"eu": 0, "us": 1}}
	var slowest time.Duration
	var slowestNode string
	for role, api := range w.API { // each node's own view: the shares it applies
		if _, err := waitServiceSteering(api, "web", 10*time.Second, shares(zero)); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if took := time.Since(failed); took > slowest {
			slowest, slowestNode = took, role
		}
	}
	t.Logf("  every node gives eu nothing %v after it failed (the last: %s)", slowest.Round(time.Millisecond), slowestNode)
	if slowest > 3*time.Second {
		t.Errorf("eu's share reached 0 on every node %v after it failed, more than 3 s", slowest)
	}
}

// webClients is, for each routed origin, its connections to web by source address.
func (w *World) webClients() map[string]map[netip.Addr]uint64 {
	out := map[string]map[netip.Addr]uint64{}
	for origin, o := range w.Origins {
		out[origin] = o.Clients(WorldWebVIP)
	}
	return out
}

// regionOf is every node's region, by host.
func (w *World) regionOf() map[*Host]string {
	out := map[*Host]string{}
	for role, r := range w.Region {
		out[w.Host(role)] = r
	}
	return out
}

// homeClients counts the requests home's nginx logged, by the client address the
// PROXY header gave.
func homeClients(t *testing.T, w *World) map[netip.Addr]uint64 {
	t.Helper()
	out := map[netip.Addr]uint64{}
	for _, path := range w.HomeLogs {
		f, err := os.Open(path)
		if os.IsNotExist(err) {
			continue // nothing logged yet
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			for _, field := range strings.Fields(sc.Text()) {
				if v, ok := strings.CutPrefix(field, "client="); ok {
					if a, err := netip.ParseAddr(v); err == nil {
						out[a]++
					} else {
						out[netip.Addr{}]++ // "-": no PROXY header
					}
				}
			}
		}
		f.Close()
	}
	return out
}

// worldSiteFrozen: both nodes of region's site freeze (SIGSTOP: their sessions stay
// open, nothing answers). Its router's BFD withdraws them; the region's new
// connections reach another site through the core within 1 s of that; not one
// long-lived connection held at the other sites breaks; the connections held through
// the frozen site that are lost are counted and reported. Then the site thaws and
// takes its region back.
func worldSiteFrozen(t *testing.T, w *World, region string) {
	t.Helper()
	t.Logf("%s's site frozen (both nodes SIGSTOP)", region)
	type held struct {
		region, service string
		c               *KeepAliveConn
	}
	var conns []held
	for _, r := range WorldRegions {
		for _, svc := range []struct {
			name string
			vip  netip.Addr
		}{{"web", WorldWebVIP}, {"tun", WorldTunnelVIP}} {
			for range worldHeld {
				c, err := DialKeepAlive(w.Clients[r].NS, URL(svc.vip, 80), 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				if _, err := c.Do(); err != nil {
					t.Fatalf("%s → %s, a long-lived connection's first request: %v", r, svc.name, err)
				}
				conns = append(conns, held{r, svc.name, c})
			}
		}
	}
	// each held connection's next request; how many of each region and service failed
	check := func(timeout time.Duration) map[string]int {
		var mu sync.Mutex
		var wg sync.WaitGroup
		broken := map[string]int{}
		for _, h := range conns {
			wg.Go(func() {
				if _, err := h.c.DoWithin(timeout); err != nil {
					mu.Lock()
					broken[h.region+" "+h.service]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return broken
	}
	probe := startProber(w.Clients[region].NS, URL(WorldWebVIP, 80), 20*time.Millisecond)
	defer probe.Stop()
	router := w.Host("r-" + region)
	site := w.SiteAddrs(region)
	frozen := time.Now()
	for _, n := range w.Nodes[region] {
		if err := w.Running[n.Role].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			for _, n := range w.Nodes[region] {
				_ = w.Running[n.Role].Signal(syscall.SIGCONT)
			}
		}
	}
	defer thaw()
	var detected time.Time
	err := Eventually(10*time.Second, 10*time.Millisecond, func() error {
		hops, err := nextHops(router, WorldWebVIP)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(hops, func(a netip.Addr) bool { return slices.Contains(site, a) }) {
			return fmt.Errorf("r-%s still routes %s over %v", region, WorldWebVIP, hops)
		}
		detected = time.Now()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("  r-%s withdrew its site %v after the freeze (BFD %v × %d)", region, detected.Sub(frozen).Round(time.Millisecond), worldBFD.Interval, worldBFD.Multiplier)
	var reached time.Time
	err = Eventually(5*time.Second, 10*time.Millisecond, func() error {
		var ok bool
		reached, ok = probe.firstDoneAfter(detected)
		if !ok {
			return fmt.Errorf("no new connection from %s's client answered since its site was withdrawn", region)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	took := reached.Sub(detected)
	t.Logf("  %s's new connections reach another site %v after the detection", region, took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("%s's new connections reached another site %v after BFD's detection, more than 1 s", region, took)
	}
	broken := check(time.Second)
	var lost int
	for key, n := range broken {
		if strings.HasPrefix(key, region+" ") {
			lost += n
			t.Logf("  lost with the frozen site: %d of %d long-lived connections of %s", n, worldHeld, key)
			continue
		}
		t.Errorf("%d of %d long-lived connections of %s, held at another site, broke with %s's site frozen", n, worldHeld, key, region)
	}
	t.Logf("  %d of %d long-lived connections held through %s's site lost; none of the other sites' %d broke",
		lost, 2*worldHeld, region, 2*worldHeld*(len(WorldRegions)-1))

	thaw()
	// a thawed node's BFD expires at once and resets its session, which comes back
	if err := w.waitBFD(30 * time.Second); err != nil {
		t.Fatalf("%s's site thawed: %v", region, err)
	}
	t.Logf("  thawed, %s's site takes its region back %v after the freeze", region, time.Since(frozen).Round(time.Millisecond))
	for key, n := range check(RequestTimeout) {
		if !strings.HasPrefix(key, region+" ") {
			t.Errorf("%d of %d long-lived connections of %s, held at another site, broke once %s's site came back", n, worldHeld, key, region)
		}
	}
}

// worldHeld is how many long-lived connections each region's client holds per service.
const worldHeld = 10

// prober opens a new connection to a URL every period and records when each that was
// answered had been opened and was done.
type prober struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	ok   [][2]time.Time // opened, done
}

func startProber(ns, url string, period time.Duration) *prober {
	p := &prober{stop: make(chan struct{})}
	tick := time.NewTicker(period)
	p.wg.Go(func() {
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case opened := <-tick.C:
				p.wg.Go(func() {
					if _, err := HTTPGet(ns, url, 0); err == nil {
						p.mu.Lock()
						p.ok = append(p.ok, [2]time.Time{opened, time.Now()})
						p.mu.Unlock()
					}
				})
			}
		}
	})
	return p
}

// firstDoneAfter is when the first connection opened after t was answered.
func (p *prober) firstDoneAfter(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first time.Time
	for _, c := range p.ok {
		if c[0].After(t) && (first.IsZero() || c[1].Before(first)) {
			first = c[1]
		}
	}
	return first, !first.IsZero()
}

func (p *prober) Stop() {
	close(p.stop)
	p.wg.Wait()
}

// worldEtcdMemberKilled: the etcd member of the leading controller's region dies. A
// controller keeps deciding (rounds made after the kill), and the nodes keep
// forwarding: over a window after the kill, every node takes new flows and no request
// of the generators fails.
func worldEtcdMemberKilled(t *testing.T, w *World, loads ...map[string]*OfferedLoad) {
	t.Helper()
	ams := w.API["lb-ams2"]
	st, err := waitServiceSteering(ams, "web", 5*time.Second, func(*wire.Steering) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	at := w.ControllerAt[st.Leader]
	if at == nil {
		t.Fatalf("web's shares were written by %q, not by a controller of the world", st.Leader)
	}
	m := w.Etcd.Member(at.Role)
	t.Logf("the etcd member of the leading controller's region (%s, on %s) killed", st.Leader, at.Role)
	var last error
	failed := func() (n uint64) {
		for _, l := range loads {
			for _, ld := range l {
				_, f := ld.Counts()
				n += f
				if err := ld.LastErr(); err != nil {
					last = err
				}
			}
		}
		return n
	}
	failedBefore, flowsBefore := failed(), newFlowsOf(t, w.regionOf())
	killed := time.Now()
	if err := w.Etcd.Kill(m); err != nil {
		t.Fatal(err)
	}
	var first int64
	st, err = waitServiceSteering(ams, "web", 20*time.Second, func(st *wire.Steering) error {
		made, err := time.Parse(time.RFC3339Nano, st.At)
		switch {
		case err != nil:
			return err
		case made.Before(killed):
			return fmt.Errorf("round %d by %s was made before the kill", st.Round, st.Leader)
		case first == 0:
			first = st.Round
		}
		if st.Round < first+2 {
			return fmt.Errorf("round %d by %s: one round since the kill", st.Round, st.Leader)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no controller decides after the kill: %v", err)
	}
	t.Logf("  controller %s decides: round %d made %v after the kill", st.Leader, st.Round, time.Since(killed).Round(time.Millisecond))
	if rest := worldWindow - time.Since(killed); rest > 0 {
		time.Sleep(rest) // the rest of the window: the nodes forward meanwhile
	}
	flowsAfter := newFlowsOf(t, w.regionOf())
	for role := range w.Region {
		if flowsAfter[role] <= flowsBefore[role] {
			t.Errorf("%s took no new flow in the %v after the etcd member died", role, worldWindow)
		}
	}
	if n := failed() - failedBefore; n > 0 {
		t.Errorf("%d requests of the generators failed in the %v after the etcd member died (one: %v)", n, worldWindow, last)
	}
	t.Logf("  every node took new flows, and no request failed, in the %v after the kill", worldWindow)
}

// demandSeen: the decision has every region's demand.
func demandSeen(st *wire.Steering) error {
	for _, r := range WorldRegions {
		if !slices.ContainsFunc(st.Decision.Sites, func(s wire.SteeringSite) bool { return s.Site == r && s.Demand > 0 }) {
			return fmt.Errorf("%s's round %d has no demand of %s", st.Service, st.Round, r)
		}
	}
	return nil
}
