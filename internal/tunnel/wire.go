package tunnel

import "github.com/manifoldlb/manifold/internal/api/wire"

// The edge of tunnel toward the API (GET /api/v1/tunnels): its status as the wire
// carries it. A counter added to EdgeCounters fails to compile here until
// wire.TunnelCounters has it too (and openapi.json's TunnelCounters, which
// internal/api's TestOpenAPIIsTheWireTypes checks); a field added to TunnelStatus is
// carried in WireTunnels by hand, and TestWireStatus fails until it is.

// WireTunnels is the edge's tunnels as the API shows them.
func WireTunnels(ts []TunnelStatus) []wire.Tunnel {
	if ts == nil {
		return nil // null in JSON, as before
	}
	out := make([]wire.Tunnel, len(ts))
	for i, t := range ts {
		out[i] = wire.Tunnel{
			ID: t.ID, Connector: t.Connector, Remote: t.Remote, Token: t.Token, Version: t.Version, Transport: t.Transport, Relay: t.Relay,
			StreamsOpen: t.StreamsOpen, StreamLimit: t.StreamLimit, Streams: t.Streams,
			BytesToOrigin: t.BytesToOrigin, BytesFromOrigin: t.BytesFromOrigin, RTT: t.RTT, Draining: t.Draining, Since: t.Since,
		}
		if t.Services != nil {
			out[i].Services = make([]wire.TunnelShare, len(t.Services))
			for j, s := range t.Services {
				out[i].Services[j] = wire.TunnelShare(s)
			}
		}
	}
	return out
}

// WireCounters is the edge's counters as the API shows them.
func WireCounters(c EdgeCounters) wire.TunnelCounters {
	return wire.TunnelCounters(c)
}
