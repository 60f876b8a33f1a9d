package api

import "github.com/manifoldlb/manifold/internal/tunnel"

// TunnelsStatus is the body of GET /api/v1/tunnels: the node's tunnel edge.
type TunnelsStatus struct {
	Listen string `json:"listen"` // where connectors dial in (UDP, QUIC)
	// Services are the tunnel services the node serves.
	Services []TunnelService `json:"services"`
	// Tunnels are the connectors' tunnels attached to this edge, by connector name.
	Tunnels  []tunnel.TunnelStatus `json:"tunnels"`
	Counters tunnel.EdgeCounters   `json:"counters"`
}

// TunnelService is a tunnel service as this edge serves it.
type TunnelService struct {
	Name string `json:"name"`
	VIP  string `json:"vip"`
	Port uint16 `json:"port"`
	// Connectors is the number of attached tunnels that serve it and are not
	// draining; Capacity and Open add up their capacities and open streams.
	Connectors int  `json:"connectors"`
	Capacity   int  `json:"capacity"`
	Open       int  `json:"open"`
	Announced  bool `json:"announced"`
}
