package steer

import (
	"strings"
	"testing"
)

const goodScenario = `duration: 60s
step: 1s
elasticity: 0.2
origins:
  - {name: us, capacity: 200}
  - {name: eu, capacity: 1000}
sites:
  - name: sjc
    rtt: {us: 10ms, eu: 150ms}
    demand: [{at: 0s, rate: 0}, {at: 10s, rate: 400}]
events:
  - {at: 30s, origin: us, capacity: 100}
  - {at: 40s, origin: eu, healthy: false}
`

func TestScenarioParses(t *testing.T) {
	sc, err := ParseScenario("bench/x.yaml", []byte(goodScenario))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "x" || len(sc.Origins) != 2 || !sc.Origins[0].Healthy || sc.Sites[0].Demand[1].Rate != 400 ||
		*sc.Events[0].Capacity != 100 || *sc.Events[1].Healthy {
		t.Fatalf("parsed %+v", sc)
	}
}

// Every bad scenario is refused with an error that names the field (and its line).
func TestScenarioErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{"duration: 60s\n", "", "x.yaml: duration: is required"},
		{"step: 1s", "step: 1x", `x.yaml:2: step: "1x" is not a duration`},
		{"step: 1s", "step: 1ns", "step: 1ns over 1m0s is more than"},
		{"elasticity: 0.2", "elasticity: 2", "x.yaml:3: elasticity: 2 is not within 0 to 1"},
		{"{name: eu, capacity: 1000}", "{name: us, capacity: 1000}", `origins[1].name: "us" is used twice`},
		{"{name: us, capacity: 200}", "{name: us, capacity: lots}", `origins[0].capacity: "lots" is not a number`},
		{"{name: us, capacity: 200}", "{name: us, capacity: -1}", "origins[0].capacity: -1 is below 0"},
		{"{name: us, capacity: 200}", "{name: us}", "origins[0].capacity: is required"},
		{"eu: 150ms}", "eu: 150ms, asia: 90ms}", `sites[0].rtt.asia: no origin is named "asia"`},
		{"eu: 150ms}", "}", `x.yaml:8: sites[0].rtt: no RTT to origin "eu"`},
		{"{at: 10s, rate: 400}", "{at: 0s, rate: 400}", "sites[0].demand[1].at: 0s is not after the previous step's 0s"},
		{"{at: 10s, rate: 400}", "{at: 90s, rate: 400}", "sites[0].demand[1].at: 1m30s is not within the scenario's 0s to 1m0s"},
		{"origin: us, capacity: 100", "origin: mars, capacity: 100", `events[0].origin: no origin is named "mars"`},
		{"origin: us, capacity: 100", "origin: us", "events[0]: changes nothing"},
		{"origin: eu, healthy: false", "origin: eu, healthy: maybe", `events[1].healthy: "maybe" is not true or false`},
		{"elasticity: 0.2", "elasticity: 0.2\nbogus: 1", "field bogus not found"},
	} {
		data := strings.Replace(goodScenario, tc.old, tc.new, 1)
		if data == goodScenario {
			t.Fatalf("%q is not in the scenario", tc.old)
		}
		_, err := ParseScenario("x.yaml", []byte(data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("replacing %q by %q: error %v, want one containing %q", tc.old, tc.new, err, tc.want)
		}
	}
}

// A world: section generates the origins and sites (steer.World); it stands for them,
// and its bounds are checked like any field's.
func TestScenarioWorld(t *testing.T) {
	const world = "duration: 60s\nstep: 1s\nworld: {sites: 30, origins: 7, seed: 2}\nevents:\n  - {at: 30s, origin: origin003, healthy: false}\n"
	sc, err := ParseScenario("w.yaml", []byte(world))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Sites) != 30 || len(sc.Origins) != 7 || len(sc.Sites[29].RTT) != 7 || sc.Sites[0].Demand[0].Rate <= 0 || sc.Origins[6].Capacity <= 0 {
		t.Fatalf("parsed %d sites, %d origins: %+v", len(sc.Sites), len(sc.Origins), sc.Sites[0])
	}
	again, _ := ParseScenario("w.yaml", []byte(world))
	if again.Sites[17].RTT["origin005"] != sc.Sites[17].RTT["origin005"] {
		t.Error("the same seed gave another world")
	}
	for _, tc := range []struct{ old, new, want string }{
		{"sites: 30", "sites: 0", `w.yaml:3: world.sites: "0" is not a whole number within 1 to 10000`},
		{"origins: 7", "origins: 2.5", `world.origins: "2.5" is not a whole number`},
		{"sites: 30, origins: 7", "sites: 10000, origins: 1000", "is more than 1000000 RTTs"},
		{"seed: 2", "seed: -1", "world.seed: -1 is not a whole number"},
		{"seed: 2}", "seed: 2}\norigins: [{name: a, capacity: 1}]", "world: stands for origins and sites"},
		{"origin003", "origin007", `events[0].origin: no origin is named "origin007"`},
	} {
		data := strings.Replace(world, tc.old, tc.new, 1)
		if _, err := ParseScenario("w.yaml", []byte(data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("replacing %q by %q: error %v, want one containing %q", tc.old, tc.new, err, tc.want)
		}
	}
}
