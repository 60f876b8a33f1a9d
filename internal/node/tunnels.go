package node

// The node as an edge of reverse tunnels: the tunnel edge takes connectors on
// tunnels.listen and accepts clients on each tunnel service's VIP:port. The controller
// puts the VIP on lo with the update that serves the service (the XDP program does not
// know it, so its packets pass to the stack, which then takes them as its own); here
// only the listeners start and stop. A routed service with origins reached by tunnel
// is served alike: its VIP is on lo too, and the XDP program passes to the stack the
// flows its ring gives the tunnelled origins' share (the local pseudo-backend), which
// the edge hands to those origins' connectors by their shares.
//
//	controller's View.Edge (tunnel and mixed services) ─► syncTunnels (run loop): listener, Edge.Serve
//	Edge state changes ─► watchTunnels ─► run loop: Controller.TunnelsConnected (announce)

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

// edge is the node's tunnel edge and the services it listens for.
type edge struct {
	*tunnel.Edge
	ctx       context.Context // the services' listeners live until it is done
	relay     *tunnel.Relay   // nil: the edge does not relay
	listeners map[string]*tunnelListener
	wg        sync.WaitGroup // the listeners' Serve goroutines
}

type tunnelListener struct {
	at     netip.AddrPort
	cancel context.CancelFunc
}

// startEdge listens for connectors (and, on a node of a fleet with a relay token,
// relays to the fleet's other edges); the returned func stops the edge, every
// listener and relay.
func (n *Node) startEdge(ctx context.Context) (func(), error) {
	t := n.cfg.Tunnels
	ec := tunnel.EdgeConfig{Listen: t.Listen, CertFile: t.CertFile, KeyFile: t.KeyFile, TokensFile: t.TokensFile,
		IdleTimeout: t.IdleTimeout, MaxConnsPerSource: t.MaxConnsPerSource, MaxPendingHellos: t.MaxPendingHellos, Log: n.log}
	var rc tunnel.RelayConfig
	if t.RelayTokenFile != "" && n.fleet == nil {
		n.log.Warn("tunnels.relay_token_file unused: edges relay to the edges of their fleet, and this node has no fleet section")
	}
	if t.RelayTokenFile != "" && n.fleet != nil {
		token, err := tunnel.LoadRelayToken(t.RelayTokenFile, n.log)
		if err != nil {
			return nil, fmt.Errorf("tunnels.relay_token_file: %w", err)
		}
		cas, err := tunnel.LoadCAs(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tunnels.ca_file: %w", err)
		}
		ec.RelayToken = token
		rc = tunnel.RelayConfig{Name: n.cfg.Node.Name, Token: token, CAs: cas, Log: n.log}
	}
	e, err := tunnel.NewEdge(ec)
	if err != nil {
		return nil, fmt.Errorf("tunnels: %w", err)
	}
	// not Run's context: the edge serves on while the node drains (withdrawn, routers
	// moving away), and stops with Run
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.edge = &edge{Edge: e, ctx: ctx, listeners: map[string]*tunnelListener{}}
	var wg sync.WaitGroup
	// owned by Run: stopped and waited for by the returned func
	wg.Go(func() {
		if err := e.Run(ctx); err != nil {
			n.log.Error("tunnel edge stopped", "err", err)
		}
	})
	wg.Go(func() { n.watchTunnels(ctx) })
	if ec.RelayToken != "" {
		n.edge.relay = tunnel.NewRelay(e, rc)
		wg.Go(func() { n.findRelayPeers(ctx) })
	}
	n.log.Info("tunnel edge listening", "address", e.Addr().String(), "relay", ec.RelayToken != "")
	return func() {
		cancel()
		n.edge.wg.Wait()
		if n.edge.relay != nil {
			n.edge.relay.Wait()
		}
		wg.Wait()
	}, nil
}

// relayPeersEvery is how often an edge reads the fleet's records for the other
// edges to relay to. A new edge is relayed to within it; a connector's arrival
// reaches every relayed-to edge at once, over the relay tunnels.
const relayPeersEvery = time.Second

