package steer

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// decide assembles a Decision from the new shares, saying for each share why its target
// is what it is and, through moving, how the controller approaches it.
func decide(obs Observation, t Target, next Shares, moving func(cur, next, target float64) string, current Shares) Decision {
	d := Decision{Note: t.Note}
	predicted := map[string]float64{}
	for _, s := range obs.Sites {
		for o, v := range next[s.Name] {
			predicted[o] += v * s.Demand
		}
	}
	origins := map[string]Origin{}
	for _, o := range obs.Origins {
		origins[o.Name] = o
		d.Origins = append(d.Origins, OriginDecision{
			Origin: o.Name, Healthy: o.Healthy, Capacity: o.Capacity, Load: o.Load,
			TargetLoad: t.Load[o.Name], PredictedLoad: predicted[o.Name],
			Reason: originReason(o, t),
		})
	}
	for _, s := range obs.Sites {
		sd := SiteDecision{Site: s.Name, Demand: s.Demand}
		for _, o := range obs.Origins {
			share, target := next[s.Name][o.Name], t.Shares[s.Name][o.Name]
			reason := shareReason(s, o, t)
			if _, ok := t.Shares[s.Name]; ok && math.Abs(share-target) > 0.0005 {
				reason += "; " + moving(current[s.Name][o.Name], share, target)
			}
			sd.Shares = append(sd.Shares, ShareDecision{
				Origin: o.Name, Share: share, Target: target, Load: o.Load, Capacity: o.Capacity,
				RTTMs: ms(s.RTT[o.Name]), Reason: reason,
			})
		}
		d.Sites = append(d.Sites, sd)
	}
	return d
}

func originReason(o Origin, t Target) string {
	if !o.Healthy {
		return "unhealthy (no healthy backend, no connector attached): gets no flows, at once"
	}
	limit, load := t.Limit[o.Name], t.Load[o.Name]
	var b strings.Builder
	fmt.Fprintf(&b, "observed %s/s of capacity %s/s; ", rate(o.Load), rate(o.Capacity))
	switch {
	case t.Overcommit > 1:
		fmt.Fprintf(&b, "target %s/s, %s of capacity like every healthy origin: demand exceeds capacity", rate(load), pct(t.Overcommit))
	case load >= limit-epsilon(limit)-1e-6*limit:
		fmt.Fprintf(&b, "target %s/s: full, the rest spills to the next closest", rate(load))
	default:
		fmt.Fprintf(&b, "target %s/s: room for %s/s more", rate(load), rate(limit-load))
	}
	return b.String()
}

func shareReason(s Site, o Origin, t Target) string {
	if !o.Healthy {
		return fmt.Sprintf("%s unhealthy: none of %s's flows", o.Name, s.Name)
	}
	rtt, reachable := s.RTT[o.Name]
	if !reachable {
		return fmt.Sprintf("%s unreachable from %s (no RTT measured)", o.Name, s.Name)
	}
	shares, ok := t.Shares[s.Name]
	if !ok {
		return fmt.Sprintf("no healthy origin reachable from %s: shares left as they are", s.Name)
	}
	var closest string
	var used []string
	for _, other := range usableNames(s, t) {
		if closest == "" || s.RTT[other] < s.RTT[closest] {
			closest = other
		}
		if shares[other] > 0 {
			used = append(used, other)
		}
	}
	share := shares[o.Name]
	extra := ms(rtt - s.RTT[closest])
	full := func(name string) bool { return t.Load[name] >= t.Limit[name]-epsilon(t.Limit[name])-1e-6*t.Limit[name] }
	switch {
	case share > 0 && o.Name == closest && share > 1-1e-9:
		return fmt.Sprintf("closest healthy origin (%s) with room: all of %s", msText(rtt), s.Name)
	case share > 0 && o.Name == closest:
		return fmt.Sprintf("closest healthy origin (%s), full at %s/s: %s of %s here, the rest spilled",
			msText(rtt), rate(t.Limit[o.Name]), pct(share), s.Name)
	case share > 0:
		var fuller []string
		for _, other := range usableNames(s, t) {
			if s.RTT[other] < rtt && full(other) {
				fuller = append(fuller, fmt.Sprintf("%s at capacity %s/s", other, rate(t.Limit[other])))
			}
		}
		if len(fuller) == 0 {
			return fmt.Sprintf("%s of %s to %s, +%.0f ms", pct(share), s.Name, o.Name, extra)
		}
		return fmt.Sprintf("%s: %s of %s spilled to %s, +%.0f ms", strings.Join(fuller, ", "), pct(share), s.Name, o.Name, extra)
	case slices.ContainsFunc(used, func(u string) bool { return s.RTT[u] > rtt }):
		return fmt.Sprintf("%s at capacity %s/s with sites that would lose more RTT elsewhere: none of %s", o.Name, rate(t.Limit[o.Name]), s.Name)
	default:
		return fmt.Sprintf("not needed: %s is closer by %.0f ms and has room", closest, extra)
	}
}

// usableNames are the healthy origins s reaches, as the target saw them.
func usableNames(s Site, t Target) []string {
	var out []string
	for name := range t.Limit {
		if _, ok := s.RTT[name]; ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
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
