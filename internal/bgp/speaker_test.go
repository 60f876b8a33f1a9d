package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/testenv"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// The speaker is tested against a second, independent GoBGP server acting as the
// router, over loopback: real sessions, real UPDATE messages. The lab tests do the
// same against BIRD.

var (
	nodeV4 = netip.MustParseAddr("10.0.0.11")
	nodeV6 = netip.MustParseAddr("fd00::11")
	vip4   = netip.MustParseAddr("198.51.100.10")
	vip6   = netip.MustParseAddr("2001:db8:100::10")
)

// router is a passive GoBGP peer on 127.0.0.1 that accepts every route.
type router struct {
	srv  *server.BgpServer
	port int
}

func newRouter(t *testing.T, asn uint32, peerASN uint32, password string) *router {
	t.Helper()
	port := freePort(t)
	srv := server.NewBgpServer(server.LoggerOption(slog.New(slog.DiscardHandler), nil))
	go srv.Serve()
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: "10.255.0.1", ListenPort: int32(port), ListenAddresses: []string{"127.0.0.1"},
	}}); err != nil {
		t.Fatal(err)
	}
	peer := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: peerASN, AuthPassword: password},
		Transport: &api.Transport{PassiveMode: true},
	}
	for _, afi := range []api.Family_Afi{api.Family_AFI_IP, api.Family_AFI_IP6} {
		peer.AfiSafis = append(peer.AfiSafis, &api.AfiSafi{Config: &api.AfiSafiConfig{
			Family: &api.Family{Afi: afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true}})
	}
	if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: peer}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return &router{srv: srv, port: port}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// routes returns prefix → next hop of what the router has received.
func (r *router) routes(t *testing.T) map[string]string { return rib(t, r.srv, true) }

// rib returns prefix → next hop of the server's RIB: the routes received from peers
// only, or every route.
func rib(t *testing.T, srv *server.BgpServer, receivedOnly bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
		err := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f},
			func(prefix bgp.NLRI, paths []*apiutil.Path) {
				for _, p := range paths {
					if receivedOnly && !p.PeerAddress.IsValid() {
						continue
					}
					for _, a := range p.Attrs {
						switch a := a.(type) {
						case *bgp.PathAttributeNextHop:
							out[prefix.String()] = a.Value.String()
						case *bgp.PathAttributeMpReachNLRI:
							out[prefix.String()] = a.Nexthop.String()
						}
					}
				}
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func (r *router) originate(t *testing.T, prefix, nexthop string) {
	t.Helper()
	nlri, _ := bgp.NewIPAddrPrefix(netip.MustParsePrefix(prefix))
	nh, _ := bgp.NewPathAttributeNextHop(netip.MustParseAddr(nexthop))
	if _, err := r.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{Family: bgp.RF_IPv4_UC, Nlri: nlri,
		Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), nh}}}}); err != nil {
		t.Fatal(err)
	}
}

