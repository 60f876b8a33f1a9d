package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/listen"
	"github.com/manifoldlb/manifold/internal/metrics"
	"github.com/manifoldlb/manifold/internal/sysctl"
)

// handshakePoll is how often the tunnels' handshakes are read for the status: they
// happen every two minutes, so a second loses none.
const handshakePoll = time.Second

// link is a running link. The run loop owns the router and writes inRoute; the API's
// goroutines read the status under mu.
type link struct {
	cfg     *config.Link
	pub     [32]byte
	tunnels []*tunnel
	prober  *prober
	log     *slog.Logger
	clock   clock.Clock // the probes', the handshake poll's and the connect timeout's

	mu      sync.Mutex
	router  router
	inRoute []bool
}

// Run is `manifold link --config FILE`: it brings the link up, keeps the route to the
// tunnels that answer until ctx ends, and then removes everything it made.
func Run(ctx context.Context, path string, log *slog.Logger) error {
	cfg, err := config.LoadLink(path)
	if err != nil {
		return err
	}
	priv, pub, err := readPrivateKey(path, cfg.PrivateKeyFile, log)
	if err != nil {
		return err
	}
	if err := checkHost(cfg); err != nil {
		return err
	}
	l := &link{cfg: cfg, pub: pub, log: log.With("link", cfg.Name), clock: clock.Real(), inRoute: make([]bool, cfg.Tunnels)}
	defer l.closeTunnels()
	changes := sysctl.New(l.log)
	defer changes.Restore()
	sources, err := l.sourcePorts(changes)
	if err != nil {
		return err
	}
	for i := range cfg.Tunnels {
		var from []uint16
		if sources != nil {
			from = sources[i]
		}
		t, err := openTunnel(cfg, i, priv, from, l.log)
		if err != nil {
			return err
		}
		l.tunnels = append(l.tunnels, t)
		if from := t.sourcePort(); from != t.port {
			l.log.Debug("tunnel sends from its own path's port", "tunnel", i, "port", t.port, "source_port", from)
		}
	}
	if l.prober, err = newProber(l.tunnels, l.clock, cfg.Health.Interval, cfg.Health.Rise, cfg.Health.Fall); err != nil {
		return err
	}
	defer l.prober.close()
	ln, err := net.Listen("tcp", cfg.API)
	if err != nil {
		return fmt.Errorf("link.api: %w", err)
	}
	srv := listen.ServeHTTP(ln, l.handler(), listen.HTTPOptions{Log: l.log})
	defer srv.Close()
	l.log.Info("tunnels started, waiting for the peer", "tunnels", cfg.Tunnels, "ports", fmt.Sprintf("%d-%d", cfg.Port, int(cfg.Port)+cfg.Tunnels-1),
		"peer", cfg.Remote.Address, "public_key", b64(pub), "api", ln.Addr().String())

	if err := l.waitFirst(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := l.hostSettings(changes); err != nil {
		return err
	}
	up := l.up()
	r, why, err := newRouter(cfg.Name, l.tunnels, up, cfg.Remote.Prefixes)
	if err != nil {
		return err
	}
	if why != nil {
		l.log.Warn("no resilient next-hop groups: a multipath route instead, a tunnel leaving moves some flows of the others", "why", why)
	}
	l.setRoute(r, up)
	defer l.removeRoute()
	l.log.Info("link up", "route", r.kind(), "prefixes", cfg.Remote.Prefixes, "tunnels_up", len(up))
	return l.loop(ctx)
}

// sourcePorts chooses the ports the tunnels send from (nil: their own), with
// link.source_ports: spread on a multipath route to the peer (paths.go).
// The host's multipath hash must read the ports first: it is set here, before the
// tunnels start, not with the other settings once the peer answers.
func (l *link) sourcePorts(changes *sysctl.Changes) ([][]uint16, error) {
	if l.cfg.SourcePorts != config.LinkSpread {
		return nil, nil
	}
	v := "ipv4"
	if l.cfg.Remote.Address.Is6() {
		v = "ipv6"
	}
	if err := changes.Set("net/"+v+"/fib_multipath_hash_policy", "1", "each tunnel's UDP flow takes the path its ports hash onto (link.source_ports: spread)"); err != nil {
		return nil, err
	}
	lo, hi := ephemeralPorts()
	sources, paths, err := sourcePorts(kernelPath, l.cfg.Remote.Address, l.cfg.Port, l.cfg.Tunnels, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("link.source_ports: spread: %w", err)
	}
	if sources == nil {
		l.log.Info("one path to the peer: the tunnels send from their own ports", "paths", paths)
		return nil, nil
	}
	l.log.Info("a multipath route to the peer: each tunnel sends from a port hashed onto a path of its own", "paths", paths, "tunnels", l.cfg.Tunnels)
	return sources, nil
}

// checkHost refuses what would go wrong once installed: a peer the host has no route
// to, and remote prefixes the host already routes (they would shadow or be shadowed).
func checkHost(cfg *config.Link) error {
	if _, err := netlink.RouteGet(cfg.Remote.Address.AsSlice()); err != nil {
		return fmt.Errorf("the peer %s is unreachable from this host (no route: %v); link.remote.address must be reachable without the link", cfg.Remote.Address, err)
	}
	for _, p := range cfg.Remote.Prefixes {
		fam := netlink.FAMILY_V4
		if p.Addr().Is6() {
			fam = netlink.FAMILY_V6
		}
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("read the routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst == nil {
				continue // the default route: the link's prefixes are more specific
			}
			ones, _ := r.Dst.Mask.Size()
			addr, _ := netip.AddrFromSlice(r.Dst.IP)
			have := netip.PrefixFrom(addr.Unmap(), ones)
			if have.Bits() > 0 && have.Overlaps(p) {
				return fmt.Errorf("link.remote.prefixes: %s overlaps the host's route to %s (%s); remove it or change the prefixes", p, have, routeDev(r))
			}
		}
	}
	return nil
}

