package steer

import (
	"testing"
)

// oneSite is a series of one site and two origins, us (10 ms) and eu (150 ms), with the
// given us share (eu takes the rest).
func oneSite(t, changes, us []float64) Series {
	eu := make([]float64, len(us))
	flat := make([]float64, len(us))
	healthy := make([]bool, len(us))
	for i := range us {
		eu[i], flat[i], healthy[i] = 1-us[i], 100, true
	}
	return Series{
		StepS: 1, T: t, Changes: changes,
		Origins: []OriginSeries{
			{Name: "us", Load: flat, Capacity: flat, Healthy: healthy},
			{Name: "eu", Load: make([]float64, len(us)), Capacity: flat, Healthy: healthy},
		},
		Sites: []SiteSeries{{Name: "sjc", RTTMs: map[string]float64{"us": 10, "eu": 150},
			Offered: flat, Demand: flat, Shares: map[string][]float64{"us": us, "eu": eu}}},
	}
}

func seconds(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}

func TestConvergedIsTheWorstPhase(t *testing.T) {
	// phase [0,5) ends at 0.6, reached for good at t=4; phase [5,10) ends at 0.2,
	// within a point of it from t=7 (0.205), 2 s after its change.
	s := oneSite(seconds(10), []float64{0, 5}, []float64{1, 1, 1, 0.7, 0.6, 0.6, 0.3, 0.205, 0.2, 0.2})
	if got := Summarize(s).ConvergedS; got != 4 {
		t.Fatalf("converged_s %v, want 4", got)
	}
}

func TestOscillationsCountReversalsWithinAPhase(t *testing.T) {
	us := []float64{0, 0.1, 0.05, 0.052, 0.1, 0.1}
	// us: +10, -5 (a reversal), +0.2 (too small to count), +4.8 (a reversal): 2; eu
	// mirrors it: 2 more.
	if got := Summarize(oneSite(seconds(6), []float64{0}, us)).Oscillations; got != 4 {
		t.Fatalf("one phase: %d oscillations, want 4", got)
	}
	// A change at t=3: moving back after the scenario changed is not an oscillation.
	if got := Summarize(oneSite(seconds(6), []float64{0, 3}, us)).Oscillations; got != 2 {
		t.Fatalf("two phases: %d oscillations, want 2", got)
	}
}

func TestExcessAndOverload(t *testing.T) {
	s := oneSite([]float64{0, 20, 40, 60}, []float64{0}, []float64{1, 1, 1, 1})
	s.StepS = 20
	s.Origins[0] = OriginSeries{Name: "us", Load: []float64{300, 300, 250, 210},
		Capacity: []float64{200, 200, 200, 200}, Healthy: []bool{true, true, true, false}}
	sum := Summarize(s)
	// (100 + 100 + 50 + all 210 of the unhealthy origin's) × 20 s.
	if sum.ExcessFlows != 9200 {
		t.Errorf("excess_flows %v, want 9200", sum.ExcessFlows)
	}
	// t=0 and t=20 are within 30 s of the start; t=60's origin is unhealthy.
	if sum.MaxOverloadPct != 25 {
		t.Errorf("max_overload_pct %v, want 25", sum.MaxOverloadPct)
	}
}

func TestMeanRTTAndServed(t *testing.T) {
	s := oneSite(seconds(2), []float64{0}, []float64{1, 0.5})
	s.Sites[0].Offered = []float64{200, 200}
	s.Origins[0] = OriginSeries{Name: "us", Load: []float64{100, 50}, Capacity: []float64{80, 80}, Healthy: []bool{true, true}}
	s.Origins[1] = OriginSeries{Name: "eu", Load: []float64{0, 50}, Capacity: []float64{1000, 1000}, Healthy: []bool{true, true}}
	sum := Summarize(s)
	// (100×10 + 50×10 + 50×150) / 200 flows.
	if sum.MeanRTTMs != 45 {
		t.Errorf("mean_rtt_ms %v, want 45", sum.MeanRTTMs)
	}
	// 80 + 50 + 50 served of 400 offered.
	if sum.ServedPct != 45 {
		t.Errorf("served_pct %v, want 45", sum.ServedPct)
	}
}
