package steer

import (
	"fmt"
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
	x := index(obs)
	t := solve(x)
	cycle := !sd.began || now.Sub(sd.last) >= sd.Interval
	if cycle {
		sd.last, sd.began = now, true
	}
	nO := x.nO
	next := make([]float64, len(obs.Sites)*nO)
	cur := make([]float64, nO)
	for i, s := range obs.Sites {
		y, target := next[i*nO:(i+1)*nO], t.share[i*nO:(i+1)*nO]
		stranded, known := currentOf(x, t, i, current[s.Name], cur)
		switch {
		case !t.has[i]:
			continue
		case !known || stranded >= 1:
			copy(y, target)
			continue
		}
		var largest float64
		for j := range y {
			if t.usable(x, i, j) {
				y[j] = cur[j] / (1 - stranded)
				largest = max(largest, math.Abs(target[j]-y[j]))
			}
		}
		if cycle && largest > 0 {
			k := min(1, sd.MaxMove/largest)
			for j := range y {
				y[j] += k * (target[j] - y[j])
			}
		}
	}
	return decide(x, t, next, current, fmt.Sprintf("at most %.0f points per %s", sd.MaxMove*100, sd.Interval))
}
