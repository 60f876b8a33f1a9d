package tunnel

// Global steering of the tunnelled origins: the node gives the edge its site's shares
// of each service with origins (SetOriginShares), by which the edge picks the origin
// of every new stream (balance.go); the edge tells what steering observes of each
// origin (Origins): its connectors (health), the streams it took (load) and the
// tunnels' round trip (RTT), and the client connections of each service (demand).
//
//	fleet's shares for the site ─► node ─► SetOriginShares ─► pickOrigin
//	Origins, Clients ─► node's fleet record ─► steering controller (fleet.Observe)

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"
)

// originShares are a service's shares at this edge's site, with the running weights
// of the smooth weighted round robin that follows them (pickOrigin).
type originShares struct {
	origins []string // sorted: the round robin's order, the same on every edge
	share   []float64
	current []float64
	byName  map[string]float64 // as given, to tell a change
}

// SetOriginShares gives the edge its site's steering shares: service → origin → the
// fraction of the service's new streams for the origin. A service absent, or whose
// shares give nothing to any origin, is not steered: its streams go to any of its
// connectors by free capacity. A steered service's streams go only to origins with a
// share. Shares as in force already keep their place in the round robin. The edge
// keeps shares: the caller makes a new map for every call.
func (e *Edge) SetOriginShares(shares map[string]map[string]float64) {
	e.mu.Lock()
	next := make(map[string]*originShares, len(shares))
	for service, m := range shares {
		if !givesAny(m) {
			continue
		}
		if old := e.shares[service]; old != nil && maps.Equal(old.byName, m) {
			next[service] = old
			continue
		}
		sh := &originShares{origins: slices.Sorted(maps.Keys(m)), byName: m}
		for _, o := range sh.origins {
			sh.share = append(sh.share, max(m[o], 0))
		}
		sh.current = make([]float64, len(sh.origins))
		next[service] = sh
	}
	e.shares = next
	e.mu.Unlock()
	e.notify() // a client waiting for an origin with room may have one now
}

// givesAny tells whether shares give some streams to an origin.
func givesAny(shares map[string]float64) bool {
	for _, v := range shares {
		if v > 0 {
			return true
		}
	}
	return false
}

// serviceOrigin names an origin of a service.
type serviceOrigin struct{ service, origin string }

// countClient counts a client connection of service: steering's demand.
func (e *Edge) countClient(service string) {
	e.mu.Lock()
	e.clients[service]++
	e.mu.Unlock()
}

// countStream counts a stream opened to a connector of origin: steering's load.
// The origins are bounded: each is one a connector's token lists.
func (e *Edge) countStream(service, origin string) {
	e.mu.Lock()
	e.originStreams[serviceOrigin{service, origin}]++
	e.mu.Unlock()
}

// Clients returns the client connections each service took since the edge started
// (those refused for want of a connector too): the demand at this edge.
func (e *Edge) Clients() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.clients)
}

// OriginStatus is one origin of a service with origins as this edge sees it: what
// steering observes of a tunnelled origin, as of a routed one.
type OriginStatus struct {
	Service, Origin string
	// Connectors is the origin's tunnels attached and not draining (each answers its
	// pings, or is gone within deadAfter): the origin is healthy here while it has one.
	Connectors int
	// Streams counts the streams opened to the origin's connectors since the edge
	// started (relayed ones included: the load this edge puts on the origin).
	Streams uint64
	// RTT is the mean of the smoothed round trips of those tunnels (QUIC's, or the kernel's TCP's): the
	// edge's distance to the origin, 0 without a connector.
	RTT time.Duration
}

// Origins returns every origin of the services with origins (SetServiceOrigins), by
// service then origin, those without a connector here too.
func (e *Edge) Origins() []OriginStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []OriginStatus
	for service, origins := range e.origins {
		for _, o := range origins {
			s := OriginStatus{Service: service, Origin: o, Streams: e.originStreams[serviceOrigin{service, o}]}
			var rtt time.Duration
			for _, t := range e.byService[service] {
				if t.relay || t.draining || t.gone || t.services[service].origin != o {
					continue
				}
				s.Connectors++
				rtt += t.conn.RTT()
			}
			if s.Connectors > 0 {
				s.RTT = rtt / time.Duration(s.Connectors)
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b OriginStatus) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Origin, b.Origin))
	})
	return out
}
