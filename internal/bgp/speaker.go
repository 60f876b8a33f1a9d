// Package bgp announces the node's VIPs to its routers. The node sees only the
// [Speaker] interface; [Start] returns one backed by GoBGP embedded as a library (no
// separate daemon, no gRPC).
//
// The speaker originates host routes only: a /32 for an IPv4 VIP with the node's IPv4
// address as next hop, a /128 for an IPv6 VIP with the node's IPv6 address as next hop
// (MP-BGP). Every session carries the families the node has an address for, so one
// IPv4 session can carry IPv6 VIPs too. Routes the peers send are refused: a load
// balancer node needs none of them and must not grow a RIB from its upstream.
//
// Sessions are opened actively and retried every [ConnectRetry] while a peer is down
// or refuses them; the node keeps forwarding whatever the sessions do. The speaker also
// accepts sessions from its configured peers (on [Config.ListenPort], 179 for a node),
// because GoBGP waits 1.5–2 s before its first connection attempt, while a router that
// retries its own side brings the session up as soon as the node listens.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// ConnectRetry is how often a session that is down is tried again. GoBGP's default,
// 120 s, is far too slow for a node that must be back in the ECMP group within
// seconds of its router restarting.
const ConnectRetry = 3 * time.Second

// Speaker announces and withdraws VIPs. Announce and Withdraw are idempotent; Announce
// with other attributes replaces the route.
type Speaker interface {
	Announce(vip netip.Addr, attrs Attributes) error
	Withdraw(vip netip.Addr) error
	// Announced lists the VIPs announced now, sorted.
	Announced() []netip.Addr
	// Peers reports the state of every configured peer, in config order.
	Peers() []PeerState
	// SetPeers makes the peers these: new ones are added, gone ones closed, and only
	// the sessions whose settings changed are touched (see [GoBGP.SetPeers]).
	SetPeers(peers []config.Peer) error
	// Close withdraws everything and closes the sessions (a Cease notification).
	Close() error
}

// Config is what the speaker needs: the node's identity and its peers.
type Config struct {
	ASN      uint32
	RouterID netip.Addr
	// NextHop4 and NextHop6 are the node's addresses, the next hops of VIPs of their
	// family. A zero one means the node announces no VIP of that family.
	NextHop4, NextHop6 netip.Addr
	Peers              []config.Peer
	// ListenPort is the TCP port to accept sessions from the peers on; 0 does not
	// listen. When the port is taken (another BGP daemon on the host), the speaker
	// says so and connects actively only.
	ListenPort int
}

// PeerState is a peer as the speaker sees it now.
type PeerState struct {
	Address netip.Addr
	ASN     uint32
	State   string // idle, connect, active, opensent, openconfirm, established
	// Since is when the session was last established (zero when it is not).
	Since           time.Time
	UpdatesSent     uint64
	UpdatesReceived uint64
	// BFD is the state of the peer's BFD session (up, down, init, admin-down), "" when
	// the peer has none.
	BFD string
}

func (p PeerState) Up() bool { return p.State == "established" }

// GoBGP is the Speaker backed by an embedded GoBGP server.
type GoBGP struct {
	cfg    Config // Peers guarded by mu: SetPeers changes them
	log    *slog.Logger
	srv    *server.BgpServer
	ctx    context.Context
	cancel context.CancelFunc

	closeOnce sync.Once
	closing   atomic.Bool // sessions going down now are the speaker's own doing

	mu        sync.Mutex
	announced map[netip.Addr]Attributes
	peerLogs  map[netip.Addr]*peerLog
}

