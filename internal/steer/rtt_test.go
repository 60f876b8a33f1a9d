package steer

import (
	"math"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// The RTT a node publishes is an average over its successful health checks, one sample
// per check however often the record is built; failed checks and kind none add
// nothing; each service's backend has its own; a backend gone forgets its average.
func TestRTTs(t *testing.T) {
	b := func(checks uint64, ms float64, lastError string) wire.BackendStatus {
		return wire.BackendStatus{Address: "10.1.0.11", Health: wire.BackendHealth{Check: "tcp://10.1.0.11:80", Checks: checks, LatencySeconds: ms / 1000, LastError: lastError}}
	}
	web := func(bs ...wire.BackendStatus) []wire.ServiceStatus {
		return []wire.ServiceStatus{{Name: "web", Backends: bs}}
	}
	steps := []struct {
		backend wire.BackendStatus
		want    float64
	}{
		{b(0, 0, ""), 0},               // not checked yet
		{b(1, 40, ""), 40},             // the first sample is the average
		{b(1, 40, ""), 40},             // the same check, seen again: no new sample
		{b(2, 80, ""), 50},             // 40 + ¼·(80 − 40)
		{b(3, 500, "i/o timeout"), 50}, // a failed check is no round trip
		{b(5, 10, ""), 40},             // 50 + ¼·(10 − 50); checks missed between records do not count
		{b(6, 1040, ""), 290},          // 40 + ¼·1000: one outlier moves it by a quarter
		{b(7, 290, "refused"), 290},    //
		{b(8, 290, ""), 290},           //
	}
	var rtt RTTs
	for i, s := range steps {
		rtt.Observe(web(s.backend))
		if got := rtt.Of("web", "10.1.0.11"); math.Abs(got-s.want) > 1e-9 {
			t.Fatalf("step %d: %v ms, want %v", i, got, s.want)
		}
	}

	// a step of the path's RTT shows in the average within ten checks (95 %)
	for i := uint64(9); i < 19; i++ {
		rtt.Observe(web(b(i, 100, "")))
	}
	if got := rtt.Of("web", "10.1.0.11"); got > 100+0.06*190 {
		t.Errorf("after ten checks at 100 ms the average is %v ms", got)
	}

	// the same address in another service is another check: its own average
	rtt.Observe(append(web(b(19, 100, "")), wire.ServiceStatus{Name: "api", Backends: []wire.BackendStatus{b(1, 7, "")}}))
	if got := rtt.Of("api", "10.1.0.11"); got != 7 {
		t.Errorf("another service's backend at the same address: %v ms, want 7", got)
	}

	// a backend gone from the status takes its average with it
	rtt.Observe(web())
	rtt.Observe(web(b(20, 10, "")))
	if got := rtt.Of("web", "10.1.0.11"); got != 10 {
		t.Errorf("a backend back after it was gone: %v ms, want 10 (a fresh average)", got)
	}

	var none RTTs
	none.Observe(web(wire.BackendStatus{Address: "10.1.0.11", Health: wire.BackendHealth{Check: "none", Up: true}}))
	if got := none.Of("web", "10.1.0.11"); got != 0 {
		t.Errorf("a check of kind none measured %v ms", got)
	}
}
