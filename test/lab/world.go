package lab

// The world: the global accelerator as one lab (docs/global-accelerator.md). Three
// regions, each a router running BIRD with BFD, a client network and an edge site of
// two nodes; a core router joins the regions; a fleet on three etcd members, one per
// region, steered by two controllers; two routed origins (a backend with its agent
// each, IPIP) and one origin behind a NAT host that lets nothing in, reached by two
// connectors that dial every edge through the NAT host's delay line.
//
//	c-ams ── r-ams (BIRD, AS 65011) ─┬─ lb-ams1 (etcd, controller a), lb-ams2
//	c-nyc ── r-nyc (BIRD, AS 65012) ─┼─ lb-nyc1 (etcd, controller b), lb-nyc2
//	c-sin ── r-sin (BIRD, AS 65013) ─┼─ lb-sin1 (etcd), lb-sin2
//	                                 │
//	                   core (BIRD, AS 65100) ─┬─ eu1   origin eu (manifold backend)
//	                                          ├─ us1   origin us (manifold backend)
//	                                          └─ nat (delay line) ─┬─ home1  origin home: nginx + manifold connect
//	                                                               └─ home2  origin home: nginx + manifold connect
//
// Catchment: a region's router learns the VIPs from its two nodes (AS path 65001, ECMP
// over both, BFD on each session) and from the core (the other regions' routes, AS
// path 65100 6501x 65001): the shorter path wins, so a region's clients stay on their
// own site and reach another through the core once their site withdraws.
//
// Services, on every node:
//   - web (WorldWebVIP): steered over three origins, the routed eu and us and the
//     tunnelled home (a mixed service: the XDP program passes home's share of the new
//     flows up to the node's stack, where the tunnel edge hands them to a connector),
//     with the PROXY header (v2) so that home's nginx logs the clients' addresses;
//   - plain (WorldPlainVIP): a routed service without origins (not steered), over the
//     routed origins' backends.
//
// Distance: the lab has no netem. As in the steering lab, a routed origin's backends
// answer the health check after the configured RTT from the checking node's region
// (OriginServer, WorldRTT). home's RTT is the edges' measured round trip on the
// tunnel (QUIC's), which the NAT host's delay line makes HomeDelay longer each way:
// home sits at about 30 ms from every site, sin's closest origin and ams's and nyc's
// next closest (WorldPreference). So each region has its own closest origin, eu's
// surge and failure spill to home, and home has room for them (WorldCapacity).

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// The world's VIPs.
var (
	WorldWebVIP   = netip.MustParseAddr("198.51.100.10")
	WorldPlainVIP = netip.MustParseAddr("198.51.100.20")
)

// WorldRegions are the world's regions, in order.
var WorldRegions = []string{"ams", "nyc", "sin"}

// WorldRTT is the RTT from each region to each routed origin: ams is next to eu, nyc
// next to us, sin far from both (closer to us). Each is at least 25 ms from home's 30
// (2 × HomeDelay) and the far ones 50 ms: on a loaded machine the measured RTTs run
// 5 to 25 ms above these (home's measured 38 to 53 ms in a demo at a load average of
// 26 on two cores), which must not reorder a region's origins.
var WorldRTT = map[string]map[string]time.Duration{
	"eu": {"ams": 5 * time.Millisecond, "nyc": 80 * time.Millisecond, "sin": 120 * time.Millisecond},
	"us": {"ams": 80 * time.Millisecond, "nyc": 5 * time.Millisecond, "sin": 100 * time.Millisecond},
}

// HomeDelay is the NAT host's delay line, each way, on the connectors' tunnels: home's
// distance from every site.
const HomeDelay = 15 * time.Millisecond

// The world's origins by region, in the order of their RTT: where steady state puts
// each region (its first), and where its flows go once that one is full or down.
var WorldPreference = map[string][]string{"ams": {"eu", "home", "us"}, "nyc": {"us", "home", "eu"}, "sin": {"home", "us", "eu"}}

