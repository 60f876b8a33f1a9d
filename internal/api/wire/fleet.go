package wire

// The fleet's wire types: what each node publishes about itself in the fleet store
// (under a lease, every second), and GET /api/v1/fleet.

// FleetStatus is the body of GET /api/v1/fleet.
type FleetStatus struct {
	// Prefix is the key prefix of the fleet in etcd; Endpoints the store's members.
	Prefix    string   `json:"prefix"`
	Endpoints []string `json:"endpoints"`
	// Revision is the store's revision of the services (of the last write to them);
	// 0 when the store cannot be read now.
	Revision int64 `json:"revision"`
	// Reachable is whether this node reaches the store now; StaleSince says since when
	// it does not (RFC 3339), and then it serves its last applied revision.
	Reachable  bool   `json:"reachable"`
	StaleSince string `json:"stale_since,omitempty"`
	// Nodes is every node that has published a record, alive or gone, by name.
	Nodes []FleetNode `json:"nodes"`
}

// FleetNode is one node as the fleet sees it.
type FleetNode struct {
	NodeRecord
	// Alive is whether the node's lease holds: it published in the last few seconds.
	Alive bool `json:"alive"`
	// Lag is how many revisions of the services the node is behind the store (0: it
	// applied the latest); Agrees says it runs the store's services now.
	Lag    int64 `json:"lag"`
	Agrees bool  `json:"agrees"`
}

// NodeRecord is what a node publishes about itself.
//
// V is the record's format (RecordVersion). Records are JSON and change by added
// fields, which a reader of an older release ignores: that keeps V at 1. A change that
// older readers would misread raises V, and a reader passes by the records of a V
// newer than it reads (NodeRecord.Readable).
type NodeRecord struct {
	V         int      `json:"v,omitempty"` // absent: 1, the format of the releases before the field
	Name      string   `json:"name"`
	Site      string   `json:"site"`
	Addresses []string `json:"addresses"`
	// AppliedRevision is the revision of the services the node serves; AppliedAt when it
	// applied it (RFC 3339). ApplyError says why the node could not apply a later
	// revision (it keeps the previous state): "" when it serves the latest it read.
	AppliedRevision int64  `json:"applied_revision"`
	AppliedAt       string `json:"applied_at"`
	ApplyError      string `json:"apply_error,omitempty"`
	// Refused is the services whose latest document the node refused (FleetState's).
	Refused []FleetRefusal `json:"refused,omitempty"`
	// StaleSince is set while the node cannot reach the store.
	StaleSince string `json:"stale_since,omitempty"`
	// UpdatedAt is when the node wrote this record (RFC 3339).
	UpdatedAt string        `json:"updated_at"`
	BGP       []FleetPeer   `json:"bgp,omitempty"`
	Services  []ServiceLoad `json:"services"`
	// Tunnels is the node's tunnel edge, nil on a node without one.
	Tunnels *TunnelEdgeRecord `json:"tunnels,omitempty"`
}

// TunnelEdgeRecord is a node's tunnel edge as its fleet sees it: where the other
// edges dial it to relay, and the services of the connectors attached to it.
type TunnelEdgeRecord struct {
	Relay    string   `json:"relay,omitempty"` // host:port; empty when the edge does not relay
	Services []string `json:"services"`
}

// FleetPeer is a BGP session of a node.
type FleetPeer struct {
	Address string `json:"address"`
	Up      bool   `json:"up"`
}

// ServiceLoad is a service as one node sees and carries it: whether it announces it,
// its backends' health and the traffic it sends them, per second. A tunnel service's
// new flows are its client connections, and its origins (those the node's tunnel edge
// reaches through connectors) are in Origins, as a routed service's are in Backends.
type ServiceLoad struct {
	Name              string        `json:"name"`
	Announced         bool          `json:"announced"`
	NewFlowsPerSecond float64       `json:"new_flows_per_second"`
	PacketsPerSecond  float64       `json:"packets_per_second"`
	BytesPerSecond    float64       `json:"bytes_per_second"`
	Backends          []BackendLoad `json:"backends"`
	Origins           []OriginLoad  `json:"origins,omitempty"`
}

// OriginLoad is one origin of a tunnel service as the node's tunnel edge sees it.
type OriginLoad struct {
	Name string `json:"name"`
	// Healthy: a connector of the origin is attached to the edge, answering its pings.
	Healthy bool `json:"healthy"`
	// NewFlowsPerSecond is the new streams per second the edge opened to the origin's
	// connectors.
	NewFlowsPerSecond float64 `json:"new_flows_per_second"`
	// RTTMilliseconds is the edge's smoothed round-trip time on the origin's tunnels
	// (QUIC's, the mean over its connectors). Absent without a connector.
	RTTMilliseconds float64 `json:"rtt_ms,omitempty"`
}

// BackendLoad is one backend of a ServiceLoad.
type BackendLoad struct {
	Address           string       `json:"address"`
	State             BackendState `json:"state"`
	Healthy           bool         `json:"healthy"`
	NewFlowsPerSecond float64      `json:"new_flows_per_second"`
	PacketsPerSecond  float64      `json:"packets_per_second"`
	BytesPerSecond    float64      `json:"bytes_per_second"`
	// RTTMilliseconds is the node's smoothed round-trip time to the backend: the
	// duration of its successful health checks (a TCP check's connect, an HTTP check's
	// request), averaged. Absent while none succeeded, and for a check of kind none.
	RTTMilliseconds float64 `json:"rtt_ms,omitempty"`
}

// RecordVersion is the format of the node records this release writes and reads.
const RecordVersion = 1

// Readable tells whether this release reads the record: one of its own format or an
// older one.
func (r *NodeRecord) Readable() bool { return r.V <= RecordVersion }
