package steer

import (
	"fmt"
	"math"
	"time"
)

// Target is where the shares should be for an observation: the assignment of every
// site's demand to origins that minimises the flow-weighted RTT while no origin takes
// more than its capacity — a transportation problem, sites × origins, solved exactly
// as a min-cost flow (source → site: the demand; site → origin: cost the RTT; origin →
// sink: the capacity). Closest first falls out of it; where two sites compete for one
// origin, the one that would lose more RTT elsewhere keeps it.
type Target struct {
	// Shares has a site only when it can reach a healthy origin.
	Shares Shares
	// Load is what each origin takes at the observed demand.
	Load map[string]float64
	// Limit is what each healthy origin was filled up to: its capacity, times
	// Overcommit when the demand exceeds the healthy capacity.
	Limit map[string]float64
	// Overcommit is total demand / total healthy capacity when above 1, else 1: the
	// excess is spread over the healthy origins in proportion to their capacity.
	Overcommit float64
	// Note says so when the demand exceeds the capacity, or nothing is healthy.
	Note string
}

// SolveTarget computes the target of obs. An unhealthy origin gets nothing.
func SolveTarget(obs Observation) Target {
	x := index(obs)
	t := solve(x)
	out := Target{Shares: Shares{}, Load: map[string]float64{}, Limit: map[string]float64{}, Overcommit: t.overcommit, Note: t.note}
	for j, o := range obs.Origins {
		out.Load[o.Name] = t.load[j]
		if t.healthy[j] {
			out.Limit[o.Name] = t.limit[j]
		}
	}
	for i, s := range obs.Sites {
		if !t.has[i] {
			continue
		}
		m := make(map[string]float64, x.nO)
		for j, o := range obs.Origins {
			m[o.Name] = t.share[i*x.nO+j]
		}
		out.Shares[s.Name] = m
	}
	return out
}

// indexed is an observation laid out for a round: origins and sites by position, each
// site's RTT to each origin in one row, so that the inner loops read slices rather
// than maps (a round at 1 000 sites × 100 origins touches each pair several times).
type indexed struct {
	obs Observation
	nO  int
	// rtt is site-major, len(Sites) × nO, in ms; NaN where the site has no RTT to the
	// origin (it is unreachable from there).
	rtt []float64
	// pos is each origin's position by name.
	pos map[string]int
}

func index(obs Observation) *indexed {
	nO := len(obs.Origins)
	x := &indexed{obs: obs, nO: nO, rtt: make([]float64, len(obs.Sites)*nO), pos: make(map[string]int, nO)}
	for j, o := range obs.Origins {
		if _, dup := x.pos[o.Name]; !dup {
			x.pos[o.Name] = j
		}
	}
	for i, s := range obs.Sites {
		row := x.rtt[i*nO : (i+1)*nO]
		for j, o := range obs.Origins {
			if d, ok := s.RTT[o.Name]; ok {
				row[j] = ms(d)
			} else {
				row[j] = math.NaN()
			}
		}
	}
	return x
}

// target is Target laid out as indexed is.
type target struct {
	// share is the target share of each site × origin (site-major); a site's row
	// counts only where has says it has a target (it reaches a healthy origin).
	share []float64
	has   []bool
	// load and limit are by origin; limit only where healthy.
	load, limit []float64
	healthy     []bool
	overcommit  float64
	note        string
}

// usable tells whether the target could send flows of site i to origin j: it is
// healthy and i measures an RTT to it.
func (t *target) usable(x *indexed, i, j int) bool {
	return t.healthy[j] && !math.IsNaN(x.rtt[i*x.nO+j])
}

func solve(x *indexed) *target {
	obs, nO, nS := x.obs, x.nO, len(x.obs.Sites)
	t := &target{share: make([]float64, nS*nO), has: make([]bool, nS), load: make([]float64, nO), limit: make([]float64, nO),
		healthy: make([]bool, nO), overcommit: 1}
	var demand, capacity float64
	healthy := 0
	for j, o := range obs.Origins {
		if o.Healthy {
			t.healthy[j] = true
			healthy++
			capacity += o.Capacity
		}
	}
	for _, s := range obs.Sites {
		demand += s.Demand
	}
	if healthy == 0 {
		t.note = "no healthy origin: shares left as they are"
		return t
	}
	for j, o := range obs.Origins {
		if t.healthy[j] {
			t.limit[j] = o.Capacity
		}
	}
	switch {
	case capacity <= 0:
		// Nothing to be proportional to: the healthy origins share equally.
		for j := range t.limit {
			if t.healthy[j] {
				t.limit[j] = demand / float64(healthy)
			}
		}
		t.note = fmt.Sprintf("demand %s/s, healthy capacity 0: spread equally over %d healthy origins", rate(demand), healthy)
	case demand > capacity:
		t.overcommit = demand / capacity
		for j, o := range obs.Origins {
			if t.healthy[j] {
				t.limit[j] = o.Capacity * t.overcommit
			}
		}
		t.note = fmt.Sprintf("demand %s/s exceeds healthy capacity %s/s: every healthy origin takes %s of its capacity",
			rate(demand), rate(capacity), pct(t.overcommit))
	}

	flows := assign(x, t, epsilon(demand))
	var used []float64 // by origin, for the sites without demand; summed once
	for i, s := range obs.Sites {
		row, frow := t.share[i*nO:(i+1)*nO], flows[i*nO:(i+1)*nO]
		var routed, usableCap float64
		usable := 0
		for j := range nO {
			if t.usable(x, i, j) {
				usable++
				routed += frow[j]
				usableCap += t.limit[j]
			}
		}
		if usable == 0 {
			continue
		}
		t.has[i] = true
		if s.Demand <= 0 {
			if used == nil {
				used = make([]float64, nO)
				for k := range nS {
					for j, f := range flows[k*nO : (k+1)*nO] {
						used[j] += f
					}
				}
			}
			row[marginalOrigin(x, t, i, used)] = 1
			continue
		}
		// Demand the flow could not place (its reachable origins are full while
		// others have room) is spread over what it reaches, by capacity.
		left := s.Demand - routed
		for j := range nO {
			if !t.usable(x, i, j) {
				continue
			}
			f := frow[j]
			if left > 0 {
				if usableCap > 0 {
					f += left * t.limit[j] / usableCap
				} else {
					f += left / float64(usable)
				}
			}
			row[j] = f / s.Demand
			t.load[j] += f
		}
	}
	return t
}

// marginalOrigin is where site i, without demand, would send its first flows: the
// closest usable origin with room left, else the closest (the first in the
// observation's order among equals).
func marginalOrigin(x *indexed, t *target, i int, used []float64) int {
	best, bestRoom := -1, -1
	rtt := x.rtt[i*x.nO : (i+1)*x.nO]
	for j := range x.nO {
		if !t.usable(x, i, j) {
			continue
		}
		if best < 0 || rtt[j] < rtt[best] {
			best = j
		}
		if t.limit[j]-used[j] > epsilon(t.limit[j]) && (bestRoom < 0 || rtt[j] < rtt[bestRoom]) {
			bestRoom = j
		}
	}
	if bestRoom >= 0 {
		return bestRoom
	}
	return best
}

func epsilon(scale float64) float64 { return 1e-9 * (1 + math.Abs(scale)) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