// Start starts the speaker and adds its peers; sessions come up in the background.
// Sessions going up and down are logged with the reason.
func Start(cfg Config, log *slog.Logger) (*GoBGP, error) {
	if !cfg.RouterID.Is4() {
		return nil, fmt.Errorf("bgp: router id %s is not an IPv4 address", cfg.RouterID)
	}
	// GoBGP logs at its own verbosity; ours says what an operator needs (peer up and
	// down, announce, withdraw), so GoBGP's own lines are kept to warnings.
	level := &slog.LevelVar{}
	level.Set(slog.LevelWarn)
	srv := server.NewBgpServer(server.LoggerOption(log.With("component", "gobgp"), level))
	go srv.Serve()

	listen := int32(-1) // GoBGP: -1 = do not listen
	if cfg.ListenPort > 0 {
		if ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(cfg.ListenPort))); err != nil {
			log.Warn("BGP: not accepting sessions, connecting actively only", "port", cfg.ListenPort, "err", err)
		} else {
			ln.Close()
			listen = int32(cfg.ListenPort)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Peers = slices.Clone(cfg.Peers)
	s := &GoBGP{cfg: cfg, log: log, srv: srv, ctx: ctx, cancel: cancel, announced: map[netip.Addr]Attributes{}, peerLogs: map[netip.Addr]*peerLog{}}
	fail := func(err error) (*GoBGP, error) {
		cancel()
		srv.Stop()
		return nil, err
	}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:        cfg.ASN,
		RouterId:   cfg.RouterID.String(),
		ListenPort: listen,
	}}); err != nil {
		return fail(fmt.Errorf("bgp: start: %w", err))
	}
	if err := refusePeerRoutes(ctx, srv); err != nil {
		return fail(err)
	}
	if err := addExportPolicy(ctx, srv, cfg.ASN); err != nil {
		return fail(err)
	}
	if err := srv.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnPeerUpdate: s.onPeer}, server.WatchPeer()); err != nil {
		return fail(fmt.Errorf("bgp: watch peers: %w", err))
	}
	for _, p := range cfg.Peers {
		if err := s.addPeer(p); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// addPeer adds a session; an iBGP peer joins the set the export policy exempts from
// prepending first, so that not one UPDATE goes out without it.
func (s *GoBGP) addPeer(p config.Peer) error {
	if p.ASN == s.cfg.ASN {
		if err := s.srv.AddDefinedSet(s.ctx, &api.AddDefinedSetRequest{DefinedSet: ibgpSet(p)}); err != nil {
			return fmt.Errorf("bgp: peer %s: %w", p.Address, err)
		}
	}
	if err := s.srv.AddPeer(s.ctx, &api.AddPeerRequest{Peer: s.peerConfig(p)}); err != nil {
		return fmt.Errorf("bgp: peer %s: %w", p.Address, err)
	}
	args := []any{"peer", p.Address, "peer_asn", p.ASN, "session", sessionKind(s.cfg.ASN, p.ASN), "hold_time", p.HoldTime, "md5", p.Password != ""}
	if p.BFD != nil {
		args = append(args, "bfd_min_rx", p.BFD.MinRx, "bfd_min_tx", p.BFD.MinTx, "bfd_multiplier", p.BFD.Multiplier)
	}
	s.log.Info("BGP peer configured", args...)
	return nil
}

// SetPeers applies a new list of peers without a restart. A peer that is gone is
// closed (a Cease notification); a new one is added; a peer whose only change is its
// BFD settings keeps its session (BFD restarts beside it); any other change (ASN, port,
// hold time, password, multihop) closes and reopens that one session, since the
// hold time is agreed in the OPEN and the password is the TCP connection's. Sessions
// of unchanged peers are not touched. On an error the peers changed so far stay
// changed and the error says which peer failed.
func (s *GoBGP) SetPeers(peers []config.Peer) error {
	s.mu.Lock()
	old := map[netip.Addr]config.Peer{}
	for _, p := range s.cfg.Peers {
		old[p.Address] = p
	}
	s.cfg.Peers = slices.Clone(peers)
	s.mu.Unlock()

	want := map[netip.Addr]bool{}
	for _, p := range peers {
		want[p.Address] = true
	}
	for addr, p := range old {
		if want[addr] {
			continue
		}
		if err := s.removePeer(p); err != nil {
			return err
		}
		s.log.Info("BGP peer removed", "peer", addr)
	}
	for _, p := range peers {
		was, ok := old[p.Address]
		switch {
		case !ok:
			if err := s.addPeer(p); err != nil {
				return err
			}
		case reflect.DeepEqual(was, p):
		case bfdOnly(was, p):
			if _, err := s.srv.UpdatePeer(s.ctx, &api.UpdatePeerRequest{Peer: s.peerConfig(p)}); err != nil {
				return fmt.Errorf("bgp: peer %s: bfd: %w", p.Address, err)
			}
			s.log.Info("BGP peer's BFD changed, session kept", "peer", p.Address, "bfd", p.BFD != nil)
		default:
			if err := s.removePeer(was); err != nil {
				return err
			}
			if err := s.addPeer(p); err != nil {
				return err
			}
			s.log.Info("BGP peer's settings changed, its session restarted", "peer", p.Address)
		}
	}
	return nil
}

// removePeer closes a session (a Cease notification) and forgets the peer.
func (s *GoBGP) removePeer(p config.Peer) error {
	if err := s.srv.DeletePeer(s.ctx, &api.DeletePeerRequest{Address: p.Address.String()}); err != nil {
		return fmt.Errorf("bgp: remove peer %s: %w", p.Address, err)
	}
	if p.ASN == s.cfg.ASN {
		if err := s.srv.DeleteDefinedSet(s.ctx, &api.DeleteDefinedSetRequest{DefinedSet: ibgpSet(p)}); err != nil {
			return fmt.Errorf("bgp: remove peer %s: %w", p.Address, err)
		}
	}
	return nil
}

// peerLocked returns the configured peer at addr; s.mu is held.
func (s *GoBGP) peerLocked(addr netip.Addr) (config.Peer, bool) {
	for _, p := range s.cfg.Peers {
		if p.Address == addr {
			return p, true
		}
	}
	return config.Peer{}, false
}

// restartBFD starts a peer's BFD session afresh after its BGP session went down.
// GoBGP (v4.8.0) keeps a BFD session bound to the router's session of before; a
// router that makes a new BFD session with each BGP session (BIRD does) then sends
// packets GoBGP drops as another session's, GoBGP's BFD expires, resets the new BGP
// session, and the router makes yet another BFD session: the session flaps for as
// long as the race keeps being lost. A fresh session binds to whichever one the
// router has now.
func (s *GoBGP) restartBFD(p config.Peer) {
	off := p
	off.BFD = nil
	update := func(peer config.Peer) bool {
		_, err := s.srv.UpdatePeer(s.ctx, &api.UpdatePeerRequest{Peer: s.peerConfig(peer)})
		if err != nil && s.ctx.Err() == nil {
			s.log.Warn("BFD not restarted after the session went down", "peer", p.Address, "err", err)
		}
		return err == nil
	}
	if !update(off) {
		return
	}
	// as configured now: SetPeers may have changed the peer meanwhile
	s.mu.Lock()
	now, ok := s.peerLocked(p.Address)
	s.mu.Unlock()
	if ok && now.BFD != nil {
		update(now)
	}
}

// bfdOnly reports whether two settings of a peer differ in their BFD alone.
func bfdOnly(a, b config.Peer) bool {
	a.BFD, b.BFD = nil, nil
	return reflect.DeepEqual(a, b)
}

// refusePeerRoutes keeps routes learned from peers (iBGP or eBGP) out of the RIB; the
// global import policy also sees the node's own routes, which it must let through.
func refusePeerRoutes(ctx context.Context, srv *server.BgpServer) error {
	reject := func(name string, rt api.Conditions_RouteType) *api.Statement {
		return &api.Statement{Name: name, Conditions: &api.Conditions{RouteType: rt},
			Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT}}
	}
	policy := &api.Policy{Name: "refuse-peer-routes", Statements: []*api.Statement{
		reject("refuse-ibgp", api.Conditions_ROUTE_TYPE_INTERNAL),
		reject("refuse-ebgp", api.Conditions_ROUTE_TYPE_EXTERNAL),
	}}
	if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: policy}); err != nil {
		return fmt.Errorf("bgp: import policy: %w", err)
	}
	if err := srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name:          "global",
		Direction:     api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies:      []*api.Policy{{Name: policy.Name}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT,
	}}); err != nil {
		return fmt.Errorf("bgp: import policy: %w", err)
	}
	return nil
}

