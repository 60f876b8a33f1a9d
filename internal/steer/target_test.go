package steer

import (
	"math"
	"strings"
	"testing"
	"time"
)

// twoOrigins is the seed's fleet: a close origin of 200/s, a far one of 1000/s.
func twoOrigins(demand float64, usHealthy bool) Observation {
	return Observation{
		Origins: []Origin{{Name: "us", Capacity: 200, Healthy: usHealthy}, {Name: "eu", Capacity: 1000, Healthy: true}},
		Sites:   []Site{{Name: "sjc", Demand: demand, RTT: map[string]time.Duration{"us": 10 * time.Millisecond, "eu": 150 * time.Millisecond}}},
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestTargetClosestFirst(t *testing.T) {
	tg := SolveTarget(twoOrigins(150, true))
	if got := tg.Shares["sjc"]; !near(got["us"], 1) || !near(got["eu"], 0) {
		t.Fatalf("shares %v, want all on us (closest, with room)", got)
	}
	if tg.Note != "" {
		t.Errorf("note %q, want none", tg.Note)
	}
}

func TestTargetSpillsExactlyAtCapacity(t *testing.T) {
	tg := SolveTarget(twoOrigins(400, true))
	if got := tg.Shares["sjc"]; !near(got["us"], 0.5) || !near(got["eu"], 0.5) {
		t.Fatalf("shares %v, want us 0.5 (200 of 400), eu 0.5", got)
	}
	if !near(tg.Load["us"], 200) || !near(tg.Load["eu"], 200) {
		t.Errorf("loads %v, want us 200 (its capacity), eu 200", tg.Load)
	}
	d := Manifold{}.Decide(time.Time{}, twoOrigins(400, true), tg.Shares).Explain()
	want := "us at capacity 200/s: 50 % of sjc spilled to eu, +140 ms"
	if r := d.Sites[0].Shares[1].Reason; r != want {
		t.Errorf("eu's reason %q, want %q", r, want)
	}
}

// Two sites compete for one origin: the one that would lose more RTT elsewhere keeps
// it, whatever the order — a greedy closest-first by site would give it to the first.
func TestTargetMinimisesFlowWeightedRTT(t *testing.T) {
	ms := time.Millisecond
	for _, order := range [][]Site{
		{{Name: "a", Demand: 100, RTT: map[string]time.Duration{"us": 10 * ms, "eu": 20 * ms}}, {Name: "b", Demand: 100, RTT: map[string]time.Duration{"us": 10 * ms, "eu": 150 * ms}}},
		{{Name: "b", Demand: 100, RTT: map[string]time.Duration{"us": 10 * ms, "eu": 150 * ms}}, {Name: "a", Demand: 100, RTT: map[string]time.Duration{"us": 10 * ms, "eu": 20 * ms}}},
	} {
		obs := Observation{Origins: []Origin{{Name: "us", Capacity: 100, Healthy: true}, {Name: "eu", Capacity: 1000, Healthy: true}}, Sites: order}
		tg := SolveTarget(obs)
		if !near(tg.Shares["b"]["us"], 1) || !near(tg.Shares["a"]["eu"], 1) {
			t.Errorf("sites in order %s, %s: shares %v, want b on us, a on eu", order[0].Name, order[1].Name, tg.Shares)
		}
	}
}

func TestTargetSpreadsExcessInProportionToCapacity(t *testing.T) {
	tg := SolveTarget(twoOrigins(1800, true))
	if !near(tg.Load["us"], 300) || !near(tg.Load["eu"], 1500) {
		t.Fatalf("loads %v, want 150 %% of each capacity: us 300, eu 1500", tg.Load)
	}
	if !near(tg.Overcommit, 1.5) || !strings.Contains(tg.Note, "exceeds healthy capacity 1200/s") {
		t.Errorf("overcommit %v, note %q: want 1.5 and a note saying demand exceeds capacity", tg.Overcommit, tg.Note)
	}
}

func TestTargetGivesUnhealthyOriginNothing(t *testing.T) {
	tg := SolveTarget(twoOrigins(150, false))
	if got := tg.Shares["sjc"]; got["us"] != 0 || !near(got["eu"], 1) {
		t.Fatalf("shares %v, want us 0 (unhealthy), eu 1", got)
	}
}

func TestTargetSiteWithoutDemandPointsAtClosestWithRoom(t *testing.T) {
	obs := twoOrigins(400, true)
	obs.Sites = append(obs.Sites, Site{Name: "sea", RTT: obs.Sites[0].RTT})
	tg := SolveTarget(obs)
	if got := tg.Shares["sea"]; !near(got["eu"], 1) {
		t.Fatalf("idle site's shares %v, want eu: us is full", got)
	}
}
