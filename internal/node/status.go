package node

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/health"
	"github.com/manifoldlb/manifold/internal/metrics"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// Status is the node's state as the API returns it (GET /api/v1/status).
type Status struct {
	Node             string            `json:"node"`
	Interfaces       []InterfaceStatus `json:"interfaces"`
	BGP              *BGPStatus        `json:"bgp,omitempty"` // absent without a bgp section
	Services         []ServiceStatus   `json:"services"`
	FlowTableEntries int               `json:"flow_table_entries"`
	FlowTableSize    uint32            `json:"flow_table_size"` // capacity
	Drops            map[string]uint64 `json:"drops"`
	Reloads          uint64            `json:"reloads"`
	ReloadFailures   uint64            `json:"reload_failures"`
	Config           api.ConfigInfo    `json:"config"` // the config file the node runs
}

// BGPStatus is the speaker's state: its peers, as GoBGP reports them.
type BGPStatus struct {
	ASN      uint32       `json:"asn"`
	RouterID string       `json:"router_id"`
	Peers    []PeerStatus `json:"peers"`
}

type PeerStatus struct {
	Address string `json:"address"`
	ASN     uint32 `json:"asn"`
	// State is the BGP FSM state: idle, connect, active, opensent, openconfirm,
	// established.
	State string `json:"state"`
	Up    bool   `json:"up"` // established
	// UpSince is when the session was last established (RFC 3339), "" when down.
	UpSince         string `json:"up_since,omitempty"`
	UpdatesSent     uint64 `json:"updates_sent"`
	UpdatesReceived uint64 `json:"updates_received"`
}

type InterfaceStatus struct {
	Name    string `json:"name"`
	XDPMode string `json:"xdp_mode"`
}