func sessionKind(local, peer uint32) string {
	if local == peer {
		return "ibgp"
	}
	return "ebgp"
}

func (s *GoBGP) peerConfig(p config.Peer) *api.Peer {
	hold := uint64(p.HoldTime / time.Second)
	peer := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    p.Password,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(ConnectRetry / time.Second),
			HoldTime:          hold,
			KeepaliveInterval: hold / 3,
			// announce and withdraw at once: convergence time is what we sell
			MinimumAdvertisementInterval: 0,
			IdleHoldTimeAfterReset:       1,
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
	}
	if p.EBGPMultihop > 0 {
		peer.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultihop)}
	}
	// always set, so that an update without BFD turns it off
	peer.Bfd = &api.BfdPeerConfig{}
	if b := p.BFD; b != nil {
		peer.Bfd = &api.BfdPeerConfig{
			Enabled:                  true,
			DesiredMinimumTxInterval: uint32(b.MinTx / time.Microsecond),
			RequiredMinimumReceive:   uint32(b.MinRx / time.Microsecond),
			DetectionMultiplier:      uint32(b.Multiplier),
		}
	}
	for _, f := range s.families() {
		peer.AfiSafis = append(peer.AfiSafis, &api.AfiSafi{Config: &api.AfiSafiConfig{
			Family: &api.Family{Afi: f.afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true,
		}})
	}
	return peer
}

