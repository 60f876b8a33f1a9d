// Package link is `manifold link`: a site-to-site link over several WireGuard tunnels
// to one peer, so that the link is N flows to the network and N cores of crypto at
// each end instead of one.
//
//	config ─► tunnels (wireguard-go on TUN devices, UDP port+i at both ends)
//	              │
//	          prober (UDP echo to the other end's inner address, every interval)
//	              │ up / down after rise / fall
//	              ▼
//	          run loop (owns the route) ─► routeSet: the remote prefixes over the
//	              │                         tunnels that are up, one resilient
//	              │                         next-hop group (or a multipath route)
//	          status ─► GET /api/v1/link, /metrics
//
// The run loop (Run) is the only writer of the route; the prober's goroutines only
// report. Nothing is installed before a first tunnel answers, and everything the link
// made (devices, next hops, routes, sysctls) is removed when it stops.
package link
