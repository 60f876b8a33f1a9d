package wire

// The node's state as the API returns it. These are the wire types of GET
// /api/v1/status and /api/v1/services: the daemon fills them, ctl, metrics and the lab
// decode them; none of those imports the daemon.

// Status is the body of GET /api/v1/status.
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
	Config           ConfigInfo        `json:"config"`          // the config file the node runs
	Fleet            *FleetState       `json:"fleet,omitempty"` // absent without a fleet section
	// Kubernetes is absent without a kubernetes section
	Kubernetes *KubernetesState `json:"kubernetes,omitempty"`
}

// KubernetesState is a node's view of the cluster it takes its services from: what it
// serves, and what it left out and why (a Service of a family the node has no address
// of, one whose addresses or ports it cannot take), which is otherwise only in its log.
type KubernetesState struct {
	Synced    bool     `json:"synced"`    // the caches have been filled once
	Reachable bool     `json:"reachable"` // the API server answered the last probe
	Services  int      `json:"services"`  // manifold services taken from the cluster
	Skipped   []string `json:"skipped"`   // one line each: what is not served, and why
	// OutOfPool counts the addresses of Services' status the node refuses: in no
	// IPPool that selects the Service (each also in Skipped, and an Event on it).
	OutOfPool int    `json:"out_of_pool"`
	Submitted uint64 `json:"submitted"` // updates the node applied
	Refused   uint64 `json:"refused"`   // updates the node refused (logged; the next change tries again)
}

// FleetState is a node's view of the fleet store.
type FleetState struct {
	Prefix          string `json:"prefix"`
	AppliedRevision int64  `json:"applied_revision"` // the services this node serves
	StoreRevision   int64  `json:"store_revision"`   // the store's services, as last seen
	Reachable       bool   `json:"reachable"`
	// StaleSince is set while the store is unreachable (RFC 3339): the node serves its
	// last applied revision meanwhile.
	StaleSince     string `json:"stale_since,omitempty"`
	ApplyError     string `json:"apply_error,omitempty"`
	WriteConflicts uint64 `json:"write_conflicts"`
	// Refused is the services whose latest document the node did not take: each keeps
	// its last good state (or is absent), every other change applies.
	Refused []FleetRefusal `json:"refused,omitempty"`
	// DocumentsRefused counts the service documents refused since the node started.
	DocumentsRefused uint64 `json:"documents_refused"`
	// RecordBytes is the size of the node's last record as written to the store
	// (bounded by MaxRecordBytes); RecordsTruncated counts the records cut to fit it.
	RecordBytes      int    `json:"record_bytes"`
	RecordsTruncated uint64 `json:"records_truncated"`
}

// FleetRefusal is a service document of the fleet store that a node refused.
type FleetRefusal struct {
	Service  string `json:"service"`
	Revision int64  `json:"revision"` // the etcd revision of the refused document
	Error    string `json:"error"`
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
	// BFD is the state of the peer's BFD session: up, down, init, admin-down; absent
	// when the peer has no bfd.
	BFD string `json:"bfd,omitempty"`
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
	// NewFlows counts the flows whose backend this node chose from the ring, once per
	// flow, where its flow entry is opened: a TCP flow at its first packet without SYN
	// (SYNs do not count), a flow moved here by the router at its first packet here.
	NewFlows uint64 `json:"new_flows"`
	// PacketsPerSecond, BytesPerSecond and NewFlowsPerSecond are over the last second.
	PacketsPerSecond  float64         `json:"packets_per_second"`
	BytesPerSecond    float64         `json:"bytes_per_second"`
	NewFlowsPerSecond float64         `json:"new_flows_per_second"`
	Backends          []BackendStatus `json:"backends"`
	// Spec is the service's config, defaults filled in; PUT takes it back as is.
	Spec ServiceSpec `json:"spec"`
}

// BackendState is where a backend stands in its service's Maglev ring.
type BackendState string

const (
	BackendUp       BackendState = "up"       // in the ring: healthy, weight > 0
	BackendDraining BackendState = "draining" // keeps its flows, gets no new ones
	BackendDown     BackendState = "down"     // failed its health check: gets nothing
)

type BackendStatus struct {
	Address           string        `json:"address"`
	Weight            uint32        `json:"weight"`
	State             BackendState  `json:"state"`
	Health            BackendHealth `json:"health"`
	Packets           uint64        `json:"packets"`
	Bytes             uint64        `json:"bytes"`
	NewFlows          uint64        `json:"new_flows"`
	PacketsPerSecond  float64       `json:"packets_per_second"`
	BytesPerSecond    float64       `json:"bytes_per_second"`
	NewFlowsPerSecond float64       `json:"new_flows_per_second"`
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

// Service returns the service of that name, if st has one.
func (st *Status) Service(name string) (*ServiceStatus, bool) {
	for i := range st.Services {
		if st.Services[i].Name == name {
			return &st.Services[i], true
		}
	}
	return nil, false
}

// Backend returns the backend of that address, if s has one.
func (s *ServiceStatus) Backend(addr string) (*BackendStatus, bool) {
	for i := range s.Backends {
		if s.Backends[i].Address == addr {
			return &s.Backends[i], true
		}
	}
	return nil, false
}