type family struct {
	afi api.Family_Afi
	rf  bgp.Family
}

var (
	ipv4Unicast = family{api.Family_AFI_IP, bgp.RF_IPv4_UC}
	ipv6Unicast = family{api.Family_AFI_IP6, bgp.RF_IPv6_UC}
)

// families are the address families the node can announce: those it has a next hop of.
func (s *GoBGP) families() []family {
	var out []family
	if s.cfg.NextHop4.IsValid() {
		out = append(out, ipv4Unicast)
	}
	if s.cfg.NextHop6.IsValid() {
		out = append(out, ipv6Unicast)
	}
	return out
}

// path is the host route of a VIP with this node as next hop.
func (s *GoBGP) path(vip netip.Addr, a Attributes, withdraw bool) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(netip.PrefixFrom(vip, vip.BitLen()))
	if err != nil {
		return nil, err
	}
	attrs := append([]bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}, s.pathAttributes(a)...)
	if vip.Is4() {
		if !s.cfg.NextHop4.IsValid() {
			return nil, fmt.Errorf("bgp: %s: the node has no IPv4 address to be its next hop", vip)
		}
		nh, err := bgp.NewPathAttributeNextHop(s.cfg.NextHop4)
		if err != nil {
			return nil, err
		}
		return &apiutil.Path{Family: ipv4Unicast.rf, Nlri: nlri, Attrs: append(attrs, nh), Withdrawal: withdraw}, nil
	}
	if !s.cfg.NextHop6.IsValid() {
		return nil, fmt.Errorf("bgp: %s: the node has no IPv6 address to be its next hop", vip)
	}
	mp, err := bgp.NewPathAttributeMpReachNLRI(ipv6Unicast.rf, []bgp.PathNLRI{{NLRI: nlri}}, s.cfg.NextHop6)
	if err != nil {
		return nil, err
	}
	return &apiutil.Path{Family: ipv6Unicast.rf, Nlri: nlri, Attrs: append(attrs, mp), Withdrawal: withdraw}, nil
}

func (s *GoBGP) Announce(vip netip.Addr, attrs Attributes) error {
	attrs = attrs.normal()
	s.mu.Lock()
	defer s.mu.Unlock()
	if was, ok := s.announced[vip]; ok && was.Equal(attrs) {
		return nil
	}
	p, err := s.path(vip, attrs, false)
	if err != nil {
		return err
	}
	// GoBGP replaces the node's earlier path of the same prefix
	if _, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		return fmt.Errorf("bgp: announce %s: %w", vip, err)
	}
	s.announced[vip] = attrs
	return nil
}

func (s *GoBGP) Withdraw(vip netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	attrs, ok := s.announced[vip]
	if !ok {
		return nil
	}
	p, err := s.path(vip, attrs, true)
	if err != nil {
		return err
	}
	if err := s.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		return fmt.Errorf("bgp: withdraw %s: %w", vip, err)
	}
	delete(s.announced, vip)
	return nil
}

func (s *GoBGP) Announced() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.Addr, 0, len(s.announced))
	for vip := range s.announced {
		out = append(out, vip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func (s *GoBGP) Peers() []PeerState {
	byAddr := map[netip.Addr]PeerState{}
	s.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: false}, func(p *api.Peer) {
		addr, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil {
			return
		}
		st := PeerState{Address: addr, ASN: p.GetConf().GetPeerAsn(), State: stateName(p.GetState().GetSessionState())}
		if st.Up() {
			if up := p.GetTimers().GetState().GetUptime(); up != nil {
				st.Since = up.AsTime()
			}
		}
		if p.GetBfd().GetEnabled() {
			st.BFD = bfdStateName(p.GetState().GetBfdState().GetSessionState())
		}
		msgs := p.GetState().GetMessages()
		st.UpdatesSent, st.UpdatesReceived = msgs.GetSent().GetUpdate(), msgs.GetReceived().GetUpdate()
		byAddr[addr] = st
	})
	s.mu.Lock()
	peers := slices.Clone(s.cfg.Peers)
	s.mu.Unlock()
	out := make([]PeerState, 0, len(peers))
	for _, p := range peers {
		st, ok := byAddr[p.Address]
		if !ok {
			st = PeerState{Address: p.Address, ASN: p.ASN, State: "idle"}
		}
		out = append(out, st)
	}
	return out
}