// The world's ASes: the core's, and each region router's (65011, 65012, … in
// WorldRegions' order); the nodes share NodeASN.
const (
	CoreASN       = 65100
	regionASNBase = 65011
)

// worldToken lets a connector serve web for the origin home.
const worldToken = "lab-world-token-0123456789abcdef"

// WorldHealth is the routed services' health check: a backend is down after Fall
// failed checks. A refused check fails at once (a dead origin is seen within 1.2 to
// 1.6 s); a slow one gets the whole interval, and three in a row must fail, so that a
// loaded machine's stall of a second does not take a healthy backend down.
var WorldHealth = Health{Kind: "http", Port: HealthPort, Path: "/health", Interval: 400 * time.Millisecond,
	Timeout: 400 * time.Millisecond, Rise: 1, Fall: 3}

// WorldCapacity are the origins' capacities of TestWorld and the demo, new flows/s.
// home takes sin's load and room to spare for ams's when eu is full or down; the
// acts' rates (TestWorld's) leave each origin under its capacity but eu's in the
// surge.
var WorldCapacity = map[string]float64{"eu": 100, "us": 200, "home": 60}

// WorldBFD are the BFD timers of the world's sessions: a 1 s detection. TestBFD's
// 100 ms × 3 flap here: six -race nodes, four BIRDs, three etcd members and the
// generators share two loaded cores, and a node's BFD that runs 300 ms late resets a
// healthy session. The world's bounds are counted from the detection, whatever it
// takes.
var WorldBFD = &RouterBFD{Interval: 250 * time.Millisecond, Multiplier: 4}

// WorldSpec sizes the world.
type WorldSpec struct {
	Prefix, Dir string
	Logf        func(format string, args ...any)
	Manifold    string     // path of the manifold binary
	BFD         *RouterBFD // the timers of every node's session with its region's router
	// Capacity of each origin (eu, us, home), in new flows per second.
	Capacity map[string]float64
	// SteerInterval and SteerLease of the controllers.
	SteerInterval, SteerLease time.Duration
}

// World is the running world.
type World struct {
	*Lab
	Spec         WorldSpec
	Core         *Bird
	Routers      map[string]*Bird    // by region
	Clients      map[string]*Host    // by region
	Nodes        map[string][]*Host  // by region
	Region       map[string]string   // by node role
	Running      map[string]*Node    // by node role
	API          map[string]*NodeAPI // by node role
	Origins      map[string]*OriginServer
	HomeLogs     map[string]string   // the access log of each home host's nginx, by role
	Connectors   map[string]*Process // by home host role
	Delay        *DelayLine          // on the NAT host: the connectors' way to the edges
	Etcd         *Etcd
	Controllers  map[string]*Process // by name: a (in ams), b (in nyc)
	ControllerAt map[string]*Host    // where each controller runs
	tunnels      *Tunnels            // every edge's tunnels section
}

// Close stops the origins' servers and tears down the lab.
func (w *World) Close() error {
	var errs []error
	for _, o := range w.Origins {
		errs = append(errs, o.Close())
	}
	if w.Delay != nil {
		errs = append(errs, w.Delay.Close())
	}
	return errors.Join(append(errs, w.Lab.Close())...)
}

// RegionASN is the AS of a region's router.
func RegionASN(region string) uint32 {
	for i, r := range WorldRegions {
		if r == region {
			return uint32(regionASNBase + i)
		}
	}
	return 0
}

