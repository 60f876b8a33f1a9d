package node

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/health"
	"github.com/manifoldlb/manifold/internal/metrics"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/store"
)

// The node as the API sees it (api.Node): the controller's View with the data plane's
// live counters, the health checker's results and the rates. Safe from any goroutine:
// nothing here reads what the run loop writes but through the View.

// Status is the node's state with live counters.
func (n *Node) Status() wire.Status {
	view := n.ctrl.View()
	st := wire.Status{Node: n.cfg.Node.Name, Services: []wire.ServiceStatus{}, FlowTableSize: n.cfg.Node.FlowTableSize}
	for _, iface := range n.cfg.Node.Interfaces {
		st.Interfaces = append(st.Interfaces, wire.InterfaceStatus{Name: iface, XDPMode: n.modes[iface]})
	}
	st.BGP = n.bgpStatus()
	st.Reloads, st.ReloadFailures = n.file.Reloads()
	st.Config = api.Info(n.file.Store())
	st.Fleet = n.fleetState()
	st.Kubernetes = n.kubeState()
	counters, err := n.lb.ReadCounters()
	if err != nil {
		n.log.Warn("reading data-plane counters", "err", err)
	}
	st.Services = n.services(view, counters)
	st.FlowTableEntries, _ = n.lb.FlowCount()
	st.Drops, _ = n.lb.Drops()
	if st.Drops == nil {
		st.Drops = map[string]uint64{}
	}
	return st
}

