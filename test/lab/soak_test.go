package lab

import (
	"context"
	"flag"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// TestSoak is the chaos soak of `make soak` at the size of `make test`: 20 rounds of
// faults drawn from -soak.seed (fixed, so that make test draws the same faults every
// time; the timing of what they cause still varies). It asserts the goals, counts of
// events and never durations: no long-lived connection broken whose node and backend
// survived, no acknowledged write lost, the surviving processes' growth bounded.
var (
	soakSeed   = flag.Uint64("soak.seed", 25, "TestSoak: the seed of the faults")
	soakRounds = flag.Int("soak.rounds", 20, "TestSoak: rounds")
)

func TestSoak(t *testing.T) {
	if err := hostprog.Check(hostprog.Etcd); err != nil {
		t.Skip(err)
	}
	a := newActiveActive(t, SoakTopology())
	t.Logf("soak: seed %d, %d rounds (replay: go test ./test/lab -run TestSoak -args -soak.seed %d)", *soakSeed, *soakRounds, *soakSeed)
	r, err := RunSoak(context.Background(), a, SoakSpec{Rounds: *soakRounds, Seed: *soakSeed, Conns: 200, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("soak report:\n%s", r.Markdown())
	for _, f := range r.Failures() {
		t.Error(f)
	}
	if r.Writes.Acked == 0 {
		t.Errorf("no API write was acknowledged in %d rounds: the soak checked no write", r.Rounds)
	}
	faults := 0
	for _, c := range r.Classes {
		if c.Name == SoakNodeKill || c.Name == SoakNodeStop {
			faults += c.Rounds
		}
	}
	if faults == 0 {
		t.Errorf("no node failed in %d rounds (seed %d): the soak tested no takeover", r.Rounds, r.Seed)
	}
}
