package fleet

import (
	"math"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// A node's record carries rates sampled every second and smoothed RTTs: at full
// precision a node under steady traffic changes them at nearly every publication, and
// the steering controller decodes every record that changes (82 kB at 10 services of
// 100 origins: 163 MB a second at 2 000 nodes, more than a core). So a value is
// published again only when it moved out of a deadband around the value last
// published: a steady state keeps the record's bytes.
//
// What the controller reads is then within the band of what the node measured: each
// rate within rateDeadband of it (or rateFloor per second), each RTT within
// rttDeadband (or rttFloor). The control law has no dead zone of its own on demand or
// load (its only one is on the shares: 0.1 point, steer.settleWithin); a demand read
// 2 % low can put up to 2 % more than its capacity on an origin, within the
// steering's goal of an overload ≤ 2 %, and below the sampling noise of a rate counted
// over one second (±10 % at 100 flows/s). An RTT 2 % off moves a site only between
// origins whose RTTs are within 2 % of each other. A value that becomes 0 or leaves 0
// is published at once: 0 is no traffic, or no RTT measured (an origin unreachable).
const (
	rateDeadband = 0.02
	rateFloor    = 0.5 // flows, packets or bytes a second
	rttDeadband  = 0.02
	rttFloor     = 0.1 // ms
)

// HoldSteady gives each rate and RTT of next (a node's services as its record lists
// them) the value last published (last) when it moved less than its deadband since:
// next is changed in place, and is what to publish, and to pass as last next time.
// Entries are matched by service name, origin name and backend address; new ones are
// published as they are.
func HoldSteady(last, next []wire.ServiceLoad) {
	prev := make(map[string]*wire.ServiceLoad, len(last))
	for i := range last {
		prev[last[i].Name] = &last[i]
	}
	for i := range next {
		n := &next[i]
		p := prev[n.Name]
		if p == nil {
			continue
		}
		holdRate(&n.NewFlowsPerSecond, p.NewFlowsPerSecond)
		holdRate(&n.PacketsPerSecond, p.PacketsPerSecond)
		holdRate(&n.BytesPerSecond, p.BytesPerSecond)
		for j := range n.Origins {
			o := &n.Origins[j]
			// in the service's order, as the last record's: looked up where it was
			if k := matching(p.Origins, j, o.Name, func(l wire.OriginLoad) string { return l.Name }); k >= 0 {
				holdRate(&o.NewFlowsPerSecond, p.Origins[k].NewFlowsPerSecond)
				holdRTT(&o.RTTMilliseconds, p.Origins[k].RTTMilliseconds)
			}
		}
		for j := range n.Backends {
			b := &n.Backends[j]
			if k := matching(p.Backends, j, b.Address, func(l wire.BackendLoad) string { return l.Address }); k >= 0 {
				holdRate(&b.NewFlowsPerSecond, p.Backends[k].NewFlowsPerSecond)
				holdRate(&b.PacketsPerSecond, p.Backends[k].PacketsPerSecond)
				holdRate(&b.BytesPerSecond, p.Backends[k].BytesPerSecond)
				holdRTT(&b.RTTMilliseconds, p.Backends[k].RTTMilliseconds)
			}
		}
	}
}

// matching is the index in list of the entry named name, looked for at j first; -1
// when there is none.
func matching[T any](list []T, j int, name string, nameOf func(T) string) int {
	if j < len(list) && nameOf(list[j]) == name {
		return j
	}
	for k := range list {
		if nameOf(list[k]) == name {
			return k
		}
	}
	return -1
}

func holdRate(v *float64, last float64) { hold(v, last, rateDeadband, rateFloor) }
func holdRTT(v *float64, last float64)  { hold(v, last, rttDeadband, rttFloor) }

// hold sets *v to last when they are within rel of last, or floor, and neither is 0.
func hold(v *float64, last, rel, floor float64) {
	if *v == 0 || last == 0 {
		return
	}
	if math.Abs(*v-last) <= max(rel*math.Abs(last), floor) {
		*v = last
	}
}
