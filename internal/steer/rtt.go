package steer

import "github.com/manifoldlb/manifold/internal/api/wire"

// The node's side of steering's input: the RTT each node publishes for its backends
// (wire.BackendLoad.RTTMilliseconds), from which the fleet's steering controller takes
// each site's RTT to each origin (Site.RTT).

// rttWeight is the weight of a new health check's duration in a backend's RTT
// average (an EWMA): one slow check (a retransmitted SYN, a busy backend) moves the
// average by a quarter of its excess, and a lasting change of the path shows in it
// after a few checks (95 % of a step after ten). Steering decides on this average, so
// a single outlier must not move a site's flows.
const rttWeight = 0.25

// RTTs is each backend's RTT average, by service and address: one sample per health
// check, however often it is observed. The zero value is ready; one goroutine owns it
// (the node's fleet publisher).
type RTTs struct{ avg map[rttKey]rttAverage }

type rttKey struct{ service, backend string }

type rttAverage struct {
	checks uint64  // the health check's count at the last sample: a sample per check
	ms     float64 // the average; 0 before the first successful check
}

// Observe takes each backend's last health check into its average if it is a new,
// successful one. A failed check's duration is its timeout or a refusal, not a round
// trip: it is left out. A backend no longer among services takes its average with it.
func (r *RTTs) Observe(services []wire.ServiceStatus) {
	next := make(map[rttKey]rttAverage, len(r.avg))
	for _, s := range services {
		for _, b := range s.Backends {
			k := rttKey{s.Name, b.Address}
			avg := r.avg[k]
			h := b.Health
			if h.Check != "none" && h.Checks != avg.checks && h.LastError == "" && h.Checks > 0 {
				sample := h.LatencySeconds * 1000
				if avg.ms == 0 {
					avg.ms = sample
				} else {
					avg.ms += rttWeight * (sample - avg.ms)
				}
			}
			avg.checks = h.Checks
			next[k] = avg
		}
	}
	r.avg = next
}

// Of is the RTT average of a service's backend in milliseconds (0: no sample yet).
func (r *RTTs) Of(service, backend string) float64 { return r.avg[rttKey{service, backend}].ms }