func stateName(st api.PeerState_SessionState) string {
	switch st {
	case api.PeerState_SESSION_STATE_IDLE:
		return "idle"
	case api.PeerState_SESSION_STATE_CONNECT:
		return "connect"
	case api.PeerState_SESSION_STATE_ACTIVE:
		return "active"
	case api.PeerState_SESSION_STATE_OPENSENT:
		return "opensent"
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return "established"
	}
	return "unknown"
}

func bfdStateName(st api.BfdSessionState) string {
	switch st {
	case api.BfdSessionState_BFD_SESSION_STATE_UP:
		return "up"
	case api.BfdSessionState_BFD_SESSION_STATE_INIT:
		return "init"
	case api.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
		return "admin-down"
	}
	return "down"
}

func fsmStateName(st bgp.FSMState) string {
	switch st {
	case bgp.BGP_FSM_IDLE:
		return "idle"
	case bgp.BGP_FSM_CONNECT:
		return "connect"
	case bgp.BGP_FSM_ACTIVE:
		return "active"
	case bgp.BGP_FSM_OPENSENT:
		return "opensent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "openconfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "established"
	}
	return "unknown(" + strconv.Itoa(int(st)) + ")"
}

// notEstablishedEvery is how often a peer that stays down is logged again: each retry
// would otherwise be a line every ConnectRetry.
const notEstablishedEvery = time.Minute

// peerLog is what onPeer remembers of a peer to log transitions, not every retry.
type peerLog struct {
	up     bool
	warned time.Time
}

// onPeer runs on GoBGP's watcher goroutine: it logs sessions going up and down.
func (s *GoBGP) onPeer(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := ev.Peer.State
	s.mu.Lock()
	defer s.mu.Unlock()
	pl := s.peerLogs[st.NeighborAddress]
	if pl == nil {
		pl = &peerLog{}
		s.peerLogs[st.NeighborAddress] = pl
	}
	switch st.SessionState {
	case bgp.BGP_FSM_ESTABLISHED:
		pl.up = true
		s.log.Info("BGP peer up", "peer", st.NeighborAddress, "peer_asn", st.PeerASN, "peer_router_id", st.RouterID)
	case bgp.BGP_FSM_IDLE, bgp.BGP_FSM_ACTIVE:
		switch {
		case pl.up:
			pl.up, pl.warned = false, time.Now()
			if p, ok := s.peerLocked(st.NeighborAddress); ok && p.BFD != nil && !s.closing.Load() {
				// owned by the speaker; ends after two calls to GoBGP, which the
				// watcher goroutine must not make itself
				go s.restartBFD(p)
			}
			s.log.Warn("BGP peer down", "peer", st.NeighborAddress, "state", fsmStateName(st.SessionState),
				"reason", disconnectReason(st.DisconnectReason, st.DisconnectMessage), "retry_every", ConnectRetry)
		case time.Since(pl.warned) >= notEstablishedEvery:
			pl.warned = time.Now()
			s.log.Warn("BGP peer not established, retrying", "peer", st.NeighborAddress, "state", fsmStateName(st.SessionState),
				"reason", "no session: the peer is unreachable, refuses the connection or rejects the OPEN",
				"retry_every", ConnectRetry, "logged_every", notEstablishedEvery)
		}
	}
}

func disconnectReason(r api.PeerState_DisconnectReason, msg string) string {
	if r == api.PeerState_DISCONNECT_REASON_UNSPECIFIED {
		return msg
	}
	name := api.PeerState_DisconnectReason_name[int32(r)]
	if msg != "" {
		return name + ": " + msg
	}
	return name
}

// Close withdraws every VIP and stops the server: the peers get a Cease
// notification and drop the routes at once.
func (s *GoBGP) Close() error {
	s.closing.Store(true)
	var errs []error
	for _, vip := range s.Announced() {
		errs = append(errs, s.Withdraw(vip))
	}
	s.closeOnce.Do(func() {
		errs = append(errs, s.srv.StopBgp(context.Background(), &api.StopBgpRequest{}))
		s.cancel()
		s.srv.Stop()
	})
	return errors.Join(errs...)
}
