package steer

// The control law: how far the shares move toward the target each round.
//
// Why not jump to the target. The target is computed from the demand observed under
// the current shares, and demand depends on the shares: clients that wait longer send
// fewer requests. Take one site, a close origin of capacity C and a far one, x the
// close origin's share. Sending fewer flows close raises the mean RTT, so demand D(x)
// grows with x, and the target T(x) = C / D(x) falls as x grows: its slope is -k with
//
//	k = a·x / (1 - a + a·x),   a = elasticity × (RTT gap / 100 ms)
//
// at the fixed point x* = T(x*), where the close origin runs at exactly C. Jumping to
// the target (the seed's first loop) is the iteration x' = T(x), whose slope -k is
// negative: every round overshoots x* and the next undoes part of it — the shares
// oscillate, for ever as k nears 1. The seed damped it by moving at most 2 points per
// origin per 15 s: stable, but a 43-point move then takes five minutes, with the close
// origin overloaded all along.
//
// The law. Each round closes a fixed fraction g of the gap to the target:
//
//	x' = x + g·(T(x) - x)
//
// Its slope at x* is 1 - g·(1 + k). With 0 < g ≤ 1/(1 + k) that slope lies in [0, 1):
// the iteration is monotone — it approaches x* from the side it starts on, never
// crossing it, so it neither overshoots nor oscillates — and the gap shrinks by the
// factor 1 - g·(1 + k) ≤ 1 - g every round. k ≤ 1 exactly when a ≤ 1 (from the formula:
// a·x ≤ 1 - a + a·x), that is whenever sending every flow to the far origin would cost
// at most all of the demand — any elasticity that makes sense. So g = 1/2 is stable
// for every such elasticity, and fast: a gap halves (or better) every round, a 43-point
// move is within a point in 6 rounds. Approaching from above, the close origin is over
// capacity only during those rounds; from below it never is.
//
// The capacity guard. The new shares are a convex combination of the current shares
// and the target (weights 1-g and g), so at the observed demand each origin's load
// after the move lies between its load now and its target load, which is within its
// capacity. A move never pushes an origin that is within capacity above it; an origin
// above capacity only comes down. (Decision.Origins' PredictedLoad shows it per round.)
//
// Failover is not damped. Flows on an origin the target cannot use (unhealthy, or no
// RTT measured) are moved at once, spread as the target spreads the site's flows;
// the rest of the shares then take their usual step. Waiting would only lose the flows.
//
// Settling. When every share of a site is within 0.1 point of its target, the site takes
// the target exactly: nodes rebuild their Maglev tables only when shares change, and a
// geometric approach would otherwise change them by crumbs for ever.
//
// One round per fresh observation: a round that ran again on the same observation
// would count the last move's effect twice (a gain of 1 - (1-g)² instead of g).

import (
	"math"
	"time"
)

// DefaultGain is the fraction of the gap to the target that the control law closes per
// round: 1/2, stable for any elasticity up to losing the whole demand (see above).
const DefaultGain = 0.5

// settleWithin is how close to its target every share of a site must be for the site to
// take the target exactly.
const settleWithin = 0.001

// Manifold is manifold's controller: the target, approached by the control law above.
type Manifold struct {
	// Gain is the fraction of the gap closed per round, in (0, 1]; 0 means DefaultGain.
	Gain float64
}

// Name is "manifold".
func (Manifold) Name() string { return "manifold" }

// Decide moves each site's shares a step toward the target. The law keeps no state and
// reads no time: a round is one step.
func (m Manifold) Decide(_ time.Time, obs Observation, current Shares) Decision {
	g := m.Gain
	if g <= 0 || g > 1 {
		g = DefaultGain
	}
	x := index(obs)
	t := solve(x)
	nO := x.nO
	next := make([]float64, len(obs.Sites)*nO)
	cur := make([]float64, nO)
	for i, s := range obs.Sites {
		y, target := next[i*nO:(i+1)*nO], t.share[i*nO:(i+1)*nO]
		stranded, known := currentOf(x, t, i, current[s.Name], cur)
		switch {
		case !t.has[i]:
			// no target: the shares in force over the origins of a target, none
			continue
		case !known || stranded >= 1:
			copy(y, target)
			continue
		}
		worst := 0.0
		for j, tv := range target {
			if !t.usable(x, i, j) {
				continue
			}
			y[j] = cur[j] + g*(tv-cur[j]) + (1-g)*stranded*tv
			worst = max(worst, math.Abs(y[j]-tv))
		}
		if worst < settleWithin {
			copy(y, target)
		}
	}
	return decide(x, t, next, current, pct(g)+" of the gap per round")
}

// currentOf reads site i's shares in force, normalised to sum 1, over the
// observation's origins into cur. stranded is the part the target cannot keep where it
// is: on origins it cannot use, or that the observation no longer has. known is false
// when the site has no shares yet.
func currentOf(x *indexed, t *target, i int, current map[string]float64, cur []float64) (stranded float64, known bool) {
	clear(cur)
	var total float64
	for _, v := range current {
		total += max(v, 0)
	}
	if total <= 0 {
		return 0, false
	}
	// the shares in force name few origins (a site is on one or two): read them, not
	// every origin
	for o, v := range current {
		if j, ok := x.pos[o]; ok {
			cur[j] = max(v, 0) / total
		}
	}
	stranded = 1
	for j, v := range cur {
		if v != 0 && t.usable(x, i, j) {
			stranded -= v
		}
	}
	return max(stranded, 0), true
}
