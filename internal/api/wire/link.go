package wire

// The wire types of a site-to-site link's own API (manifold link serves them on
// link.api: GET /api/v1/link); manifold ctl link and the lab decode them.

// LinkPath is where a link serves its status.
const LinkPath = "/api/v1/link"

// LinkStatus is the body of GET /api/v1/link.
type LinkStatus struct {
	Name      string `json:"name"`
	Local     string `json:"local"`      // this side's outer address
	Remote    string `json:"remote"`     // the other side's
	PublicKey string `json:"public_key"` // this side's WireGuard public key: the other side's peer_public_key
	// Prefixes are the remote prefixes routed over the tunnels.
	Prefixes []string `json:"prefixes"`
	// Route says how the prefixes are routed: "resilient" (a resilient next-hop group:
	// a tunnel leaving moves only its own flows) or "multipath" (a multipath route:
	// the kernel's hash-threshold also moves some flows of the others).
	Route   string       `json:"route"`
	Tunnels []LinkTunnel `json:"tunnels"`
}

// LinkTunnel is one WireGuard tunnel of a link.
type LinkTunnel struct {
	Index  int    `json:"index"`
	Device string `json:"device"` // its TUN device
	Port   uint16 `json:"port"`   // its UDP port at both ends, where it receives
	// SourcePort is the UDP port it sends from: Port, or with link.source_ports:
	// spread on a multipath route to the peer, one hashed onto a path of its own.
	SourcePort  uint16 `json:"source_port"`
	LocalInner  string `json:"local_inner"`  // this end's inner address (probes)
	RemoteInner string `json:"remote_inner"` // the other end's
	// State is "up" once rise probes were answered, "down" once none was for fall
	// intervals; a tunnel is in the route while up.
	State   string `json:"state"`
	InRoute bool   `json:"in_route"`
	// Inner traffic through the device, probes included.
	TxBytes   uint64 `json:"tx_bytes"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	RxPackets uint64 `json:"rx_packets"`
	// Handshakes counts the WireGuard handshakes seen completing (one at least every
	// two minutes while traffic flows); LastHandshake is the latest (RFC 3339, "" before).
	Handshakes    uint64 `json:"handshakes"`
	LastHandshake string `json:"last_handshake"`
	ProbesSent    uint64 `json:"probes_sent"`
	// ProbesLost counts the probes not answered before fall later ones had left.
	ProbesLost uint64 `json:"probes_lost"`
	// LastProbeRTTMillis is the round trip of the latest answered probe.
	LastProbeRTTMillis float64 `json:"last_probe_rtt_ms"`
	// Transitions counts its changes of state since the link started.
	Transitions uint64 `json:"transitions"`
}

// The states of a LinkTunnel.
const (
	LinkTunnelUp   = "up"
	LinkTunnelDown = "down"
)