// NewWorld builds the world and starts every part of it; it returns once each
// region's router routes the VIPs over its own two nodes and every edge has both
// connectors attached. On error it tears down what it made.
func NewWorld(spec WorldSpec) (w *World, err error) {
	var hosts []HostSpec
	for _, r := range WorldRegions {
		hosts = append(hosts, HostSpec{Role: "r-" + r, Kind: EdgeRouter})
	}
	for _, r := range WorldRegions {
		hosts = append(hosts, HostSpec{Role: "c-" + r, Kind: Client, Via: "r-" + r},
			HostSpec{Role: "lb-" + r + "1", Kind: LBNode, Via: "r-" + r}, HostSpec{Role: "lb-" + r + "2", Kind: LBNode, Via: "r-" + r})
	}
	hosts = append(hosts, HostSpec{Role: "eu1", Kind: Backend}, HostSpec{Role: "us1", Kind: Backend}, HostSpec{Role: "nat", Kind: Backend})
	l, err := New(Spec{Prefix: spec.Prefix, Hosts: hosts, Dir: spec.Dir, Logf: spec.Logf})
	if err != nil {
		return nil, err
	}
	w = &World{Lab: l, Spec: spec, Routers: map[string]*Bird{}, Clients: map[string]*Host{}, Nodes: map[string][]*Host{},
		Region: map[string]string{}, Running: map[string]*Node{}, API: map[string]*NodeAPI{}, Origins: map[string]*OriginServer{},
		HomeLogs: map[string]string{}, Connectors: map[string]*Process{}, Controllers: map[string]*Process{}, ControllerAt: map[string]*Host{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.Close())
			w = nil
		}
	}()
	var nodes []*Host
	for _, r := range WorldRegions {
		w.Clients[r] = l.Host("c-" + r)
		for _, i := range []string{"1", "2"} {
			n := l.Host("lb-" + r + i)
			w.Nodes[r] = append(w.Nodes[r], n)
			w.Region[n.Role] = r
			w.API[n.Role] = NewNodeAPI(n)
			nodes = append(nodes, n)
		}
	}
	for _, step := range []func() error{w.startRoutedOrigins, w.startRouters, w.startHome} {
		if err := step(); err != nil {
			return w, err
		}
	}
	if w.Etcd, err = l.StartEtcd(w.Nodes["ams"][0], w.Nodes["nyc"][0], w.Nodes["sin"][0]); err != nil {
		return w, err
	}
	if err := w.importServices(); err != nil {
		return w, err
	}
	for _, n := range nodes {
		if w.Running[n.Role], err = l.StartNode(spec.Manifold, n, w.nodeConfig(n)); err != nil {
			return w, err
		}
	}
	for name, region := range map[string]string{"a": "ams", "b": "nyc"} {
		w.ControllerAt[name] = w.Nodes[region][0]
		if w.Controllers[name], err = l.StartSteer(spec.Manifold, w.ControllerAt[name], name, w.Etcd.Endpoints(), spec.SteerInterval, spec.SteerLease); err != nil {
			return w, err
		}
	}
	for _, r := range WorldRegions {
		took, err := w.Routers[r].WaitNextHops(WorldWebVIP, w.SiteAddrs(r), 60*time.Second)
		if err != nil {
			return w, fmt.Errorf("r-%s: %w", r, err)
		}
		l.logf("r-%s routes %s over its site's nodes, %v after they started", r, WorldWebVIP, took.Round(time.Millisecond))
	}
	if err := w.waitBFD(30 * time.Second); err != nil {
		return w, err
	}
	return w, w.waitConnectors(60 * time.Second)
}

