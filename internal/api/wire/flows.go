package wire

// FlowsView is the body of GET /api/v1/flows: entries of the node's flow table, the
// backend each flow is pinned to (ipvsadm -Lnc's question).
type FlowsView struct {
	// Total is the number of entries that match, listed or not (at most limit are).
	Total int `json:"total"`
	// Size is the table's capacity in entries (node.flow_table_size).
	Size  uint32       `json:"size"`
	Flows []FlowStatus `json:"flows"`
}

// FlowStatus is one flow-table entry.
type FlowStatus struct {
	Protocol string `json:"protocol"` // tcp, udp
	Client   string `json:"client"`   // address:port
	VIP      string `json:"vip"`      // address:port, as the client addressed it
	Service  string `json:"service"`
	Backend  string `json:"backend"` // the backend's address
	// IdleSeconds is how long ago a packet of the flow last refreshed its entry (at
	// most once a second); absent when the node cannot read the kernel's clock.
	IdleSeconds *float64 `json:"idle_seconds,omitempty"`
}

// Limits of GET /api/v1/flows?limit=N.
const (
	DefaultFlowLimit = 100
	MaxFlowLimit     = 10000
)
