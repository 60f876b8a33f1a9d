package fleet

import (
	"reflect"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// A rate or RTT keeps the value last published while it stays within its deadband of
// it (the band is around what was published, so a slow drift is published once it
// leaves it); one that leaves the band, becomes 0 or leaves 0 is published as it is;
// an entry the last record did not have is published as it is.
func TestHoldSteady(t *testing.T) {
	last := []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: 100, PacketsPerSecond: 1000,
		Origins:  []wire.OriginLoad{{Name: "us", NewFlowsPerSecond: 60, RTTMilliseconds: 20}, {Name: "eu", NewFlowsPerSecond: 40, RTTMilliseconds: 90}},
		Backends: []wire.BackendLoad{{Address: "10.1.0.11", NewFlowsPerSecond: 3, RTTMilliseconds: 1}}}}
	next := []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: 101.9, PacketsPerSecond: 1021,
		// eu first: matched by name, not place
		Origins: []wire.OriginLoad{{Name: "eu", NewFlowsPerSecond: 40.3, RTTMilliseconds: 0}, {Name: "us", NewFlowsPerSecond: 0, RTTMilliseconds: 20.35},
			{Name: "ap", NewFlowsPerSecond: 1.01, RTTMilliseconds: 150.1}},
		Backends: []wire.BackendLoad{{Address: "10.1.0.11", NewFlowsPerSecond: 3.4, RTTMilliseconds: 1.09}}},
		{Name: "api", NewFlowsPerSecond: 7.25}}
	HoldSteady(last, next)
	want := []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: 100, PacketsPerSecond: 1021, // 1.9 % held, 2.1 % not
		Origins: []wire.OriginLoad{{Name: "eu", NewFlowsPerSecond: 40, RTTMilliseconds: 0}, {Name: "us", NewFlowsPerSecond: 0, RTTMilliseconds: 20},
			{Name: "ap", NewFlowsPerSecond: 1.01, RTTMilliseconds: 150.1}},
		// 0.4/s and 0.09 ms: within the floors (13 % and 9 %)
		Backends: []wire.BackendLoad{{Address: "10.1.0.11", NewFlowsPerSecond: 3, RTTMilliseconds: 1}}},
		{Name: "api", NewFlowsPerSecond: 7.25}}
	if !reflect.DeepEqual(next, want) {
		t.Fatalf("held:\n%+v\nwant\n%+v", next, want)
	}
	// a drift of 1 % a step: held twice, published at the third (3 % from 100)
	pub := []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: 100}}
	for step, v := range []float64{101, 102, 103} {
		next := []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: v}}
		HoldSteady(pub, next)
		if want := map[bool]float64{true: 100, false: v}[step < 2]; next[0].NewFlowsPerSecond != want {
			t.Fatalf("step %d: %v published, want %v", step, next[0].NewFlowsPerSecond, want)
		}
		pub = next
	}
}
