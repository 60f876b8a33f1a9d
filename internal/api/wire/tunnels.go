package wire

import "time"

// TunnelsStatus is the body of GET /api/v1/tunnels: the node's tunnel edge.
type TunnelsStatus struct {
	Listen string `json:"listen"` // where connectors dial in (UDP, QUIC)
	// Services are the tunnel services the node serves.
	Services []TunnelService `json:"services"`
	// Tunnels are the connectors' tunnels attached to this edge, by connector name.
	Tunnels  []Tunnel       `json:"tunnels"`
	Counters TunnelCounters `json:"counters"`
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

// The edge's own types (tunnel.TunnelStatus, tunnel.EdgeCounters) convert to these in
// internal/tunnel/wire.go; a field added there is carried here by hand (its test
// fails until it is), and into openapi.json (the wire test fails until it is).

// Tunnel is a connector's tunnel attached to the edge.
type Tunnel struct {
	ID        uint64 `json:"id"`
	Connector string `json:"connector"` // the name the connector gave
	Remote    string `json:"remote"`    // where the tunnel comes from (the origin's NAT)
	Token     string `json:"token"`     // the token's fingerprint
	// Version is the tunnel protocol's version the connector and the edge speak on it
	// (1: services without origins only).
	Version int `json:"version"`
	// Transport is what the tunnel runs over: quic, or tcp (TLS over TCP).
	Transport string `json:"transport"`
	// Relay says the tunnel is another edge's, offering its connectors' services;
	// Connector is then that edge's name.
	Relay    bool          `json:"relay"`
	Services []TunnelShare `json:"services"`
	// StreamsOpen is the streams open now; StreamLimit, the most the edge opens over
	// one tunnel.
	StreamsOpen int    `json:"streams_open"`
	StreamLimit int    `json:"stream_limit"`
	Streams     uint64 `json:"streams"` // streams since the tunnel attached
	// BytesToOrigin and BytesFromOrigin count the client connections' bytes carried
	// each way since the tunnel attached.
	BytesToOrigin   int64         `json:"bytes_to_origin"`
	BytesFromOrigin int64         `json:"bytes_from_origin"`
	RTT             time.Duration `json:"rtt_ns"` // QUIC's smoothed RTT
	Draining        bool          `json:"draining"`
	Since           time.Time     `json:"since"`
}

// TunnelShare is a tunnel's share of one service: Open of Capacity in use, for
// Origin (the origin the connector named; "" for none).
type TunnelShare struct {
	Name     string `json:"name"`
	Origin   string `json:"origin,omitempty"`
	Capacity int    `json:"capacity"`
	Open     int    `json:"open"`
}

// TunnelCounters are an edge's counters since it started.
type TunnelCounters struct {
	Attached uint64 `json:"attached"` // tunnels accepted
	// Refused counts refused peers by reason, every reason present.
	Refused map[string]uint64 `json:"refused"`
	Gone    uint64            `json:"gone"`    // tunnels dropped for want of pings
	Streams uint64            `json:"streams"` // client connections joined to a stream
	// StreamRetries counts streams that failed before carrying a byte (connector gone,
	// origin unreachable) and were retried on another connector.
	StreamRetries uint64 `json:"stream_retries"`
	// ClientsRefused counts client connections closed because no connector of their
	// service had free capacity in time.
	ClientsRefused uint64 `json:"clients_refused"`
	// ClientsRefusedPerSource counts client connections closed at once because their
	// address had tunnels.max_conns_per_source open to the service already.
	ClientsRefusedPerSource uint64 `json:"clients_refused_per_source"`
	// ClientsIdle counts client connections closed after tunnels.idle_timeout without a
	// byte either way.
	ClientsIdle uint64 `json:"clients_idle"`
	// AcceptErrors counts the services' accept errors that were waited out (out of
	// file descriptors).
	AcceptErrors    uint64 `json:"accept_errors"`
	BytesToOrigin   int64  `json:"bytes_to_origin"`
	BytesFromOrigin int64  `json:"bytes_from_origin"`
}
