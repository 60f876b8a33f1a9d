package steer

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// decide assembles a Decision from the new shares (site-major, as t's): the numbers
// now, the reasons when asked (Decision.Explain). approach says how the controller
// moves toward the target ("50 % of the gap per round").
func decide(x *indexed, t *target, next []float64, current Shares, approach string) Decision {
	obs, nO := x.obs, x.nO
	d := Decision{Note: t.note, why: &explanation{x: x, t: t, current: current, approach: approach}}
	predicted := make([]float64, nO)
	for i, s := range obs.Sites {
		for j, v := range next[i*nO : (i+1)*nO] {
			predicted[j] += v * s.Demand
		}
	}
	d.Origins = make([]OriginDecision, nO)
	for j, o := range obs.Origins {
		d.Origins[j] = OriginDecision{
			Origin: o.Name, Healthy: o.Healthy, Capacity: o.Capacity, Load: o.Load,
			TargetLoad: t.load[j], PredictedLoad: predicted[j],
		}
	}
	// one array for every site's rows: a round at scale has 100 000 of them
	rows := make([]ShareDecision, len(obs.Sites)*nO)
	d.Sites = make([]SiteDecision, len(obs.Sites))
	for i, s := range obs.Sites {
		sd := SiteDecision{Site: s.Name, Demand: s.Demand, Shares: rows[i*nO : (i+1)*nO : (i+1)*nO]}
		for j, o := range obs.Origins {
			rtt := x.rtt[i*nO+j]
			if math.IsNaN(rtt) {
				rtt = 0
			}
			sd.Shares[j] = ShareDecision{
				Origin: o.Name, Share: next[i*nO+j], Target: t.share[i*nO+j], Load: o.Load, Capacity: o.Capacity, RTTMs: rtt,
			}
		}
		d.Sites[i] = sd
	}
	return d
}

// explanation is what a decision's reasons are worked out from, kept with it until
// they are asked for: a round at scale decides 100 000 shares, and words for each
// would cost more than deciding them.
type explanation struct {
	x        *indexed
	t        *target
	current  Shares
	approach string
}

// Explain returns d with the reason of every origin and share it holds. A decision
// not made by a controller of this package (decoded, or built by hand) is returned as
// it is.
func (d Decision) Explain() Decision {
	e := d.why
	if e == nil {
		return d
	}
	x, t := e.x, e.t
	out := d
	out.why = nil
	out.Origins = slices.Clone(d.Origins)
	for k, od := range out.Origins {
		if j, ok := x.pos[od.Origin]; ok {
			out.Origins[k].Reason = originReason(x.obs.Origins[j], t, j)
		}
	}
	byName := make([]int, x.nO) // the origins by name: ties between equal RTTs go to the first
	for j := range byName {
		byName[j] = j
	}
	slices.SortStableFunc(byName, func(a, b int) int { return strings.Compare(x.obs.Origins[a].Name, x.obs.Origins[b].Name) })
	out.Sites = slices.Clone(d.Sites)
	for i, sd := range out.Sites {
		if i >= len(x.obs.Sites) || sd.Site != x.obs.Sites[i].Name {
			continue
		}
		w := siteWhy(x, t, i, byName)
		sd.Shares = slices.Clone(sd.Shares)
		for k, sh := range sd.Shares {
			j, ok := x.pos[sh.Origin]
			if !ok {
				continue
			}
			reason := w.share(j)
			if t.has[i] && math.Abs(sh.Share-sh.Target) > 0.0005 {
				reason += fmt.Sprintf("; moving from %s toward %s, %s", pct(e.current[sd.Site][sh.Origin]), pct(sh.Target), e.approach)
			}
			sd.Shares[k].Reason = reason
		}
		out.Sites[i] = sd
	}
	return out
}

// full tells whether the target fills origin j to its limit.
func (t *target) full(j int) bool {
	return t.load[j] >= t.limit[j]-epsilon(t.limit[j])-1e-6*t.limit[j]
}