// findRelayPeers keeps a relay tunnel to every other live edge of the fleet.
func (n *Node) findRelayPeers(ctx context.Context) {
	tick := time.NewTicker(relayPeersEvery)
	defer tick.Stop()
	for {
		if f, err := n.fleet.Fleet(ctx); err == nil {
			var peers []string
			for _, node := range f.Nodes {
				if node.Alive && node.Name != n.cfg.Node.Name && node.Tunnels != nil && node.Tunnels.Relay != "" {
					peers = append(peers, node.Tunnels.Relay)
				}
			}
			n.edge.relay.SetPeers(ctx, peers)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// tunnelRecord is the node's tunnel edge in its fleet record.
func (n *Node) tunnelRecord() *wire.TunnelEdgeRecord {
	if n.edge == nil {
		return nil
	}
	r := &wire.TunnelEdgeRecord{Services: []string{}}
	if n.edge.relay != nil {
		_, port, _ := net.SplitHostPort(n.edge.Addr().String())
		r.Relay = net.JoinHostPort(n.cfg.Node.Address.String(), port)
	}
	for _, t := range n.edge.Tunnels() {
		if t.Relay || t.Draining {
			continue
		}
		for _, s := range t.Services {
			if !slices.Contains(r.Services, s.Name) {
				r.Services = append(r.Services, s.Name)
			}
		}
	}
	slices.Sort(r.Services)
	return r
}

// tunnelCounters are the tunnel edge's counters that the rate meter makes steering's
// rates of: each tunnel service's client connections, and the streams opened to each
// of its origins, as new flows.
func (n *Node) tunnelCounters() map[rateKey]datapath.Counters {
	if n.edge == nil {
		return nil
	}
	out := map[rateKey]datapath.Counters{}
	for service, c := range n.edge.Clients() {
		out[rateKey{tunnel: service}] = datapath.Counters{NewFlows: c}
	}
	for _, o := range n.edge.Origins() {
		out[rateKey{tunnel: o.Service, origin: o.Origin}] = datapath.Counters{NewFlows: o.Streams}
	}
	return out
}

// tunnelOrigins is what the node's fleet record says of the origins of its tunnel
// services, by service, for steering: as of a routed service's backends, each
// origin's health (a connector attached), new streams/s and RTT on its tunnels.
func (n *Node) tunnelOrigins() map[string][]wire.OriginLoad {
	if n.edge == nil {
		return nil
	}
	out := map[string][]wire.OriginLoad{}
	for _, o := range n.edge.Origins() {
		out[o.Service] = append(out[o.Service], wire.OriginLoad{Name: o.Origin, Healthy: o.Connectors > 0,
			NewFlowsPerSecond: n.rates.get(rateKey{tunnel: o.Service, origin: o.Origin}).newFlows,
			RTTMilliseconds:   float64(o.RTT) / float64(time.Millisecond)})
	}
	return out
}

// watchTunnels tells the controller which tunnel services have a connector, at every
// change of the edge's state.
func (n *Node) watchTunnels(ctx context.Context) {
	var last map[string]bool
	for {
		changed := n.edge.Changed()
		now := n.edge.Connected()
		if last == nil || !maps.Equal(now, last) {
			select {
			case n.requests <- func() { n.ctrl.TunnelsConnected(now) }:
				last = now
			case <-n.stopping:
				return
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// syncTunnels listens on the VIP:port of every service served that the edge ends
// connections of (tunnel services, mixed services) and stops the listeners of those
// gone or moved. Called on the run loop after every change.
func (n *Node) syncTunnels() {
	services := n.ctrl.View().Edge
	if n.edge == nil {
		if len(services) > 0 {
			n.log.Warn("tunnel services are not served: the node has no tunnels section", "services", len(services))
		}
		return
	}
	e := n.edge
	want := map[string]netip.AddrPort{}
	origins := map[string][]string{} // a connector of these must name one of them
	shares := map[string]map[string]float64{}
	proxyProtocols := map[string]config.ProxyProtocol{}
	for _, s := range services {
		want[s.Name] = netip.AddrPortFrom(s.VIP, s.Port)
		at := edgeOrigins(&s)
		for _, o := range at {
			origins[s.Name] = append(origins[s.Name], o.Name)
		}
		if n.fleet != nil {
			if sh := n.fleet.SharesOf(s.Name, at); sh != nil {
				shares[s.Name] = sharesAmong(sh, at)
			}
		}
		if s.ProxyProtocol != "" {
			proxyProtocols[s.Name] = s.ProxyProtocol
		}
	}
	e.SetServiceOrigins(origins)
	e.SetOriginShares(shares)
	e.SetProxyProtocols(proxyProtocols)
	for name, l := range e.listeners {
		if at, ok := want[name]; !ok || at != l.at {
			l.cancel()
			delete(e.listeners, name)
			n.log.Info("tunnel service no longer served", "service", name, "at", l.at)
		}
	}
	for _, s := range services {
		if _, ok := e.listeners[s.Name]; ok {
			continue
		}
		if err := n.serveTunnel(&s); err != nil {
			n.log.Error("tunnel service not served", "service", s.Name, "err", err)
		}
	}
}

// edgeOrigins are the origins of a service that the tunnel edge reaches: all of a
// tunnel service's, the tunnelled ones of a routed service.
func edgeOrigins(s *config.Service) []config.Origin {
	if s.Forwarding == config.Tunnel {
		return s.Origins
	}
	return slices.DeleteFunc(slices.Clone(s.Origins), func(o config.Origin) bool { return !o.Tunnel })
}

// sharesAmong keeps of shares (the caller's own) those of origins: the edge round-robins
// over the origins it is given, and a routed origin's share is its backends', taken
// in XDP — given to the edge, it would send streams to an origin without connectors.
func sharesAmong(shares map[string]float64, origins []config.Origin) map[string]float64 {
	maps.DeleteFunc(shares, func(name string, _ float64) bool {
		return !slices.ContainsFunc(origins, func(o config.Origin) bool { return o.Name == name })
	})
	return shares
}

func (n *Node) serveTunnel(s *config.Service) error {
	e := n.edge
	at := netip.AddrPortFrom(s.VIP, s.Port)
	ln, err := net.Listen("tcp", at.String())
	if err != nil {
		return fmt.Errorf("listen on %s: %w", at, err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	e.listeners[s.Name] = &tunnelListener{at: at, cancel: cancel}
	name := s.Name
	// owned by the edge: ends with the listener's context, waited for by startEdge's stopper
	e.wg.Go(func() {
		if err := e.Serve(ctx, name, ln); err != nil {
			n.log.Error("tunnel service stopped", "service", name, "err", err)
		}
	})
	n.log.Info("tunnel service served", "service", s.Name, "at", at)
	return nil
}

// tunnelsStatus is GET /api/v1/tunnels.
func (n *Node) tunnelsStatus() wire.TunnelsStatus {
	view := n.ctrl.View()
	st := wire.TunnelsStatus{Listen: n.edge.Addr().String(), Services: []wire.TunnelService{}, Tunnels: tunnel.WireTunnels(n.edge.Tunnels()), Counters: tunnel.WireCounters(n.edge.Counters())}
	for _, s := range view.Edge {
		ann, _ := view.Announcement(s.Name)
		ts := wire.TunnelService{Name: s.Name, VIP: s.VIP.String(), Port: s.Port, Announced: ann.Announced}
		for _, t := range st.Tunnels {
			for _, share := range t.Services {
				if share.Name == s.Name && !t.Draining {
					ts.Connectors++
					ts.Capacity += share.Capacity
					ts.Open += share.Open
				}
			}
		}
		st.Services = append(st.Services, ts)
	}
	return st
}
