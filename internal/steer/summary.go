package steer

import (
	"maps"
	"math"
	"slices"
)

// Summary is what a run is judged on.
type Summary struct {
	// ConvergedS is the worst, over the scenario's changes, of the time from the change
	// until every share stays within 1 point of where it ends that phase.
	ConvergedS float64 `json:"converged_s"`
	// ExcessFlows are the flows sent to origins above their capacity (all of an
	// unhealthy origin's), summed over the run.
	ExcessFlows float64 `json:"excess_flows"`
	// MaxOverloadPct is the worst load of a healthy origin above its capacity, in % of
	// the capacity, counting only from 30 s after each change.
	MaxOverloadPct float64 `json:"max_overload_pct"`
	// Oscillations counts, within each phase, the times a share's moves reverse
	// direction, among moves larger than 0.5 point.
	Oscillations int `json:"oscillations"`
	// MeanRTTMs is the flow-weighted mean RTT.
	MeanRTTMs float64 `json:"mean_rtt_ms"`
	// ServedPct is the flows served (sent to a healthy origin within its capacity) in %
	// of the flows offered — the scenario's demand, before elasticity discouraged any.
	ServedPct float64 `json:"served_pct"`
}

const (
	convergedWithin = 0.01  // a share within 1 point of its final value has converged
	overloadGrace   = 30.0  // s after a change during which overload is not counted
	significantMove = 0.005 // moves up to 0.5 point do not count toward oscillations
)

// Summarize computes a run's summary from its series.
func Summarize(s Series) Summary {
	var sum Summary
	shares := shareSeries(s)
	for k, c := range s.Changes {
		a, b := phase(s.T, c, s.Changes, k)
		if a >= b {
			continue
		}
		j := b - 1
		for j > a && slices.IndexFunc(shares, func(v []float64) bool { return math.Abs(v[j-1]-v[b-1]) > convergedWithin }) < 0 {
			j--
		}
		sum.ConvergedS = max(sum.ConvergedS, s.T[j]-s.T[a])
		for _, v := range shares {
			sum.Oscillations += reversals(v[a:b])
		}
	}

	var served, offered, rttFlows, flows float64
	for i, t := range s.T {
		k, found := slices.BinarySearch(s.Changes, t)
		if !found {
			k-- // the last change before t
		}
		grace := k >= 0 && t-s.Changes[k] < overloadGrace
		for _, o := range s.Origins {
			capacity := o.Capacity[i]
			if !o.Healthy[i] {
				capacity = 0
			}
			sum.ExcessFlows += max(0, o.Load[i]-capacity) * s.StepS
			served += min(o.Load[i], capacity)
			if !grace && o.Healthy[i] && capacity > 0 {
				sum.MaxOverloadPct = max(sum.MaxOverloadPct, 100*(o.Load[i]-capacity)/capacity)
			}
		}
		for _, site := range s.Sites {
			offered += site.Offered[i]
			for o, v := range site.Shares {
				f := v[i] * site.Demand[i]
				flows += f
				rttFlows += f * site.RTTMs[o]
			}
		}
	}
	if flows > 0 {
		sum.MeanRTTMs = rttFlows / flows
	}
	sum.ServedPct = 100
	if offered > 0 {
		sum.ServedPct = 100 * served / offered
	}
	// Rounded, so that float noise (an overload of 1e-9 %) reads as what it is.
	for _, v := range []*float64{&sum.ConvergedS, &sum.ExcessFlows, &sum.MaxOverloadPct, &sum.MeanRTTMs, &sum.ServedPct} {
		*v = math.Round(*v*1000) / 1000
	}
	return sum
}

// phase returns the sample indices [a, b) of the phase that starts at change k.
func phase(t []float64, c float64, changes []float64, k int) (a, b int) {
	a, _ = slices.BinarySearch(t, c)
	b = len(t)
	if k+1 < len(changes) {
		b, _ = slices.BinarySearch(t, changes[k+1])
	}
	return a, b
}

// shareSeries lists every site × origin share series, in a fixed order.
func shareSeries(s Series) [][]float64 {
	var out [][]float64
	for _, site := range s.Sites {
		for _, o := range slices.Sorted(maps.Keys(site.Shares)) {
			out = append(out, site.Shares[o])
		}
	}
	return out
}

// reversals counts the changes of direction among the significant moves of v.
func reversals(v []float64) int {
	n, last := 0, 0.0
	for i := 1; i < len(v); i++ {
		m := v[i] - v[i-1]
		if math.Abs(m) <= significantMove {
			continue
		}
		if last != 0 && (m > 0) != (last > 0) {
			n++
		}
		last = m
	}
	return n
}