func originReason(o Origin, t *target, j int) string {
	if !o.Healthy {
		return "unhealthy (no healthy backend, no connector attached): gets no flows, at once"
	}
	limit, load := t.limit[j], t.load[j]
	var b strings.Builder
	fmt.Fprintf(&b, "observed %s/s of capacity %s/s; ", rate(o.Load), rate(o.Capacity))
	switch {
	case t.overcommit > 1:
		fmt.Fprintf(&b, "target %s/s, %s of capacity like every healthy origin: demand exceeds capacity", rate(load), pct(t.overcommit))
	case t.full(j):
		fmt.Fprintf(&b, "target %s/s: full, the rest spills to the next closest", rate(load))
	default:
		fmt.Fprintf(&b, "target %s/s: room for %s/s more", rate(load), rate(limit-load))
	}
	return b.String()
}

// maxNamed is how many closer full origins a reason names.
const maxNamed = 3

// siteReasons is what the reasons of one site's shares have in common.
type siteReasons struct {
	x       *indexed
	t       *target
	i       int
	closest int   // the closest usable origin, -1 when none
	usable  []int // by name
}

func siteWhy(x *indexed, t *target, i int, byName []int) siteReasons {
	w := siteReasons{x: x, t: t, i: i, closest: -1}
	for _, j := range byName {
		if t.usable(x, i, j) {
			w.usable = append(w.usable, j)
			if w.closest < 0 || w.rtt(j) < w.rtt(w.closest) {
				w.closest = j
			}
		}
	}
	return w
}

func (w siteReasons) rtt(j int) time.Duration { return w.x.obs.Sites[w.i].RTT[w.x.obs.Origins[j].Name] }

// share is why the target gives site i what it gives origin j.
func (w siteReasons) share(j int) string {
	x, t, i := w.x, w.t, w.i
	s, o := x.obs.Sites[i], x.obs.Origins[j]
	if !o.Healthy {
		return fmt.Sprintf("%s unhealthy: none of %s's flows", o.Name, s.Name)
	}
	rtt, reachable := s.RTT[o.Name]
	if !reachable {
		return fmt.Sprintf("%s unreachable from %s (no RTT measured)", o.Name, s.Name)
	}
	if !t.has[i] {
		return fmt.Sprintf("no healthy origin reachable from %s: shares left as they are", s.Name)
	}
	shares := t.share[i*x.nO : (i+1)*x.nO]
	share, closest := shares[j], w.closest
	extra := ms(rtt - w.rtt(closest))
	switch {
	case share > 0 && j == closest && share > 1-1e-9:
		return fmt.Sprintf("closest healthy origin (%s) with room: all of %s", msText(rtt), s.Name)
	case share > 0 && j == closest:
		return fmt.Sprintf("closest healthy origin (%s), full at %s/s: %s of %s here, the rest spilled",
			msText(rtt), rate(t.limit[j]), pct(share), s.Name)
	case share > 0:
		var fuller []string
		for _, k := range w.usable {
			if w.rtt(k) < rtt && t.full(k) {
				fuller = append(fuller, fmt.Sprintf("%s at capacity %s/s", x.obs.Origins[k].Name, rate(t.limit[k])))
			}
		}
		if len(fuller) == 0 {
			return fmt.Sprintf("%s of %s to %s, +%.0f ms", pct(share), s.Name, o.Name, extra)
		}
		if len(fuller) > maxNamed {
			// a site of a hundred origins may pass dozens of full ones
			fuller = append(fuller[:maxNamed], fmt.Sprintf("%d more closer ones", len(fuller)-maxNamed))
		}
		return fmt.Sprintf("%s: %s of %s spilled to %s, +%.0f ms", strings.Join(fuller, ", "), pct(share), s.Name, o.Name, extra)
	case slices.ContainsFunc(w.usable, func(k int) bool { return shares[k] > 0 && w.rtt(k) > rtt }):
		return fmt.Sprintf("%s at capacity %s/s with sites that would lose more RTT elsewhere: none of %s", o.Name, rate(t.limit[j]), s.Name)
	default:
		return fmt.Sprintf("not needed: %s is closer by %.0f ms and has room", x.obs.Origins[closest].Name, extra)
	}
}

// rate prints flows per second: whole above 10, one decimal below.
func rate(v float64) string {
	if math.Abs(v) >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// pct prints a fraction as a percentage.
func pct(f float64) string {
	if v := f * 100; math.Abs(v-math.Round(v)) < 0.05 || math.Abs(v) >= 10 {
		return fmt.Sprintf("%.0f %%", v)
	}
	return fmt.Sprintf("%.1f %%", f*100)
}

func msText(d time.Duration) string { return fmt.Sprintf("%.0f ms", ms(d)) }
