package tunnel

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/listen"
)

// TunnelStatus is one connector's tunnel as an edge sees it (GET /api/v1/tunnels).
type TunnelStatus struct {
	ID        uint64 `json:"id"`
	Connector string `json:"connector"` // the name the connector gave
	Remote    string `json:"remote"`    // where the tunnel comes from (the origin's NAT)
	Token     string `json:"token"`     // the token's fingerprint
	// Version is the tunnel protocol's version the connector and the edge speak on it
	// (1: services without origins only).
	Version int `json:"version"`
	// Transport is what the tunnel runs over: TransportQUIC or TransportTCP.
	Transport string `json:"transport"`
	// Relay says the tunnel is another edge's (relay.go), offering its connectors'
	// services; Connector is then that edge's name.
	Relay    bool            `json:"relay"`
	Services []ServiceStatus `json:"services"`
	// StreamsOpen is the streams open now; StreamLimit, the edge's MaxStreamsPerTunnel.
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

// ServiceStatus is a tunnel's share of one service: Open of Capacity in use, for
// Origin (the origin the connector named; "" for none).
type ServiceStatus struct {
	Name     string `json:"name"`
	Origin   string `json:"origin,omitempty"`
	Capacity int    `json:"capacity"`
	Open     int    `json:"open"`
}

// EdgeCounters are an edge's counters since it started.
type EdgeCounters struct {
	Attached uint64 `json:"attached"` // tunnels accepted
	// Refused counts refused peers by reason (the Refused* constants), every key present.
	Refused map[string]uint64 `json:"refused"`
	Gone    uint64            `json:"gone"`    // tunnels dropped after deadAfter without a ping
	Streams uint64            `json:"streams"` // client connections joined to a stream
	// StreamRetries counts streams that failed before carrying a byte (connector gone,
	// origin unreachable) and were retried on another connector.
	StreamRetries uint64 `json:"stream_retries"`
	// ClientsRefused counts client connections closed because no connector of their
	// service had free capacity within QueueTimeout.
	ClientsRefused uint64 `json:"clients_refused"`
	// ClientsRefusedPerSource counts client connections closed at once because their
	// address had MaxConnsPerSource open to the service already.
	ClientsRefusedPerSource uint64 `json:"clients_refused_per_source"`
	// ClientsIdle counts client connections closed after IdleTimeout without a byte.
	ClientsIdle uint64 `json:"clients_idle"`
	// AcceptErrors counts the services' accept errors that were waited out (out of
	// file descriptors).
	AcceptErrors    uint64 `json:"accept_errors"`
	BytesToOrigin   int64  `json:"bytes_to_origin"`
	BytesFromOrigin int64  `json:"bytes_from_origin"`
}

// Tunnels returns the attached tunnels, by connector name then id.
func (e *Edge) Tunnels() []TunnelStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]TunnelStatus, 0, len(e.tunnels))
	for _, t := range e.tunnels {
		s := TunnelStatus{
			ID: t.id, Connector: t.connector, Remote: t.remote, Token: t.token, Version: t.version, Transport: t.conn.Transport(), Relay: t.relay,
			StreamsOpen: t.open, StreamLimit: e.cfg.MaxStreamsPerTunnel, Streams: t.streams.Load(),
			BytesToOrigin: t.bytesToOrigin.Load(), BytesFromOrigin: t.bytesFromOrg.Load(),
			RTT: t.conn.RTT(), Draining: t.draining, Since: t.since,
		}
		for name, slot := range t.services {
			s.Services = append(s.Services, ServiceStatus{Name: name, Origin: slot.origin, Capacity: slot.capacity, Open: slot.open})
		}
		slices.SortFunc(s.Services, func(a, b ServiceStatus) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b TunnelStatus) int {
		if c := strings.Compare(a.Connector, b.Connector); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// Counters returns the edge's counters.
func (e *Edge) Counters() EdgeCounters {
	c := EdgeCounters{
		Attached: e.attached.Load(), Refused: map[string]uint64{}, Gone: e.gone.Load(),
		Streams: e.streams.Load(), StreamRetries: e.streamRetries.Load(), ClientsRefused: e.clientsRefused.Load(),
		BytesToOrigin: e.bytesToOrigin.Load(), BytesFromOrigin: e.bytesFromOrigin.Load(),
	}
	for reason, n := range e.refused {
		c.Refused[reason] = n.Load()
	}
	c.ClientsIdle = e.clientsIdle.Load()
	e.mu.Lock()
	l := e.listenersGone
	for ln := range e.listeners {
		st := ln.Stats()
		l.RefusedSource += st.RefusedSource
		l.AcceptErrors += st.AcceptErrors
	}
	e.mu.Unlock()
	c.ClientsRefusedPerSource, c.AcceptErrors = l.RefusedSource, l.AcceptErrors
	return c
}

// addListener and removeListener keep the counters of a service's listener in the
// edge's, after it is closed too.
func (e *Edge) addListener(ln *listen.Listener) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.listeners[ln] = true
}

func (e *Edge) removeListener(ln *listen.Listener) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.listeners, ln)
	st := ln.Stats()
	e.listenersGone.RefusedSource += st.RefusedSource
	e.listenersGone.AcceptErrors += st.AcceptErrors
}

// Changed returns a channel closed at the edge's next change of state: a tunnel
// attached, drained or gone, a stream taken or released, a refusal.
func (e *Edge) Changed() <-chan struct{} { return e.changed() }

// Connected returns the services that have at least one attached, not draining
// tunnel: those this edge can serve now.
func (e *Edge) Connected() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]bool{}
	for name, ts := range e.byService {
		for _, t := range ts {
			if !t.draining && !t.gone && t.services[name].capacity > 0 {
				out[name] = true
			}
		}
	}
	return out
}