func startSpeaker(t *testing.T, r *router, asn, peerASN uint32, password string) *GoBGP {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := Start(Config{
		ASN: asn, RouterID: nodeV4, NextHop4: nodeV4, NextHop6: nodeV6,
		Peers: []config.Peer{{Address: netip.MustParseAddr("127.0.0.1"), ASN: peerASN, Port: uint16(r.port), HoldTime: 3 * time.Second, Password: password}},
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// eventually polls cond until it holds, failing the test after timeout. GoBGP runs its
// sessions on its own wall-clock timers (connect retry, idle hold), which cannot take
// an injected clock, and tells no event of what the tests wait for (a route in a peer's
// RIB): the tests poll the condition itself, and timeout is only a bound on failure.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantRoutes(t *testing.T, r *router, want map[string]string) {
	t.Helper()
	// A session may need a connect retry, an idle hold and the retry after it.
	eventually(t, 3*ConnectRetry, "routes on the router", func() error {
		if got := r.routes(t); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("router has %v, want %v", got, want)
		}
		return nil
	})
}

func TestAnnounceWithdrawBothFamilies(t *testing.T) {
	for _, tc := range []struct {
		name string
		asn  uint32 // the node's; the router is 65000
	}{{"ebgp", 65001}, {"ibgp", 65000}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, 65000, tc.asn, "")
			s := startSpeaker(t, r, tc.asn, 65000, "")
			eventually(t, 10*time.Second, "session up", func() error {
				if p := s.Peers(); len(p) != 1 || !p[0].Up() {
					return fmt.Errorf("peers %+v", p)
				}
				return nil
			})
			if err := s.Announce(vip4, Attributes{}); err != nil {
				t.Fatal(err)
			}
			if err := s.Announce(vip6, Attributes{}); err != nil {
				t.Fatal(err)
			}
			if err := s.Announce(vip4, Attributes{}); err != nil { // idempotent
				t.Fatal(err)
			}
			wantRoutes(t, r, map[string]string{"198.51.100.10/32": "10.0.0.11", "2001:db8:100::10/128": "fd00::11"})
			// The router's own routes are refused: the node's RIB holds its VIPs only.
			// GoBGP puts a received route in the peer's Adj-RIB-In and decides on the
			// global RIB in one step under its lock; once the route shows in the
			// Adj-RIB-In, the import policy has run.
			r.originate(t, "0.0.0.0/0", "10.255.0.1")
			eventually(t, 5*time.Second, "the router's route received by the node", func() error {
				if got := adjIn(t, s.srv, "127.0.0.1"); got["0.0.0.0/0"] != "10.255.0.1" {
					return fmt.Errorf("Adj-RIB-In of the router holds %v", got)
				}
				return nil
			})
			if got := rib(t, s.srv, false); len(got) != 2 {
				t.Errorf("the node's RIB holds %v, want its two VIPs only", got)
			}
			if got := s.Announced(); !slices.Equal(got, []netip.Addr{vip4, vip6}) {
				t.Errorf("Announced() = %v", got)
			}
			if err := s.Withdraw(vip4); err != nil {
				t.Fatal(err)
			}
			if err := s.Withdraw(vip4); err != nil { // idempotent
				t.Fatal(err)
			}
			wantRoutes(t, r, map[string]string{"2001:db8:100::10/128": "fd00::11"})
			// GoBGP counts a message after it wrote it: the router may have it first
			eventually(t, 5*time.Second, "the updates counted", func() error {
				if p := s.Peers()[0]; p.Since.IsZero() || p.UpdatesSent < 3 {
					return fmt.Errorf("peer state %+v: want an up time and at least 3 updates sent", p)
				}
				return nil
			})
			// Close withdraws the rest before the session ends.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			wantRoutes(t, r, map[string]string{})
		})
	}
}

func TestAnnounceWithoutNextHopOfTheFamily(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	s, err := Start(Config{ASN: 65001, RouterID: nodeV4, NextHop4: nodeV4,
		Peers: []config.Peer{{Address: netip.MustParseAddr("127.0.0.1"), ASN: 65000, Port: uint16(freePort(t))}}}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Announce(vip6, Attributes{}); err == nil {
		t.Fatal("announcing an IPv6 VIP without an IPv6 next hop succeeded")
	}
	if got := s.Announced(); len(got) != 0 {
		t.Errorf("Announced() = %v after a failed announce", got)
	}
}

// TestPeerDownIsRetried: a peer that is not there at first is connected to once it
// appears, without restarting the speaker. At first the port accepts TCP but speaks
// no BGP, and closes the connection: the test sees the failed attempt, where it would
// have to sleep to be sure that a refused one happened.
func TestPeerDownIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	log := slog.New(slog.DiscardHandler)
	s, err := Start(Config{ASN: 65001, RouterID: nodeV4, NextHop4: nodeV4,
		Peers: []config.Peer{{Address: netip.MustParseAddr("127.0.0.1"), ASN: 65000, Port: uint16(port), HoldTime: 3 * time.Second}}}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Announce(vip4, Attributes{}); err != nil {
		t.Fatal(err)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(3 * ConnectRetry)) // a bound on failure only
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("no connection attempt from the speaker: %v", err)
	}
	conn.Close()
	ln.Close() // from now on the port refuses, until the router listens on it
	if p := s.Peers()[0]; p.Up() {
		t.Fatalf("peer up with no router: %+v", p)
	}
	r := newRouterOnPort(t, port)
	wantRoutes(t, r, map[string]string{"198.51.100.10/32": "10.0.0.11"})
}

func newRouterOnPort(t *testing.T, port int) *router {
	t.Helper()
	srv := server.NewBgpServer(server.LoggerOption(slog.New(slog.DiscardHandler), nil))
	go srv.Serve()
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: 65000, RouterId: "10.255.0.1", ListenPort: int32(port), ListenAddresses: []string{"127.0.0.1"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 65001},
		Transport: &api.Transport{PassiveMode: true},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return &router{srv: srv, port: port}
}

