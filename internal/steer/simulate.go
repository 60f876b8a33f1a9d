package steer

import (
	"slices"
	"time"
)

// Run is one controller over one scenario: the time series, its summary, and the
// controller's last decision with its reasons.
type Run struct {
	Algorithm string   `json:"algorithm"`
	Summary   Summary  `json:"summary"`
	Series    Series   `json:"series"`
	Final     Decision `json:"final"`
}

// Series is a run sampled once per step. Sample i is the interval [T[i], T[i]+step):
// the scenario as it stands at T[i], under the shares decided at the end of the
// previous interval.
type Series struct {
	StepS float64   `json:"step_s"`
	T     []float64 `json:"t"`
	// Changes are the times (s) from which a change of the scenario (a demand step,
	// an event) is in force, with 0 for the start: the bounds of its phases.
	Changes []float64      `json:"changes"`
	Origins []OriginSeries `json:"origins"`
	Sites   []SiteSeries   `json:"sites"`
}

// OriginSeries is one origin's load (new flows/s it was sent), capacity and health.
type OriginSeries struct {
	Name     string    `json:"name"`
	Load     []float64 `json:"load"`
	Capacity []float64 `json:"capacity"`
	Healthy  []bool    `json:"healthy"`
}

// SiteSeries is one site: its RTTs, the demand offered by the scenario, the demand
// that arrived (offered, less what the RTT discouraged) and its share to each origin.
type SiteSeries struct {
	Name    string               `json:"name"`
	RTTMs   map[string]float64   `json:"rtt_ms"`
	Offered []float64            `json:"offered"`
	Demand  []float64            `json:"demand"`
	Shares  map[string][]float64 `json:"shares"`
}

// epoch is the simulated clock's origin; only differences of time matter.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Simulate runs ctl over sc on a simulated clock: each step, the sites' demand under
// the shares in force (lowered by elasticity for their extra RTT) is sent to the
// origins, the controller observes that step and decides the shares of the next.
// The shares start where a fleet with no demand would have them: each site on its
// closest healthy origin.
func Simulate(sc *Scenario, ctl Controller) Run {
	n := int(sc.Duration / sc.Step)
	origins := make([]Origin, len(sc.Origins))
	for i, o := range sc.Origins {
		origins[i] = Origin{Name: o.Name, Capacity: o.Capacity, Healthy: o.Healthy}
	}
	series := Series{StepS: sc.Step.Seconds(), Changes: changes(sc)}
	for _, o := range origins {
		series.Origins = append(series.Origins, OriginSeries{Name: o.Name})
	}
	minRTT := make([]time.Duration, len(sc.Sites))
	for i, s := range sc.Sites {
		ss := SiteSeries{Name: s.Name, RTTMs: map[string]float64{}, Shares: map[string][]float64{}}
		minRTT[i] = -1
		for o, rtt := range s.RTT {
			ss.RTTMs[o] = ms(rtt)
			if minRTT[i] < 0 || rtt < minRTT[i] {
				minRTT[i] = rtt
			}
		}
		series.Sites = append(series.Sites, ss)
	}

	observe := func(demand []float64, load map[string]float64) Observation {
		obs := Observation{}
		for _, o := range origins {
			o.Load = load[o.Name]
			obs.Origins = append(obs.Origins, o)
		}
		for i, s := range sc.Sites {
			obs.Sites = append(obs.Sites, Site{Name: s.Name, Demand: demand[i], RTT: s.RTT})
		}
		return obs
	}
	shares := SolveTarget(observe(make([]float64, len(sc.Sites)), nil)).Shares

	var final Decision
	nextEvent := 0
	for i := range n {
		at := time.Duration(i) * sc.Step
		for ; nextEvent < len(sc.Events) && sc.Events[nextEvent].At <= at; nextEvent++ {
			ev := sc.Events[nextEvent]
			for j := range origins {
				if origins[j].Name != ev.Origin {
					continue
				}
				if ev.Capacity != nil {
					origins[j].Capacity = *ev.Capacity
				}
				if ev.Healthy != nil {
					origins[j].Healthy = *ev.Healthy
				}
			}
		}
		demand := make([]float64, len(sc.Sites))
		load := map[string]float64{}
		series.T = append(series.T, at.Seconds())
		for si, s := range sc.Sites {
			offered := offeredAt(s.Demand, at)
			var mean, sum float64
			for o, v := range shares[s.Name] {
				mean += v * ms(s.RTT[o])
				sum += v
			}
			extra := 0.0
			if sum > 0 {
				extra = mean/sum - ms(minRTT[si])
			}
			demand[si] = offered * max(0, 1-sc.Elasticity*extra/100)
			ss := &series.Sites[si]
			ss.Offered = append(ss.Offered, offered)
			ss.Demand = append(ss.Demand, demand[si])
			for _, o := range origins {
				v := shares[s.Name][o.Name]
				ss.Shares[o.Name] = append(ss.Shares[o.Name], v)
				load[o.Name] += v * demand[si]
			}
		}
		for j, o := range origins {
			og := &series.Origins[j]
			og.Load = append(og.Load, load[o.Name])
			og.Capacity = append(og.Capacity, o.Capacity)
			og.Healthy = append(og.Healthy, o.Healthy)
		}
		final = ctl.Decide(epoch.Add(at), observe(demand, load), shares)
		shares = final.Shares()
	}
	return Run{Algorithm: ctl.Name(), Summary: Summarize(series), Series: series, Final: final.Explain()}
}

// offeredAt is the rate of the last demand step at or before at, 0 before the first.
func offeredAt(steps []DemandStep, at time.Duration) float64 {
	rate := 0.0
	for _, d := range steps {
		if d.At <= at {
			rate = d.Rate
		}
	}
	return rate
}

// changes are the times from which each demand step and event is in force: the first
// sample at or after it.
func changes(sc *Scenario) []float64 {
	onGrid := func(at time.Duration) float64 {
		k := (at + sc.Step - 1) / sc.Step
		return (k * sc.Step).Seconds()
	}
	out := []float64{0}
	for _, s := range sc.Sites {
		for _, d := range s.Demand {
			out = append(out, onGrid(d.At))
		}
	}
	for _, e := range sc.Events {
		out = append(out, onGrid(e.At))
	}
	slices.Sort(out)
	out = slices.Compact(out)
	for len(out) > 0 && out[len(out)-1] >= sc.Duration.Seconds() {
		out = out[:len(out)-1]
	}
	return out
}
