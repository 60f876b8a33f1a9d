package node

import (
	"sync"
	"sync/atomic"

	"github.com/manifoldlb/manifold/internal/datapath"
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
	Drops            map[string]uint64 `json:"drops"`
	Reloads          uint64            `json:"reloads"`
	ReloadFailures   uint64            `json:"reload_failures"`
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
	Announced bool            `json:"announced"`
	Reason    string          `json:"announce_reason,omitempty"`
	Packets   uint64          `json:"packets"`
	Bytes     uint64          `json:"bytes"`
	Backends  []BackendStatus `json:"backends"`
}

type BackendStatus struct {
	Address string `json:"address"`
	Weight  uint32 `json:"weight"`
	State   string `json:"state"` // up | draining | down
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// statusBoard is how the run loop shares its view with API handlers: the loop
// publishes an immutable snapshot; handlers add live counters read from the maps
// (which are safe to read concurrently).
type statusBoard struct {
	mu             sync.Mutex
	node           string
	interfaces     []InterfaceStatus
	services       []reconcile.ServiceStatus
	reloads        atomic.Uint64
	reloadFailures atomic.Uint64
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
}

// read builds a Status with live counters.
func (b *statusBoard) read(lb *datapath.LB) Status {
	b.mu.Lock()
	st := Status{Node: b.node, Interfaces: append([]InterfaceStatus(nil), b.interfaces...)}
	services := b.services
	b.mu.Unlock()
	st.Reloads, st.ReloadFailures = b.reloads.Load(), b.reloadFailures.Load()
	for _, s := range services {
		ss := ServiceStatus{
			Name: s.Config.Name, VIP: s.Config.VIP.String(), Port: s.Config.Port,
			Protocol: string(s.Config.Protocol), Forwarding: string(s.Config.Forwarding), Scheduler: string(s.Config.Scheduler),
		}
		if c, err := lb.ServiceCounters(s.ID); err == nil {
			ss.Packets, ss.Bytes = c.Packets, c.Bytes
		}
		for _, bk := range s.Backends {
			bs := BackendStatus{Address: bk.Address.String(), Weight: bk.Weight, State: bk.State.String()}
			if c, err := lb.BackendCounters(bk.ID); err == nil {
				bs.Packets, bs.Bytes = c.Packets, c.Bytes
			}
			ss.Backends = append(ss.Backends, bs)
		}
		st.Services = append(st.Services, ss)
	}
	st.FlowTableEntries, _ = lb.FlowCount()
	st.Drops, _ = lb.Drops()
	return st
}

// MetricsSnapshot is the node's metrics.Source.
func (n *Node) MetricsSnapshot() metrics.Snapshot {
	st := n.status.read(n.lb)
	out := metrics.Snapshot{Drops: st.Drops, FlowTableEntries: st.FlowTableEntries, Reloads: st.Reloads, ReloadFailures: st.ReloadFailures}
	for _, s := range st.Services {
		for _, b := range s.Backends {
			out.Backends = append(out.Backends, metrics.Backend{Service: s.Name, Address: b.Address,
				Up: b.State == datapath.BackendUp.String(), Packets: b.Packets, Bytes: b.Bytes})
		}
	}
	return out
}