// TestMD5: the session comes up with the right TCP MD5 key and never with a wrong one
// (the kernel drops the unsigned or badly signed segments).
func TestMD5(t *testing.T) {
	t.Run("right key", func(t *testing.T) {
		r := newRouter(t, 65000, 65001, "s3cret-key")
		s := startSpeaker(t, r, 65001, 65000, "s3cret-key")
		if err := s.Announce(vip4, Attributes{}); err != nil {
			t.Fatal(err)
		}
		wantRoutes(t, r, map[string]string{"198.51.100.10/32": "10.0.0.11"})
	})
	t.Run("wrong key", func(t *testing.T) {
		r := newRouter(t, 65000, 65001, "s3cret-key")
		drops := md5Failures(t)
		s := startSpeaker(t, r, 65001, 65000, "other-key")
		if err := s.Announce(vip4, Attributes{}); err != nil {
			t.Fatal(err)
		}
		// The event that shows the key at work: the router's kernel drops the
		// speaker's badly signed SYN (and the session cannot come up before one passes).
		eventually(t, 3*ConnectRetry, "a segment dropped for its MD5 signature", func() error {
			if n := md5Failures(t); n == drops {
				return fmt.Errorf("TcpExt TCPMD5Failure still %d", n)
			}
			return nil
		})
		if p := s.Peers()[0]; p.Up() {
			t.Fatalf("session up with a wrong MD5 key: %+v", p)
		}
		if got := r.routes(t); len(got) != 0 {
			t.Fatalf("router got %v over a session with a wrong key", got)
		}
	})
}

