package datapath

import "testing"

// Every drop reason and event the program counts has a name of its own for metrics.
func TestCountersAllNamed(t *testing.T) {
	seen := map[string]bool{}
	named := func(kind, name string, ok bool, n uint32) {
		switch {
		case !ok:
			t.Errorf("%s %d has no name", kind, n)
		case seen[name]:
			t.Errorf("%s %d: name %q taken twice", kind, n, name)
		}
		seen[name] = true
	}
	for r := lbLbDropReason(1); r < lbLbDropReasonLB_DROP_MAX; r++ {
		name, ok := dropReasonNames[r]
		named("drop reason", name, ok, uint32(r))
	}
	seen = map[string]bool{}
	for e := lbLbEvent(0); e < lbLbEventLB_EV_MAX; e++ {
		name, ok := eventNames[e]
		named("event", name, ok, uint32(e))
	}
}