func routeDev(r netlink.Route) string {
	if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
		return "dev " + l.Attrs().Name
	}
	return fmt.Sprintf("ifindex %d", r.LinkIndex)
}

// waitFirst waits for a first tunnel to come up, for link.connect_timeout.
func (l *link) waitFirst(ctx context.Context) error {
	deadline := l.clock.NewTimer(l.cfg.ConnectTimeout)
	defer deadline.Stop()
	for len(l.up()) == 0 {
		select {
		case <-ctx.Done():
			return nil
		case <-l.prober.kick:
		case <-deadline.C():
			return l.silentPeer()
		}
	}
	return nil
}

// silentPeer says why no tunnel answered: WireGuard answers nothing to a wrong key, so
// the error names both causes it can be and what each side must hold.
func (l *link) silentPeer() error {
	var handshakes uint64
	var lastErr string
	for _, t := range l.tunnels {
		t.pollHandshake()
		n, _, e := t.handshakeInfo()
		handshakes += n
		if e != "" {
			lastErr = e
		}
	}
	c := l.cfg
	if handshakes > 0 {
		return fmt.Errorf("WireGuard handshakes with %s completed but no probe was answered within %s: is the other side a manifold link with the same tunnels (%d) and inner_prefix (%s)? Nothing was installed",
			c.Remote.Address, c.ConnectTimeout, c.Tunnels, c.InnerPrefix)
	}
	msg := fmt.Sprintf("no WireGuard handshake with %s on UDP ports %d-%d within %s: the keys do not match (peer_public_key must be the other side's public key, and the other side's peer_public_key must be ours, %s) or the peer is not reachable on those ports. Nothing was installed",
		c.Remote.Address, c.Port, int(c.Port)+c.Tunnels-1, c.ConnectTimeout, b64(l.pub))
	if lastErr != "" {
		msg += "; WireGuard's last error: " + lastErr
	}
	return errors.New(msg)
}

// hostSettings: forwarding between the site and the tunnels, and the layer-4 hash, so
// that each flow sticks to one tunnel and the flows of two hosts spread.
func (l *link) hostSettings(changes *sysctl.Changes) error {
	fams := map[bool]bool{}
	for _, p := range slices.Concat(l.cfg.Remote.Prefixes, l.cfg.Local.Prefixes) {
		fams[p.Addr().Is4()] = true
	}
	for is4 := range fams {
		v := "ipv6"
		if is4 {
			v = "ipv4"
		}
		if err := changes.Set("net/"+v+"/fib_multipath_hash_policy", "1", "the link's flows spread over its tunnels by their 5-tuple"); err != nil {
			return err
		}
		if err := changes.Set("net/"+v+"/conf/all/forwarding", "1", "the link forwards between its site and the tunnels"); err != nil {
			return err
		}
	}
	return nil
}

