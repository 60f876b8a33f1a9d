package steer

import (
	"fmt"
	"maps"
	"math"
	"time"
)

// Seed is the published baseline manifold's controller is measured against ("Building
// A Smarter AWS Global Accelerator"): the same target — closest origin first, spill at
// capacity —, approached by at most 2 points per share per 15-second cycle, the damping
// that made that loop stable. It is given what the write-up leaves open in its favour:
// the exact target rather than a greedy one, and an unhealthy origin's flows dropped at
// once (the origin's weight falls to zero and the rest take its flows in proportion).
//
// It keeps the time of its last cycle, so one Seed serves one run.
type Seed struct {
	// Interval is the cycle; MaxMove the largest change of a share per cycle.
	Interval time.Duration
	MaxMove  float64

	last  time.Time
	began bool
}

// NewSeed returns the baseline with the write-up's damping: 2 points per 15 s.
func NewSeed() *Seed { return &Seed{Interval: 15 * time.Second, MaxMove: 0.02} }

// Name is "seed".
func (*Seed) Name() string { return "seed" }

// Decide moves every share toward the target once per cycle, scaling a site's moves so
// that none exceeds MaxMove (the shares keep summing to 1); between cycles it only drops
// unusable origins.
func (sd *Seed) Decide(now time.Time, obs Observation, current Shares) Decision {
	t := SolveTarget(obs)
	cycle := !sd.began || now.Sub(sd.last) >= sd.Interval
	if cycle {
		sd.last, sd.began = now, true
	}
	next := Shares{}
	for _, s := range obs.Sites {
		target, ok := t.Shares[s.Name]
		cur, stranded, known := currentOf(s, current[s.Name], target, t)
		switch {
		case !ok:
			next[s.Name] = cur
			continue
		case !known || stranded >= 1:
			next[s.Name] = maps.Clone(target)
			continue
		}
		y := map[string]float64{}
		var largest float64
		for o := range target {
			if usable(s, o, t) {
				y[o] = cur[o] / (1 - stranded)
				largest = max(largest, math.Abs(target[o]-y[o]))
			} else {
				y[o] = 0
			}
		}
		if cycle && largest > 0 {
			k := min(1, sd.MaxMove/largest)
			for o := range y {
				y[o] += k * (target[o] - y[o])
			}
		}
		next[s.Name] = y
	}
	moving := func(from, to, target float64) string {
		return fmt.Sprintf("moving from %s toward %s, at most %.0f points per %s", pct(from), pct(target), sd.MaxMove*100, sd.Interval)
	}
	return decide(obs, t, next, moving, current)
}
