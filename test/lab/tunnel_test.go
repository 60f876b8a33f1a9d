package lab

// Lab tests of reverse tunnels: two edges (manifold run with a tunnels section)
// announce a tunnel service's VIP to BIRD; origins sit behind a NAT host that lets
// nothing in, and their connectors (manifold connect) dial out to both edges.

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

var tunnelVIP = netip.MustParseAddr("198.51.100.40")

const (
	tunnelWebToken   = "lab-web-token-0123456789abcdef"
	tunnelOtherToken = "lab-other-token-0123456789abcdef"
	tunnelRelayToken = "lab-relay-token-0123456789abcdef"
	// edgeGoneWithin is the bound for a vanished connector (one second) with
	// slack for a loaded 2-core machine running -race builds of every daemon.
	edgeGoneWithin = 2 * time.Second
)

// tunnelLab is the topology of the file's comment, with the edges not yet started.
type tunnelLab struct {
	*Lab
	client, nat    *Host
	edges          []*Host
	origins        map[string]*Host // by role
	caFile         string
	tunnels        *Tunnels
	edgeAddrs      []string // host:port where connectors dial the edges
	api            map[string]*NodeAPI
	servedByOrigin sync.Map // origin name → *atomic.Int64
}

func newTunnelLab(t *testing.T, origins ...string) *tunnelLab {
	t.Helper()
	requireLab(t)
	if err := hostprog.Check(hostprog.Nft, hostprog.Bird); err != nil {
		testenv.Missing(t, err)
	}
	l := newLabOf(t, HostSpec{Role: "client", Kind: Client}, HostSpec{Role: "lb1", Kind: LBNode},
		HostSpec{Role: "lb2", Kind: LBNode}, HostSpec{Role: "nat", Kind: Backend})
	tl := &tunnelLab{Lab: l, client: l.Host("client"), nat: l.Host("nat"), edges: l.HostsOf(LBNode),
		origins: map[string]*Host{}, api: map[string]*NodeAPI{}}
	if err := l.SetupNAT(tl.nat); err != nil {
		t.Fatal(err)
	}
	for i, role := range origins {
		h, err := l.AddOriginBehind(tl.nat, role, i+1)
		if err != nil {
			t.Fatal(err)
		}
		tl.origins[role] = h
		tl.startOrigin(t, h)
	}
	var addrs []netip.Addr
	for _, e := range tl.edges {
		addrs = append(addrs, e.Addr4)
		tl.edgeAddrs = append(tl.edgeAddrs, netip.AddrPortFrom(e.Addr4, 7443).String())
		tl.api[e.Role] = NewNodeAPI(e)
	}
	ca, cert, key, err := TunnelPKI(l.Dir, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(l.Dir, "tunnel-tokens.yaml")
	err = os.WriteFile(tokens, []byte(fmt.Sprintf("- {token: %q, services: [web]}\n- {token: %q, services: [other]}\n",
		tunnelWebToken, tunnelOtherToken)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	tl.caFile, tl.tunnels = ca, &Tunnels{CertFile: cert, KeyFile: key, TokensFile: tokens}
	var peers []RouterPeer
	for _, e := range tl.edges {
		peers = append(peers, RouterPeer{Name: e.Role, Address: e.Addr4, ASN: NodeASN})
	}
	if _, err := l.StartBird(peers, RouterOptions{HoldTime: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return tl
}

// startOrigin serves HTTP on h:8000, answering with h's role; /slow answers after
// 300 ms, so that a drain has requests in flight.
func (tl *tunnelLab) startOrigin(t *testing.T, h *Host) {
	t.Helper()
	served := new(atomic.Int64)
	tl.servedByOrigin.Store(h.Role, served)
	serveHTTP(t, h, netip.AddrPortFrom(h.Addr4, 8000).String(), func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond) // the origin's own work, not the test's wait
		}
		fmt.Fprintln(w, h.Role)
	})
}

func (tl *tunnelLab) nodeConfig(e *Host, fleet *Fleet, services ...Service) NodeConfig {
	return NodeConfig{Name: e.Role, Address: e.Addr4, Tunnels: tl.tunnels, Fleet: fleet, Services: services,
		BGP: &BGP{ASN: NodeASN, RouterID: e.Addr4, DrainTime: time.Second,
			Peers: []BGPPeer{{Address: e.Gateway4, ASN: RouterASN, HoldTime: 3 * time.Second}}}}
}

var webTunnel = Service{Name: "web", VIP: tunnelVIP, Port: 80, Tunnel: true}

func (tl *tunnelLab) startConnector(t *testing.T, origin, name, token string, edges []string, capacity int) *Process {
	t.Helper()
	h := tl.origins[origin]
	p, err := tl.StartConnector(manifoldBin, h, name, token, tl.caFile, edges,
		fmt.Sprintf("  - {name: web, to: %s, capacity: %d}\n", netip.AddrPortFrom(h.Addr4, 8000), capacity))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tunnels is an edge's GET /api/v1/tunnels.
func (tl *tunnelLab) tunnelsOf(edge string) (wire.TunnelsStatus, error) {
	var st wire.TunnelsStatus
	return st, tl.api[edge].Get("/api/v1/tunnels", &st)
}

// waitConnectors waits until every edge has exactly the named connectors attached
// (relays aside) and serves web with them.
func (tl *tunnelLab) waitConnectors(t *testing.T, timeout time.Duration, names ...string) {
	t.Helper()
	err := Eventually(timeout, 20*time.Millisecond, func() error {
		for _, e := range tl.edges {
			st, err := tl.tunnelsOf(e.Role)
			if err != nil {
				return err
			}
			var got []string
			for _, tn := range st.Tunnels {
				if !tn.Relay {
					got = append(got, tn.Connector)
				}
			}
			if strings.Join(got, ",") != strings.Join(names, ",") {
				return fmt.Errorf("%s: connectors %v attached, want %v", e.Role, got, names)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// get sends one request for path to the VIP from the client on a new connection (a
// new source port: the router's ECMP hash spreads them over the edges) and returns
// the origin that answered.
func (tl *tunnelLab) get(path string) (string, error) {
	body, err := HTTPGet(tl.client.NS, "http://"+netip.AddrPortFrom(tunnelVIP, 80).String()+path, 0)
	return strings.TrimSpace(body), err
}

func (tl *tunnelLab) waitBothEdgesAnnounce(t *testing.T) {
	t.Helper()
	var want []netip.Addr
	for _, e := range tl.edges {
		want = append(want, e.Addr4)
	}
	if _, err := tl.WaitNextHops(tunnelVIP, want, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestTunnels(t *testing.T) {
	tl := newTunnelLab(t, "org1", "org2")
	for _, e := range tl.edges {
		if _, err := tl.StartNode(manifoldBin, e, tl.nodeConfig(e, nil, webTunnel)); err != nil {
			t.Fatal(err)
		}
	}
	// no connector yet: the edges serve web but do not announce it
	st, err := tl.tunnelsOf("lb1")
	if err != nil || len(st.Services) != 1 || st.Services[0].Announced {
		t.Fatalf("lb1 before any connector: %+v, %v; want web served, not announced", st, err)
	}
	if svc, err := tl.api["lb1"].Status(); err != nil || len(svc.Services) != 1 || svc.Services[0].Forwarding != "tunnel" ||
		svc.Services[0].Announced || svc.Services[0].Reason != "tunnel service: no connector attached to any edge" {
		t.Fatalf("lb1's status before any connector: %+v, %v; want web, a tunnel service, not announced for want of a connector", svc, err)
	}
	if _, err := DialTCP(tl.client.NS, netip.AddrPortFrom(tl.origins["org1"].Addr4, 8000).String(), 0); err == nil {
		t.Fatal("the client reached an origin directly: the NAT must leave no inbound path")
	}
	org1 := tl.startConnector(t, "org1", "org1", tunnelWebToken, tl.edgeAddrs, 100)
	tl.startConnector(t, "org2", "org2", tunnelWebToken, tl.edgeAddrs, 300)
	tl.waitConnectors(t, 15*time.Second, "org1", "org2")
	tl.waitBothEdgesAnnounce(t)
	if st, err := tl.tunnelsOf("lb2"); err != nil || len(st.Services) != 1 || st.Services[0].Connectors != 2 ||
		st.Services[0].Capacity != 400 || !st.Services[0].Announced {
		t.Fatalf("lb2's tunnels: %+v, %v; want web with 2 connectors of capacity 400 in all, announced", st, err)
	}

	t.Run("RequestsReachTheOriginsThroughTheTunnels", func(t *testing.T) {
		if from, err := tl.get("/"); err != nil || (from != "org1" && from != "org2") {
			t.Fatalf("GET the VIP: answered by %q, %v", from, err)
		}
	})

	t.Run("ConnectorsShareByCapacity", func(t *testing.T) {
		const requests = 400
		count := map[string]int{}
		for range requests {
			from, err := tl.get("/")
			if err != nil {
				t.Fatal(err)
			}
			count[from]++
		}
		t.Logf("%d requests: %v", requests, count)
		// each edge sends 3 of 4 new connections to org2 (capacity 300 against 100)
		if share := float64(count["org2"]) / requests; share < 0.65 || share > 0.85 {
			t.Errorf("org2 took %.0f%% of %d requests (%v), want about 75%%", 100*share, requests, count)
		}
		for _, e := range tl.edges {
			st, err := tl.tunnelsOf(e.Role)
			if err != nil || st.Counters.Streams == 0 {
				t.Errorf("%s carried no stream (%v): the router's ECMP should spread clients over both edges", e.Role, err)
			}
		}
	})

	t.Run("BadAndOutOfScopeTokensAreRefused", func(t *testing.T) {
		bad := tl.startConnector(t, "org1", "bad", "not-a-token-of-this-edge-0123", tl.edgeAddrs[:1], 10)
		scope := tl.startConnector(t, "org1", "scope", tunnelOtherToken, tl.edgeAddrs[:1], 10)
		err := Eventually(15*time.Second, 20*time.Millisecond, func() error {
			st, err := tl.tunnelsOf("lb1")
			if err != nil {
				return err
			}
			if r := st.Counters.Refused; r[tunnel.RefusedUnknownToken] == 0 || r[tunnel.RefusedOutOfScope] == 0 {
				return fmt.Errorf("refusals %v", r)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		bad.Stop()
		scope.Stop()
		for _, p := range []*Process{bad, scope} {
			if strings.Contains(p.Log(), "not-a-token") {
				t.Errorf("%s logged its token", p.Name)
			}
		}
		tl.waitConnectors(t, 5*time.Second, "org1", "org2")
	})

	t.Run("AKilledConnectorGetsNoNewConnectionWithinASecond", func(t *testing.T) {
		var failed atomic.Int64
		stop := tl.load(&failed, "/")
		killed := time.Now()
		if err := org1.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		tl.waitConnectors(t, 10*time.Second, "org2")
		gone := time.Since(killed)
		served := stop()
		t.Logf("org1 killed: both edges stopped using it after %s; %d requests meanwhile, %d failed", gone, served, failed.Load())
		if gone > edgeGoneWithin {
			t.Errorf("the edges took %s to let go of a killed connector, want under %s", gone, edgeGoneWithin)
		}
		for range 20 {
			if from, err := tl.get("/"); err != nil || from != "org2" {
				t.Fatalf("after org1's death: answered by %q, %v", from, err)
			}
		}
	})

	t.Run("ADrainedConnectorFailsNoRequest", func(t *testing.T) {
		org1 = tl.startConnector(t, "org1", "org1", tunnelWebToken, tl.edgeAddrs, 100)
		tl.waitConnectors(t, 15*time.Second, "org1", "org2")
		org2 := tl.procByName("connect-org2")
		var failed atomic.Int64
		stop := tl.load(&failed, "/slow")
		if err := org2.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := org2.Wait(30 * time.Second); err != nil {
			t.Fatalf("the drained connector: %v", err)
		}
		served := stop()
		t.Logf("org2 drained: %d requests meanwhile, %d failed", served, failed.Load())
		if failed.Load() != 0 || served == 0 {
			t.Errorf("while org2 drained: %d requests, %d failed; want none failed", served, failed.Load())
		}
		tl.waitConnectors(t, 5*time.Second, "org1")
	})
}

// load sends requests for path from 8 clients until the returned stop is called,
// which returns how many completed; failed counts those that did not.
func (tl *tunnelLab) load(failed *atomic.Int64, path string) func() int64 {
	var done atomic.Bool
	var served atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !done.Load() {
				if _, err := tl.get(path); err != nil {
					failed.Add(1)
					continue
				}
				served.Add(1)
			}
		})
	}
	return func() int64 {
		done.Store(true)
		wg.Wait()
		return served.Load()
	}
}

func (tl *tunnelLab) procByName(name string) *Process {
	for _, p := range tl.procs {
		if p.Name == name && p.Running() {
			return p
		}
	}
	return nil
}

// With the fleet store, an edge that has no connector relays its clients to the edge
// that has one.
func TestTunnelRelay(t *testing.T) {
	if err := hostprog.Check(hostprog.Etcd); err != nil {
		testenv.Missing(t, err)
	}
	tl := newTunnelLab(t, "org1")
	relayToken := filepath.Join(tl.Dir, "relay-token")
	if err := os.WriteFile(relayToken, []byte(tunnelRelayToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tl.tunnels.RelayTokenFile, tl.tunnels.CAFile = relayToken, tl.caFile
	lb1, lb2 := tl.edges[0], tl.edges[1]
	etcd, err := tl.StartEtcd(lb1)
	if err != nil {
		t.Fatal(err)
	}
	fleet := &Fleet{Endpoints: etcd.Endpoints()}
	// the services' file is a file node's: its tunnels section relays to no one
	services := tl.nodeConfig(lb1, nil, webTunnel)
	services.Tunnels = &Tunnels{CertFile: tl.tunnels.CertFile, KeyFile: tl.tunnels.KeyFile, TokensFile: tl.tunnels.TokensFile}
	if err := tl.FleetImport(manifoldBin, lb1, tl.nodeConfig(lb1, fleet), services, false); err != nil {
		t.Fatal(err)
	}
	for _, e := range tl.edges {
		if _, err := tl.StartNode(manifoldBin, e, tl.nodeConfig(e, fleet)); err != nil {
			t.Fatal(err)
		}
	}
	// the connector dials lb1 only: lb2 has nothing of its own to serve web with
	tl.startConnector(t, "org1", "org1", tunnelWebToken, tl.edgeAddrs[:1], 100)
	err = Eventually(15*time.Second, 20*time.Millisecond, func() error {
		st, err := tl.tunnelsOf(lb2.Role)
		if err != nil {
			return err
		}
		for _, tn := range st.Tunnels {
			if tn.Relay && tn.Connector == lb1.Role && len(tn.Services) == 1 && tn.Services[0].Capacity == 100 {
				return nil
			}
		}
		return fmt.Errorf("lb2 has no relay from lb1 offering web: %+v", st.Tunnels)
	})
	if err != nil {
		t.Fatal(err)
	}
	tl.waitBothEdgesAnnounce(t)
	count := map[string]int{}
	for range 100 {
		from, err := tl.get("/")
		if err != nil {
			t.Fatal(err)
		}
		count[from]++
	}
	st, err := tl.tunnelsOf(lb2.Role)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("100 requests: %v; lb2 relayed %d of them", count, st.Counters.Streams)
	if count["org1"] != 100 || st.Counters.Streams == 0 {
		t.Errorf("answers %v, lb2 relayed %d streams: want every request answered and some relayed by lb2", count, st.Counters.Streams)
	}
	var fl wire.FleetStatus
	if err := tl.api[lb2.Role].Get("/api/v1/fleet", &fl); err != nil {
		t.Fatal(err)
	}
	for _, n := range fl.Nodes {
		if n.Tunnels == nil || n.Tunnels.Relay == "" {
			t.Errorf("fleet record of %s: tunnels %+v, want its relay address", n.Name, n.Tunnels)
			continue
		}
		if want := n.Name == lb1.Role; want != (len(n.Tunnels.Services) == 1) {
			t.Errorf("fleet record of %s: connectors' services %v", n.Name, n.Tunnels.Services)
		}
	}
}

// Where the origin's network lets no UDP out (an nftables drop on its NAT), a
// connector of transport auto (the default) finds QUIC without answer and runs its
// tunnels over TLS over TCP to the same port: they attach, and requests reach the
// origin through them.
func TestTunnelsOverTCPWhereUDPIsBlocked(t *testing.T) {
	tl := newTunnelLab(t, "org1")
	if out, err := tl.nat.Output(hostprog.Nft, "add", "rule", "ip", "mfnat", "forward", "meta", "l4proto", "udp", "drop"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	for _, e := range tl.edges {
		if _, err := tl.StartNode(manifoldBin, e, tl.nodeConfig(e, nil, webTunnel)); err != nil {
			t.Fatal(err)
		}
	}
	tl.startConnector(t, "org1", "org1", tunnelWebToken, tl.edgeAddrs, 100)
	tl.waitConnectors(t, 30*time.Second, "org1")
	for _, e := range tl.edges {
		st, err := tl.tunnelsOf(e.Role)
		if err != nil || len(st.Tunnels) != 1 || st.Tunnels[0].Transport != tunnel.TransportTCP {
			t.Fatalf("%s's tunnels: %+v, %v; want org1's over tcp", e.Role, st.Tunnels, err)
		}
	}
	tl.waitBothEdgesAnnounce(t)
	for range 20 {
		if from, err := tl.get("/"); err != nil || from != "org1" {
			t.Fatalf("GET the VIP: answered by %q, %v; want org1 through a TCP tunnel", from, err)
		}
	}
}