// waitBFD waits until every node's BFD session with its region's router is up and
// the routers route the VIPs over their own sites again (a session may reset once as
// its BFD comes up).
func (w *World) waitBFD(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	err := Eventually(timeout, 100*time.Millisecond, func() error {
		for role, api := range w.API {
			st, err := api.Status()
			if err != nil {
				return err
			}
			if len(st.BGP.Peers) != 1 || st.BGP.Peers[0].BFD != "up" {
				return fmt.Errorf("%s: BFD of its session with its region's router not up: %+v", role, st.BGP.Peers)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range WorldRegions {
		if _, err := w.Routers[r].WaitNextHops(WorldWebVIP, w.SiteAddrs(r), time.Until(deadline)); err != nil {
			return fmt.Errorf("r-%s: %w", r, err)
		}
	}
	return nil
}

// SiteAddrs are the addresses of a region's nodes: the next hops of its router's
// route to the VIPs while its site announces them.
func (w *World) SiteAddrs(region string) []netip.Addr {
	var out []netip.Addr
	for _, n := range w.Nodes[region] {
		out = append(out, n.Addr4)
	}
	return out
}

// startRoutedOrigins runs, on eu1 and us1, the backend agent (decapsulating web's and
// plain's VIPs) and an OriginServer that answers each node's health check after its
// region's RTT.
func (w *World) startRoutedOrigins() error {
	for _, origin := range []string{"eu", "us"} {
		h := w.Host(origin + "1")
		if _, err := w.StartBackendAgent(w.Spec.Manifold, h, WorldWebVIP, WorldPlainVIP); err != nil {
			return err
		}
		rtt := map[netip.Addr]time.Duration{}
		for role, region := range w.Region {
			rtt[w.Host(role).Addr4] = WorldRTT[origin][region]
		}
		o, err := StartOriginServer(h, rtt)
		if err != nil {
			return err
		}
		w.Origins[origin] = o
	}
	return nil
}

// startRouters runs BIRD on the core and on each region's router.
func (w *World) startRouters() error {
	var regions []RouterPeer
	for _, r := range WorldRegions {
		rt := w.Host("r-" + r)
		regions = append(regions, RouterPeer{Name: "region_" + r, Address: rt.Addr4, ASN: RegionASN(r)})
	}
	var err error
	if w.Core, err = w.StartBird(nil, RouterOptions{ASN: CoreASN, Transit: regions}); err != nil {
		return err
	}
	for _, r := range WorldRegions {
		rt := w.Host("r-" + r)
		var peers []RouterPeer
		for _, n := range w.Nodes[r] {
			peers = append(peers, RouterPeer{Name: strings.ReplaceAll(n.Role, "-", "_"), Address: n.Addr4, ASN: NodeASN, BFD: true})
		}
		o := RouterOptions{HoldTime: 3 * time.Second, BFD: w.Spec.BFD, ASN: RegionASN(r), RouterID: rt.Addr4,
			Transit: []RouterPeer{{Name: "core", Address: rt.Gateway4, ASN: CoreASN}}}
		if w.Routers[r], err = w.StartEdgeBird(rt, peers, o); err != nil {
			return err
		}
	}
	return nil
}

// startHome puts home1 and home2 behind the NAT host, each with an nginx that reads
// the PROXY header and logs the client's address, and starts the NAT host's delay
// line to the edges; the connectors start once the edges' certificate exists
// (importServices).
func (w *World) startHome() error {
	nat := w.Host("nat")
	if err := w.SetupNAT(nat); err != nil {
		return err
	}
	routes := map[uint16]netip.AddrPort{}
	for i, n := range w.edges() {
		routes[delayPort(i)] = netip.AddrPortFrom(n.Addr4, edgePort)
	}
	var err error
	if w.Delay, err = StartDelayLine(nat, HomeDelay, routes); err != nil {
		return err
	}
	for i, role := range []string{"home1", "home2"} {
		h, err := w.AddOriginBehind(nat, role, i+1)
		if err != nil {
			return err
		}
		if _, w.HomeLogs[role], err = w.StartNginxProxyProtocol(h, homeProxied, homePlain); err != nil {
			return err
		}
	}
	return nil
}

// home's nginx ports: with the PROXY header (what web's connectors reach), without.
const homeProxied, homePlain = 8081, 8080

// edgePort is where the edges' tunnels listen (the default tunnels.listen's).
const edgePort = 7443

// delayPort is the NAT host's port of the delay line to the i-th edge (edges' order).
func delayPort(i int) uint16 { return uint16(7001 + i) }

// edges are every region's nodes, in WorldRegions' order.
func (w *World) edges() []*Host {
	var out []*Host
	for _, r := range WorldRegions {
		out = append(out, w.Nodes[r]...)
	}
	return out
}

// importServices writes the edges' PKI and tokens, seeds the fleet with the two
// services, and starts the connectors. A connector dials each edge at the delay
// line's port on its gateway (the NAT host), which the edges' certificate names too.
func (w *World) importServices() error {
	var names []netip.Addr
	for _, n := range w.edges() {
		names = append(names, n.Addr4)
	}
	homes := []string{"home1", "home2"}
	for _, role := range homes {
		names = append(names, w.Host(role).Gateway4)
	}
	ca, cert, key, err := TunnelPKI(w.Dir, names...)
	if err != nil {
		return err
	}
	tokens := filepath.Join(w.Dir, "tunnel-tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("- {token: %q, services: [web], origins: [home]}\n", worldToken)), 0o600); err != nil {
		return err
	}
	w.tunnels = &Tunnels{CertFile: cert, KeyFile: key, TokensFile: tokens}
	eu, us := w.Host("eu1").Addr4, w.Host("us1").Addr4
	health := WorldHealth
	services := NodeConfig{Name: "import", Address: w.Nodes["ams"][0].Addr4, Tunnels: w.tunnels, Services: []Service{
		{Name: "web", VIP: WorldWebVIP, Port: 80, Backends: []netip.Addr{eu, us}, Health: &health, ProxyProtocol: "v2",
			Origins: []Origin{{Name: "eu", Capacity: w.Spec.Capacity["eu"]}, {Name: "us", Capacity: w.Spec.Capacity["us"]},
				{Name: "home", Capacity: w.Spec.Capacity["home"], Tunnel: true}},
			BackendOrigin: map[netip.Addr]string{eu: "eu", us: "us"}},
		{Name: "plain", VIP: WorldPlainVIP, Port: 80, Backends: []netip.Addr{eu, us}, Health: &health},
	}}
	first := w.Nodes["ams"][0]
	if err := w.FleetImport(w.Spec.Manifold, first, w.nodeConfig(first), services, false); err != nil {
		return err
	}
	for _, role := range homes {
		h := w.Host(role)
		var dial []string
		for i := range w.edges() {
			dial = append(dial, netip.AddrPortFrom(h.Gateway4, delayPort(i)).String())
		}
		entry := fmt.Sprintf("  - {name: web, to: %s, capacity: 1000, origin: home}\n", netip.AddrPortFrom(h.Addr4, homeProxied))
		if w.Connectors[role], err = w.StartConnector(w.Spec.Manifold, h, role, worldToken, ca, dial, entry); err != nil {
			return err
		}
	}
	return nil
}

// nodeConfig is a node's file: its region as its site, the fleet, the tunnels
// section, BGP with BFD to its region's router.
func (w *World) nodeConfig(n *Host) NodeConfig {
	b := w.Spec.BFD
	return NodeConfig{Name: n.Role, Site: w.Region[n.Role], Address: n.Addr4, Tunnels: w.tunnels,
		Fleet: &Fleet{Endpoints: w.Etcd.Endpoints()},
		// no drain at the end: the lab is over by then
		BGP: &BGP{ASN: NodeASN, RouterID: n.Addr4, DrainTime: time.Millisecond, Peers: []BGPPeer{{
			Address: n.Gateway4, ASN: RegionASN(w.Region[n.Role]), HoldTime: 3 * time.Second,
			BFD: &BFD{MinRx: b.Interval, MinTx: b.Interval, Multiplier: b.Multiplier}}}}}
}

// waitConnectors waits until every edge serves web with both connectors.
func (w *World) waitConnectors(timeout time.Duration) error {
	return Eventually(timeout, 100*time.Millisecond, func() error {
		for role, api := range w.API {
			var st wire.TunnelsStatus
			if err := api.Get("/api/v1/tunnels", &st); err != nil {
				return err
			}
			if !slices.ContainsFunc(st.Services, func(s wire.TunnelService) bool { return s.Name == "web" && s.Connectors == 2 }) {
				return fmt.Errorf("%s: web is not served by both connectors: %+v", role, st.Services)
			}
		}
		return nil
	})
}
