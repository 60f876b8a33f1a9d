// Package tunnel publishes services that sit behind NAT through the edge nodes: a
// connector on the origin dials out to every edge, and an edge joins each client
// connection of a service to a stream over the tunnel of one of that service's
// connectors.
//
//	client ──TCP──▶ Edge.Serve(service, listener)
//	                   │ pick: an origin by the site's shares (steering.go), then a
//	                   │       connector by free capacity, never draining or gone
//	                   ▼
//	                 stream ══ tunnel (one QUIC or TLS-over-TCP connection) ══▶ Connector ──TCP──▶ origin (to)
//
// # Transports: QUIC, and TLS over TCP
//
// A tunnel is one connection dialled by the connector, and each client connection is
// one bidirectional stream over it opened by the edge. The protocol (protocol.go,
// edge.go, connector.go, balance.go) is written once against tunnelConn and
// tunnelStream (transport.go); two transports carry it, served by the edge on one port
// number, and chosen by the connector (transport: auto|quic|tcp, tcp.go):
//
//   - QUIC (TLS 1.3, ALPN "manifold-tunnel/3", "/2" or "/1"; the same over TCP): streams are independent, so a
//     lost packet stalls only the streams whose data it carried, where one TCP
//     connection stalls every client behind it; the peer's stream limit is part of the
//     protocol (the connector grants the edge as many concurrent streams as its
//     capacity); the transport measures the RTT and survives the NAT rebinding the
//     connector's port.
//   - TLS 1.3 over kernel TCP, the streams multiplexed by mux.go (per-stream windows,
//     so one slow stream stops only itself): where UDP does not pass, and faster for
//     bulk data (the kernel's TCP and AES-GCM against QUIC's user-space packets). A
//     ping or pong late behind the data is not a vanished peer while frames arrive
//     (stillHeard).
//
// auto, the default, dials QUIC and takes TCP when QUIC has no answer.
//
// # Protocol
//
// docs/tunnels.md, "Protocol", gives the wire format byte by byte; protocol.go is it.
// The version is negotiated by ALPN: the edge offers manifold-tunnel/3, /2 and /1 and
// takes the first of those the connector offers, a connector offers all three, /3
// first; the negotiated version is the tunnel's for its life. Version 2 adds the
// origin of each announced service to the hello, and to the stream header the
// client's and the VIP's address and port (binary) and a block of the client's first
// bytes (at most maxInitialData). Version 3 adds to the stream header the PROXY
// header the connector writes to the origin (proxyheader.go). A version 1 connector
// keeps working for services without origins, a version 2 one for services without
// proxy_protocol.
//
// The connector opens the first stream, the control stream, and keeps it for the life
// of the tunnel. On it both sides send frames: a 4-byte big-endian length (at most
// maxFrame) and a JSON message. The connector says hello (protocol version, token,
// its name, the services it serves with their capacities and, version 2, origins);
// the edge answers welcome, or closes the connection with an application error code
// and the reason. Then the
// connector sends ping every pingInterval and the edge answers pong: each side takes
// the other for gone after deadAfter without one — of its own running time, its own
// stalls not held against the peer (watchdog.go) — which is how an edge stops using a
// connector that vanished (killed, unplugged) within a second. drain from the
// connector stops new streams; the edge answers drained once the last stream it had
// opened over the tunnel has ended, and the connector then closes the tunnel.
//
// Every other stream is opened by the edge, one per client connection: a header (the
// service name; the client's address; version 2: the VIP's, and the client's first
// bytes; version 3: the PROXY header's version), then the connector answers one byte, ackOK once it has connected to the origin or ackFailed
// followed by a reason; after ackOK the stream carries the connection's bytes, each
// direction closed on its own. Until the ack the edge has sent none of the client's
// bytes (beyond the header's), so it can try another connector when a stream fails.
//
// # Relays between edges
//
// An edge of a fleet with the fleet's relay token keeps a tunnel to every other edge,
// dialled like a connector's, whose hello gives the relay token instead of a
// connector's token; on it the edge offers the services of its own connectors (an
// "offer" message at every change of them) and takes the streams the other edge
// opens, joining each to one of its connectors (relay.go). An edge uses another's
// relay only when no connector's own tunnel has room; a relayed stream is never
// relayed again.
//
// # Security
//
// The connector checks the edge's certificate against its CA file; the edge
// authenticates the connector by its token, which is scoped to service names and to
// the origins its connectors may name (the tokens file). A service with origins
// (SetServiceOrigins) refuses a connector that names none or one it does not have. An unknown token, a service outside the token's scope, a TLS peer
// that does not speak the tunnel protocol, more tunnels per token than allowed:
// refused, counted by reason, logged with the token's fingerprint, never the token.
// The edge accepts no stream from a connector but the control stream, and never
// connects into the origin's network but through a stream the connector accepted.
//
// What anyone can send is bounded: connections that have not said hello
// (MaxPendingHellos, refused at their first packet past it, or at accept over TCP;
// helloTimeout each), a client address's connections to a service (MaxConnsPerSource), a client connection
// that moves no byte (IdleTimeout, idle.go); accept errors that pass are waited out
// (internal/listen), and refusals are logged at a bounded rate (internal/ratelog).
package tunnel