type ServiceStatus struct {
	Name       string `json:"name"`
	VIP        string `json:"vip"`
	Port       uint16 `json:"port"`
	Protocol   string `json:"protocol"`
	Forwarding string `json:"forwarding"`
	Scheduler  string `json:"scheduler"`
	// Announced says whether this node announces the VIP over BGP now; Reason says
	// why (or why not), e.g. "no healthy backend".
	Announced bool   `json:"announced"`
	Reason    string `json:"announce_reason,omitempty"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
	// PacketsPerSecond and BytesPerSecond are over the last rateInterval.
	PacketsPerSecond float64         `json:"packets_per_second"`
	BytesPerSecond   float64         `json:"bytes_per_second"`
	Backends         []BackendStatus `json:"backends"`
	// Spec is the service's config, defaults filled in; PUT takes it back as is.
	Spec api.ServiceSpec `json:"spec"`
}

type BackendStatus struct {
	Address          string        `json:"address"`
	Weight           uint32        `json:"weight"`
	State            string        `json:"state"` // up | draining | down
	Health           BackendHealth `json:"health"`
	Packets          uint64        `json:"packets"`
	Bytes            uint64        `json:"bytes"`
	PacketsPerSecond float64       `json:"packets_per_second"`
	BytesPerSecond   float64       `json:"bytes_per_second"`
}

// BackendHealth is the health check of a backend and its last result.
type BackendHealth struct {
	Check          string  `json:"check"` // tcp://10.0.1.1:80, http://…, or none
	Up             bool    `json:"up"`
	LastCheck      string  `json:"last_check,omitempty"` // RFC 3339; absent before the first check
	LastError      string  `json:"last_error,omitempty"`
	LatencySeconds float64 `json:"latency_seconds"` // of the last check
	Checks         uint64  `json:"checks"`
	Failures       uint64  `json:"failures"`
}

// statusBoard is how the run loop shares its view with API handlers: the loop
// publishes an immutable snapshot; handlers add live counters read from the maps
// (which are safe to read concurrently).
type statusBoard struct {
	mu             sync.Mutex
	node           string
	interfaces     []InterfaceStatus
	services       []reconcile.ServiceStatus
	announce       map[string]announceState // by service name
	bgp            func() *BGPStatus        // live BGP state; nil without bgp
	reloads        atomic.Uint64
	reloadFailures atomic.Uint64
	// set once before the API serves (serveAPI)
	flowTableSize uint32
	checker       *health.Checker
	rates         *rateMeter
	api           *api.Server
}

func newStatusBoard() *statusBoard { return &statusBoard{} }

// publish is called by the run loop after every change.
func (n *Node) publish() {
	b := n.status
	b.mu.Lock()
	defer b.mu.Unlock()
	b.node = n.cfg.Node.Name
	b.interfaces = b.interfaces[:0]
	for _, iface := range n.cfg.Node.Interfaces {
		b.interfaces = append(b.interfaces, InterfaceStatus{Name: iface, XDPMode: n.modes[iface]})
	}
	b.services = n.rec.Snapshot()
	b.announce = maps.Clone(n.announce)
	if n.speaker != nil {
		b.bgp = n.bgpStatus
	}
}

// read builds a Status with live counters.
func (b *statusBoard) read(lb *datapath.LB) Status {
	b.mu.Lock()
	st := Status{Node: b.node, Interfaces: append([]InterfaceStatus(nil), b.interfaces...), Services: []ServiceStatus{}}
	services, announce, bgpStatus := b.services, b.announce, b.bgp
	b.mu.Unlock()
	if bgpStatus != nil {
		st.BGP = bgpStatus()
	}
	st.Reloads, st.ReloadFailures = b.reloads.Load(), b.reloadFailures.Load()
	st.FlowTableSize = b.flowTableSize
	checks := b.healthChecks()
	for _, s := range services {
		ss := ServiceStatus{
			Name: s.Config.Name, VIP: s.Config.VIP.String(), Port: s.Config.Port,
			Protocol: string(s.Config.Protocol), Forwarding: string(s.Config.Forwarding), Scheduler: string(s.Config.Scheduler),
			Announced: announce[s.Config.Name].Announced, Reason: announce[s.Config.Name].Reason,
			Backends: []BackendStatus{},
		}
		if c, err := lb.ServiceCounters(s.ID); err == nil {
			ss.Packets, ss.Bytes = c.Packets, c.Bytes
		}
		ss.Spec = api.SpecOf(&s.Config)
		ss.PacketsPerSecond, ss.BytesPerSecond = b.rates.get(rateKey{id: s.ID})
		for _, bk := range s.Backends {
			bs := BackendStatus{Address: bk.Address.String(), Weight: bk.Weight, State: bk.State.String(),
				Health: healthOf(&s.Config, bk.Address, checks)}
			if c, err := lb.BackendCounters(bk.ID); err == nil {
				bs.Packets, bs.Bytes = c.Packets, c.Bytes
			}
			bs.PacketsPerSecond, bs.BytesPerSecond = b.rates.get(rateKey{backend: true, id: bk.ID})
			ss.Backends = append(ss.Backends, bs)
		}
		st.Services = append(st.Services, ss)
	}
	st.FlowTableEntries, _ = lb.FlowCount()
	st.Drops, _ = lb.Drops()
	if st.Drops == nil {
		st.Drops = map[string]uint64{}
	}
	return st
}

// MetricsSnapshot is the node's metrics.Source.
func (n *Node) MetricsSnapshot() metrics.Snapshot {
	st := n.status.read(n.lb)
	events, err := n.lb.Events()
	if err != nil {
		n.log.Warn("reading data-plane events", "err", err)
	}
	out := metrics.Snapshot{Drops: st.Drops, Events: events, FlowTableEntries: st.FlowTableEntries, FlowTableSize: st.FlowTableSize,
		Reloads: st.Reloads, ReloadFailures: st.ReloadFailures, APIRequests: map[metrics.APIRequest]uint64{}}
	for _, i := range st.Interfaces {
		out.Interfaces = append(out.Interfaces, metrics.Interface{Name: i.Name, XDPMode: i.XDPMode})
	}
	for _, s := range st.Services {
		out.Services = append(out.Services, metrics.Service{Name: s.Name, Announced: s.Announced})
		for _, b := range s.Backends {
			out.Backends = append(out.Backends, metrics.Backend{Service: s.Name, Address: b.Address,
				Up: b.State == datapath.BackendUp.String(), Weight: b.Weight, Packets: b.Packets, Bytes: b.Bytes})
		}
	}
	for _, h := range n.checker.Status() {
		out.HealthChecks = append(out.HealthChecks, metrics.HealthCheck{Backend: h.Target.Addr.String(), Check: h.Target.String(),
			Up: h.Up, Checks: h.Checks, Failures: h.Failures, LastLatency: h.LastLatency.Seconds()})
	}
	if st.BGP != nil {
		for _, p := range st.BGP.Peers {
			out.Peers = append(out.Peers, metrics.Peer{Address: p.Address, Up: p.Up, UpdatesSent: p.UpdatesSent, UpdatesReceived: p.UpdatesReceived})
		}
	}
	if n.status.api != nil {
		for k, v := range n.status.api.Requests() {
			out.APIRequests[metrics.APIRequest{Method: k.Method, Code: k.Code}] = v
		}
	}
	return out
}
