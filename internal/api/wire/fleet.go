package wire

// The fleet's wire types: what each node publishes about itself in the fleet store
// (its alive key under a lease kept every second, its record when it changes), and
// GET /api/v1/fleet.

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
// newer than it reads (NodeRecord.Readable). Totals, Truncated and a Services list of
// the services of note only came that way: the previous release's steering controller
// finds every steered service's load where it was; its `manifold ctl fleet` counts the
// announced services over the listed ones only.
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
	// UpdatedAt is when the record last changed (RFC 3339): a node writes its record
	// when it changes (at most every second) and the same bytes again every minute;
	// whether the node is alive is its alive key's (FleetNode.Alive).
	UpdatedAt string      `json:"updated_at"`
	BGP       []FleetPeer `json:"bgp,omitempty"`
	// Totals counts every service and backend the node carries. Services lists only
	// those the fleet needs one by one (fleet.RecordServices): every service with
	// origins (the steering controller's input), then every service not as desired (a
	// backend down or failing its check, or not announced by a node that speaks BGP).
	// A record without Totals (of a release before them) lists every service.
	Totals   *RecordTotals `json:"totals,omitempty"`
	Services []ServiceLoad `json:"services"`
	// Tunnels is the node's tunnel edge, nil on a node without one.
	Tunnels *TunnelEdgeRecord `json:"tunnels,omitempty"`
	// Truncated is set when the record would have been larger than MaxRecordBytes: the
	// node cut its lists to fit, and says how much each lost.
	Truncated *RecordTruncation `json:"truncated,omitempty"`
}

// MaxRecordBytes bounds a node record as written to etcd: a third of etcd's default
// request limit (--max-request-bytes, 1.5 MiB), so that a record is always written
// (with its lease's keep-alive in the same transaction). A record that would be larger
// is cut to fit (NodeRecord.Truncated), never left unwritten.
const MaxRecordBytes = 512 << 10

// RecordTotals counts what a node carries, whatever its record lists.
type RecordTotals struct {
	Services  int `json:"services"`
	Announced int `json:"announced"` // services whose VIP the node announces now
	Backends  int `json:"backends"`
	// BackendsUp is the backends in their service's ring and passing their check;
	// BackendsDown those failing it (the rest are drained by their operator).
	BackendsUp   int `json:"backends_up"`
	BackendsDown int `json:"backends_down"`
}

// RecordTruncation says what a record cut to MaxRecordBytes left out. Each list keeps
// its head: each takes up to a third of the room first, so that some of each shows;
// what is left goes in this order: the connectors' services of Tunnels (the other
// edges relay by them), Services (the steered ones first), Refused.
type RecordTruncation struct {
	Services       int `json:"services"`                  // left out of Services
	Refused        int `json:"refused"`                   // left out of Refused
	TunnelServices int `json:"tunnel_services,omitempty"` // left out of Tunnels.Services
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
// its backends' health and the traffic it sends them, per second. A service with
// origins (steered) lists one entry per origin in Origins and no Backends: the node's
// backends of each origin folded into one entry (fleet.RecordServices), with what its
// tunnel edge sees of a tunnelled origin; a record of the release before listed every
// backend, and a controller reads both alike (fleet.Observe; a controller of that
// release read Origins already, by name). A tunnel service's new flows are its client
// connections. Zero rates are left out of the JSON (a reader of any release reads them
// as 0): an idle service costs the record its name and entries only.
type ServiceLoad struct {
	Name              string        `json:"name"`
	Announced         bool          `json:"announced"`
	NewFlowsPerSecond float64       `json:"new_flows_per_second,omitempty"`
	PacketsPerSecond  float64       `json:"packets_per_second,omitempty"`
	BytesPerSecond    float64       `json:"bytes_per_second,omitempty"`
	Backends          []BackendLoad `json:"backends,omitempty"`
	Origins           []OriginLoad  `json:"origins,omitempty"`
}

// OriginLoad is one origin of a steered service as the node sees it, through its
// backends of the origin and, for an origin reached by tunnel, its tunnel edge.
type OriginLoad struct {
	Name string `json:"name"`
	// Healthy: a backend of the origin passes its check, or a connector of the origin
	// is attached to the edge, answering its pings.
	Healthy bool `json:"healthy"`
	// NewFlowsPerSecond is the new flows per second the node sent the origin's backends,
	// and the new streams the edge opened to its connectors.
	NewFlowsPerSecond float64 `json:"new_flows_per_second,omitempty"`
	// RTTMilliseconds is the mean of the node's smoothed round-trip times to the
	// origin's healthy backends (as BackendLoad's) and on its tunnels (QUIC's or TCP's,
	// the mean over its connectors). Absent while none is measured.
	RTTMilliseconds float64 `json:"rtt_ms,omitempty"`
}

// BackendLoad is one backend of a ServiceLoad.
type BackendLoad struct {
	Address           string       `json:"address"`
	State             BackendState `json:"state"`
	Healthy           bool         `json:"healthy"`
	NewFlowsPerSecond float64      `json:"new_flows_per_second,omitempty"`
	PacketsPerSecond  float64      `json:"packets_per_second,omitempty"`
	BytesPerSecond    float64      `json:"bytes_per_second,omitempty"`
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