// up returns the tunnels whose probes are answered, in index order.
func (l *link) up() []*tunnel {
	var up []*tunnel
	for i, s := range l.prober.states {
		if s.view().up {
			up = append(up, l.tunnels[i])
		}
	}
	return up
}

func (l *link) setRoute(r router, up []*tunnel) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.router = r
	for i := range l.inRoute {
		l.inRoute[i] = slices.Contains(up, l.tunnels[i])
	}
}

// loop follows the probes: the route holds the tunnels that are up. When none is, it
// keeps the last ones: the remote prefixes must never fall back to another route,
// where the sites' traffic would leave unencrypted.
func (l *link) loop(ctx context.Context) error {
	poll := l.clock.NewTicker(handshakePoll)
	defer poll.Stop()
	for _, t := range l.tunnels {
		t.pollHandshake()
	}
	for {
		select {
		case <-ctx.Done():
			l.log.Info("stopping: removing the route and the tunnels")
			return nil
		case <-poll.C():
			for _, t := range l.tunnels {
				t.pollHandshake()
			}
		case <-l.prober.kick:
			up := l.up()
			l.mu.Lock()
			r, was := l.router, l.routedLocked()
			l.mu.Unlock()
			if len(up) == 0 {
				l.log.Warn("every tunnel is down: the route keeps the last ones")
				continue
			}
			if slices.Equal(up, was) {
				continue
			}
			if err := r.route(up); err != nil {
				return fmt.Errorf("route over tunnels %v: %w", indexes(up), err)
			}
			l.setRoute(r, up)
			l.log.Info("route changed", "tunnels", indexes(up), "was", indexes(was))
		}
	}
}

func (l *link) routedLocked() []*tunnel {
	var out []*tunnel
	for i, in := range l.inRoute {
		if in {
			out = append(out, l.tunnels[i])
		}
	}
	return out
}

func indexes(ts []*tunnel) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = t.index
	}
	return out
}

func (l *link) removeRoute() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.router != nil {
		l.router.remove()
	}
}

func (l *link) closeTunnels() {
	for _, t := range l.tunnels {
		t.close()
	}
}

// status is the link as GET /api/v1/link returns it.
func (l *link) status() wire.LinkStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := wire.LinkStatus{Name: l.cfg.Name, Local: l.cfg.Local.Address.String(), Remote: l.cfg.Remote.Address.String(),
		PublicKey: b64(l.pub), Tunnels: []wire.LinkTunnel{}}
	for _, p := range l.cfg.Remote.Prefixes {
		s.Prefixes = append(s.Prefixes, p.String())
	}
	if l.router != nil {
		s.Route = l.router.kind()
	}
	for i, t := range l.tunnels {
		v := l.prober.states[i].view()
		n, last, _ := t.handshakeInfo()
		ts := wire.LinkTunnel{Index: t.index, Device: t.name, Port: t.port, SourcePort: t.sourcePort(), LocalInner: t.local.String(), RemoteInner: t.remote.String(),
			State: wire.LinkTunnelDown, InRoute: l.inRoute[i], Handshakes: n, ProbesSent: v.sent, ProbesLost: v.lost,
			LastProbeRTTMillis: float64(v.rtt.Microseconds()) / 1000, Transitions: v.trans}
		if v.up {
			ts.State = wire.LinkTunnelUp
		}
		if !last.IsZero() {
			ts.LastHandshake = last.UTC().Format(time.RFC3339)
		}
		if nl, err := netlink.LinkByIndex(t.ifindex); err == nil && nl.Attrs().Statistics != nil {
			st := nl.Attrs().Statistics
			ts.TxBytes, ts.RxBytes, ts.TxPackets, ts.RxPackets = st.TxBytes, st.RxBytes, st.TxPackets, st.RxPackets
		}
		s.Tunnels = append(s.Tunnels, ts)
	}
	return s
}

func (l *link) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.LinkPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(l.status())
	})
	mux.Handle("GET /metrics", metrics.LinkHandler(l.status))
	return mux
}