// adjIn returns prefix → next hop of the routes received from one peer, before the
// import policy.
func adjIn(t *testing.T, srv *server.BgpServer, peer string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: peer, Family: bgp.RF_IPv4_UC},
		func(prefix bgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				for _, a := range p.Attrs {
					if nh, ok := a.(*bgp.PathAttributeNextHop); ok {
						out[prefix.String()] = nh.Value.String()
					}
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// md5Failures reads the network namespace's count of TCP segments dropped for a wrong
// MD5 signature.
func md5Failures(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		testenv.Missingf(t, "no TCP counters to see MD5 drops: %v", err)
	}
	// Pairs of lines: "TcpExt: name name ..." then "TcpExt: value value ...".
	lines := strings.Split(string(data), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		if j := slices.Index(names, "TCPMD5Failure"); j > 0 {
			n, err := strconv.ParseUint(values[j], 10, 64)
			if err != nil {
				t.Fatalf("TcpExt TCPMD5Failure: %v", err)
			}
			return n
		}
	}
	testenv.Missing(t, "the kernel does not count MD5 drops (TcpExt TCPMD5Failure)")
	return 0
}

// received returns the attributes of the router's route to prefix, as text: the AS
// path, the MED, the communities and the large communities; "" when it has none.
func (r *router) received(t *testing.T, prefix string) string {
	t.Helper()
	var out string
	family := bgp.RF_IPv4_UC
	if strings.Contains(prefix, ":") {
		family = bgp.RF_IPv6_UC
	}
	err := r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: family},
		func(nlri bgp.NLRI, paths []*apiutil.Path) {
			if nlri.String() != prefix {
				return
			}
			for _, p := range paths {
				var parts []string
				for _, a := range p.Attrs {
					switch a := a.(type) {
					case *bgp.PathAttributeAsPath:
						parts = append(parts, "as-path "+a.String())
					case *bgp.PathAttributeMultiExitDisc:
						parts = append(parts, "med "+strconv.Itoa(int(a.Value)))
					case *bgp.PathAttributeCommunities:
						parts = append(parts, "communities "+a.String())
					case *bgp.PathAttributeLargeCommunities:
						parts = append(parts, "large "+a.String())
					}
				}
				out = strings.Join(parts, "; ")
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The router sees exactly the configured communities, MED and prepend: the prepend on
// eBGP only, and the marker that asks for it never.
func TestAttributes(t *testing.T) {
	med := uint32(50)
	attrs := Attributes{
		Communities:      []config.Community{65001<<16 | 200, 65001<<16 | 100, 65001<<16 | 100, 0xFFFFFF01},
		LargeCommunities: []config.LargeCommunity{{Global: 65001, Local1: 1, Local2: 2}},
		MED:              &med, Prepend: 2,
	}
	// in GoBGP's words; the marker asking for the prepend is not among them
	const rest = "med 50; communities {Communities: 65001:100, 65001:200, no-export}; large {LargeCommunity: [ 65001:1:2]}"
	for _, tc := range []struct {
		name string
		asn  uint32
		want string
	}{
		{"ebgp", 65001, "as-path {AsPath: 65001 65001 65001}; " + rest},
		{"ibgp", 65000, "as-path {AsPath: }; " + rest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, 65000, tc.asn, "")
			s := startSpeaker(t, r, tc.asn, 65000, "")
			if err := s.Announce(vip4, attrs); err != nil {
				t.Fatal(err)
			}
			if err := s.Announce(vip6, attrs); err != nil {
				t.Fatal(err)
			}
			for _, prefix := range []string{"198.51.100.10/32", "2001:db8:100::10/128"} {
				eventually(t, 3*ConnectRetry, prefix+" with its attributes", func() error {
					if got := r.received(t, prefix); got != tc.want {
						return fmt.Errorf("router has %q, want %q", got, tc.want)
					}
					return nil
				})
			}
			// other attributes replace the route; none leaves a bare one
			if err := s.Announce(vip4, Attributes{}); err != nil {
				t.Fatal(err)
			}
			bare := "as-path {AsPath: 65001}"
			if tc.asn == 65000 {
				bare = "as-path {AsPath: }"
			}
			eventually(t, 5*time.Second, "the route replaced", func() error {
				if got := r.received(t, "198.51.100.10/32"); got != bare {
					return fmt.Errorf("router has %q, want %q", got, bare)
				}
				return nil
			})
		})
	}
}

// SetPeers touches only the sessions whose settings changed: a new peer and a BFD
// change leave the router's session up since the same moment; a hold time change
// restarts it.
func TestSetPeers(t *testing.T) {
	r := newRouter(t, 65000, 65001, "")
	s := startSpeaker(t, r, 65001, 65000, "")
	var since time.Time
	upSince := func(what string) time.Time {
		t.Helper()
		var at time.Time
		eventually(t, 3*ConnectRetry, what, func() error {
			p := s.Peers()
			if len(p) == 0 || !p[0].Up() {
				return fmt.Errorf("peers %+v", p)
			}
			at = p[0].Since
			return nil
		})
		return at
	}
	since = upSince("session up")
	peers := slices.Clone(s.cfg.Peers)

	refusing := config.Peer{Address: netip.MustParseAddr("::1"), ASN: 65000, Port: uint16(freePort(t)), HoldTime: 3 * time.Second}
	withBFD := peers[0]
	withBFD.BFD = &config.BFD{MinRx: 100 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 3}
	for _, step := range []struct {
		peers []config.Peer
		bfd   bool // the router's peer has BFD (down: the router runs none)
	}{
		{[]config.Peer{peers[0], refusing}, false}, // added
		{[]config.Peer{withBFD, refusing}, true},   // BFD on
		{[]config.Peer{peers[0]}, false},           // BFD off, refusing removed
	} {
		if err := s.SetPeers(step.peers); err != nil {
			t.Fatal(err)
		}
		got := s.Peers()
		if len(got) != len(step.peers) {
			t.Fatalf("peers %+v after SetPeers of %d", got, len(step.peers))
		}
		if want := map[bool]string{true: "down", false: ""}[step.bfd]; got[0].BFD != want {
			t.Fatalf("the router's peer shows BFD %q, want %q", got[0].BFD, want)
		}
		if at := upSince("session still up"); !at.Equal(since) {
			t.Fatalf("the router's session restarted (up since %s, was %s) on a change of another peer or of BFD", at, since)
		}
	}
	slower := peers[0]
	slower.HoldTime = 6 * time.Second
	if err := s.SetPeers([]config.Peer{slower}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*ConnectRetry, "the session restarted with the new hold time", func() error {
		var hold uint64
		r.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
			if p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED {
				hold = p.GetTimers().GetState().GetNegotiatedHoldTime()
			}
		})
		if hold != 6 {
			return fmt.Errorf("negotiated hold time %d, want 6", hold)
		}
		return nil
	})
}