// services is every service's status, sorted by name; without counters (nil), the
// data plane's totals are left out (the node's record, every second, reads the rates
// only).
func (n *Node) services(view reconcile.View, counters *datapath.CounterSnapshot) []wire.ServiceStatus {
	out := make([]wire.ServiceStatus, 0, len(view.Services)+len(view.Tunnels))
	checks := map[health.Target]health.Status{}
	for _, s := range n.checker.Status() {
		checks[s.Target] = s
	}
	checkOf := func(t health.Target) (health.Status, bool) { s, ok := checks[t]; return s, ok }
	for _, s := range view.Services {
		ann, _ := view.Announcement(s.Config.Name)
		var c counterSource
		if counters != nil { // not a nil *CounterSnapshot in an interface
			c = counters
		}
		out = append(out, n.serviceStatus(s, ann, checkOf, c))
	}
	var clients map[string]uint64
	if n.edge != nil && len(view.Tunnels) > 0 {
		clients = n.edge.Clients()
	}
	for i := range view.Tunnels {
		out = append(out, n.tunnelServiceStatus(view, &view.Tunnels[i], clients))
	}
	slices.SortFunc(out, func(a, b wire.ServiceStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// flows lists the flow table (GET /api/v1/flows): entries of the node's services as
// they are now, each decoded with its service's address family and named by service
// and backend. An entry whose service or backend is gone (ids are reused) is left out:
// the program re-chooses such a flow's backend at its next packet.
func (n *Node) flows(service string, limit int) (wire.FlowsView, error) {
	type svc struct {
		name, protocol string
		v6             bool
		backends       map[uint32]netip.Addr
	}
	byID := map[uint32]svc{}
	for _, s := range n.ctrl.View().Services {
		if service != "" && s.Config.Name != service {
			continue
		}
		v := svc{name: s.Config.Name, protocol: string(s.Config.Protocol), v6: s.Config.VIP.Is6(), backends: map[uint32]netip.Addr{}}
		for _, b := range s.Backends {
			v.backends[b.ID] = b.Address
		}
		if s.Local != nil { // a flow passed to the node's stack: named by the VIP
			v.backends[s.Local.ID] = s.Local.Address
		}
		byID[s.ID] = v
	}
	if service != "" && len(byID) == 0 {
		return wire.FlowsView{}, api.ErrNoSuchService
	}
	entries, total, err := n.lb.Flows(limit, func(serviceID, backendID uint32) (bool, bool) {
		s, ok := byID[serviceID]
		_, known := s.backends[backendID]
		return ok && known, s.v6
	})
	if err != nil {
		return wire.FlowsView{}, err
	}
	out := wire.FlowsView{Total: total, Size: n.cfg.Node.FlowTableSize, Flows: []wire.FlowStatus{}}
	for _, e := range entries {
		s := byID[e.ServiceID]
		f := wire.FlowStatus{Protocol: s.protocol, // a flow is of its service's protocol
			Client: netip.AddrPortFrom(e.Src, e.SPort).String(), VIP: netip.AddrPortFrom(e.Dst, e.DPort).String(),
			Service: s.name, Backend: s.backends[e.BackendID].String()}
		if e.Idle >= 0 {
			idle := e.Idle.Seconds()
			f.IdleSeconds = &idle
		}
		out.Flows = append(out.Flows, f)
	}
	return out, nil
}

// tunnelServiceStatus is a tunnel service's status. It has no backends nor data-plane
// counters: its traffic is the tunnel edge's (GET /api/v1/tunnels), and its new flows
// the edge's client connections (clients, by service).
func (n *Node) tunnelServiceStatus(view reconcile.View, s *config.Service, clients map[string]uint64) wire.ServiceStatus {
	ann, _ := view.Announcement(s.Name)
	return wire.ServiceStatus{Name: s.Name, VIP: s.VIP.String(), Port: s.Port,
		Protocol: string(s.Protocol), Forwarding: string(s.Forwarding), Scheduler: string(s.Scheduler),
		Announced: ann.Announced, Reason: ann.Reason, Backends: []wire.BackendStatus{}, Spec: api.SpecOf(s),
		NewFlows: clients[s.Name], NewFlowsPerSecond: n.rates.get(rateKey{tunnel: s.Name}).newFlows}
}

// counterSource gives the counters of a service and of its backends: a snapshot of all
// (datapath.CounterSnapshot), or lookups of one service's (lookupCounters).
type counterSource interface {
	Service(id uint32) datapath.Counters
	Backend(id uint32) datapath.Counters
}

// lookupCounters reads one service's counters, a lookup per backend: for the status
// of one service, which a snapshot of every service's would make O(all services).
type lookupCounters struct{ lb *datapath.LB }

func (l lookupCounters) Service(id uint32) datapath.Counters {
	c, _ := l.lb.ServiceCounters(id)
	return c
}

func (l lookupCounters) Backend(id uint32) datapath.Counters {
	c, _ := l.lb.BackendCounters(id)
	return c
}

// serviceStatus is a service's status, with its rates, its counters (unless counters
// is nil) and its backends' health (checkOf, the checker's results).
func (n *Node) serviceStatus(s *reconcile.ServiceStatus, ann reconcile.Announcement, checkOf func(health.Target) (health.Status, bool), counters counterSource) wire.ServiceStatus {
	ss := wire.ServiceStatus{
		Name: s.Config.Name, VIP: s.Config.VIP.String(), Port: s.Config.Port,
		Protocol: string(s.Config.Protocol), Forwarding: string(s.Config.Forwarding), Scheduler: string(s.Config.Scheduler),
		Announced: ann.Announced, Reason: ann.Reason,
		Backends: []wire.BackendStatus{}, Spec: api.SpecOf(&s.Config),
	}
	if counters != nil {
		c := counters.Service(s.ID)
		ss.Packets, ss.Bytes, ss.NewFlows = c.Packets, c.Bytes, c.NewFlows
	}
	r := n.rates.get(rateKey{id: s.ID})
	ss.PacketsPerSecond, ss.BytesPerSecond, ss.NewFlowsPerSecond = r.packets, r.bytes, r.newFlows
	for _, bk := range s.Backends {
		bs := wire.BackendStatus{Address: bk.Address.String(), Weight: bk.Weight, State: backendState(bk.State),
			Health: healthOf(&s.Config, bk.Address, checkOf)}
		if counters != nil {
			c := counters.Backend(bk.ID)
			bs.Packets, bs.Bytes, bs.NewFlows = c.Packets, c.Bytes, c.NewFlows
		}
		r := n.rates.get(rateKey{backend: true, id: bk.ID})
		bs.PacketsPerSecond, bs.BytesPerSecond, bs.NewFlowsPerSecond = r.packets, r.bytes, r.newFlows
		ss.Backends = append(ss.Backends, bs)
	}
	return ss
}

// backendState is the API's name of a backend's state in the data plane.
func backendState(s datapath.BackendState) wire.BackendState {
	switch s {
	case datapath.BackendUp:
		return wire.BackendUp
	case datapath.BackendDraining:
		return wire.BackendDraining
	}
	return wire.BackendDown
}

// Services is every service, by name.
func (n *Node) Services() []wire.ServiceStatus { return n.Status().Services }

// Service is one service, if there is one of that name: the status of that service
// alone (GET /api/v1/services/NAME, and an API write's answer), whatever the number
// of others.
func (n *Node) Service(name string) (wire.ServiceStatus, bool) {
	view := n.ctrl.View()
	if s, ok := view.Service(name); ok {
		ann, _ := view.Announcement(name)
		return n.serviceStatus(s, ann, n.checker.StatusOf, lookupCounters{n.lb}), true
	}
	i, ok := slices.BinarySearchFunc(view.Tunnels, name, func(s config.Service, name string) int { return strings.Compare(s.Name, name) })
	if !ok {
		return wire.ServiceStatus{}, false
	}
	var clients map[string]uint64
	if n.edge != nil {
		clients = n.edge.Clients()
	}
	return n.tunnelServiceStatus(view, &view.Tunnels[i], clients), true
}

// ChangeOwn makes an API write of the node's own file (its bgp section).
func (n *Node) ChangeOwn(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error {
	return n.file.Change(ctx, edit)
}

// Change makes an API write through the source of the services: the fleet store on a
// node of a fleet, else the config file.
func (n *Node) Change(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error {
	if n.fleet != nil {
		return n.fleet.Change(ctx, edit)
	}
	return n.file.Change(ctx, edit)
}

// bgpStatus is the speaker's part of the status (nil without bgp). The speaker, the
// node's AS and its router id are fixed for the node's life.
func (n *Node) bgpStatus() *wire.BGPStatus {
	if n.speaker == nil {
		return nil
	}
	st := &wire.BGPStatus{ASN: n.cfg.BGP.ASN, RouterID: n.cfg.BGP.RouterID.String(), Peers: []wire.PeerStatus{}}
	for _, p := range n.speaker.Peers() {
		ps := wire.PeerStatus{Address: p.Address.String(), ASN: p.ASN, State: p.State, Up: p.Up(),
			UpdatesSent: p.UpdatesSent, UpdatesReceived: p.UpdatesReceived, BFD: p.BFD}
		if !p.Since.IsZero() {
			ps.UpSince = p.Since.UTC().Format(time.RFC3339)
		}
		st.Peers = append(st.Peers, ps)
	}
	return st
}

// healthUp is healthOf(...).Up without the rest: whether a backend of s passes its
// check (true without one).
func (n *Node) healthUp(s *config.Service, addr netip.Addr) bool {
	if s.Health.Kind == config.HealthNone || s.Health.Kind == "" {
		return true
	}
	st, ok := n.checker.StatusOf(health.Target{Addr: addr, Check: s.Health})
	return ok && st.Up
}

// healthOf is the health of a backend of a service, as the status shows it.
func healthOf(s *config.Service, addr netip.Addr, checkOf func(health.Target) (health.Status, bool)) wire.BackendHealth {
	if s.Health.Kind == config.HealthNone || s.Health.Kind == "" {
		return wire.BackendHealth{Check: "none", Up: true}
	}
	t := health.Target{Addr: addr, Check: s.Health}
	h := wire.BackendHealth{Check: t.String()}
	st, ok := checkOf(t)
	if !ok {
		return h
	}
	h.Up, h.LastError, h.Checks, h.Failures = st.Up, st.LastError, st.Checks, st.Failures
	h.LatencySeconds = st.LastLatency.Seconds()
	if !st.LastCheck.IsZero() {
		h.LastCheck = st.LastCheck.UTC().Format(time.RFC3339Nano)
	}
	return h
}

// MetricsSnapshot is the node's metrics.Source.
func (n *Node) MetricsSnapshot() metrics.Snapshot {
	events, err := n.lb.Events()
	if err != nil {
		n.log.Warn("reading data-plane events", "err", err)
	}
	out := metrics.Snapshot{Status: n.Status(), Events: events, APIRequests: map[metrics.APIRequest]uint64{}}
	for _, h := range n.checker.Status() {
		out.HealthChecks = append(out.HealthChecks, metrics.HealthCheck{Backend: h.Target.Addr.String(), Check: h.Target.String(),
			Up: h.Up, Checks: h.Checks, Failures: h.Failures, LastLatency: h.LastLatency.Seconds()})
	}
	for k, v := range n.api.Requests() {
		out.APIRequests[metrics.APIRequest{Method: k.Method, Code: k.Code}] = v
	}
	if n.api.Steering != nil {
		st := n.api.Steering()
		out.Steering = &st
	}
	if n.api.Tunnels != nil {
		t := n.api.Tunnels()
		out.Tunnels = &t
	}
	return out
}

// Fleet is every node of the fleet (api.ErrNoFleet on a node of a config file).
func (n *Node) Fleet(ctx context.Context) (wire.FleetStatus, error) {
	if n.fleet == nil {
		return wire.FleetStatus{}, api.ErrNoFleet
	}
	return n.fleet.Fleet(ctx)
}

// kubeState is the kubernetes part of the status (nil without a kubernetes section).
func (n *Node) kubeState() *wire.KubernetesState {
	if n.kube == nil {
		return nil
	}
	s, _ := n.kube.State()
	return &wire.KubernetesState{Synced: s.Synced, Reachable: s.Reachable, Services: len(s.Services),
		Skipped: append([]string{}, s.Skipped...), OutOfPool: s.OutOfPool, Submitted: s.Submitted, Refused: s.Refused}
}
