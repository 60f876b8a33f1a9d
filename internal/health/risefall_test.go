package health

import "testing"

// RiseFall: unknown until the first failure or Rise successes in a row; once up, down
// only after Fall failures in a row; a failure breaks a run of successes.
func TestRiseFall(t *testing.T) {
	r := RiseFall{Rise: 2, Fall: 3}
	steps := []struct {
		ok             bool
		changed, up    bool
		succ, failures int
	}{
		{true, false, false, 1, 0},  // one success: not yet known
		{false, true, false, 0, 1},  // a failure while unknown: known down at once
		{true, false, false, 1, 0},  // the run of successes starts over
		{true, true, true, 2, 0},    // Rise in a row: up
		{false, false, true, 0, 1},  // up: one failure is not Fall
		{false, false, true, 0, 2},  //
		{true, false, true, 1, 0},   // a success breaks the run of failures
		{false, false, true, 0, 1},  //
		{false, false, true, 0, 2},  //
		{false, true, false, 0, 3},  // Fall in a row: down
		{false, false, false, 0, 4}, // down stays down
	}
	for i, s := range steps {
		if changed := r.Record(s.ok); changed != s.changed || r.Up() != s.up || r.Successes() != s.succ || r.Failures() != s.failures || !r.Known() && i > 0 {
			t.Fatalf("step %d (ok %v): changed %v up %v known %v runs %d/%d, want changed %v up %v runs %d/%d",
				i, s.ok, changed, r.Up(), r.Known(), r.Successes(), r.Failures(), s.changed, s.up, s.succ, s.failures)
		}
	}
	var none RiseFall // Rise and Fall 0 count as 1
	if !none.Record(true) || !none.Up() || !none.Record(false) || none.Up() {
		t.Errorf("rise and fall 0: %+v", none)
	}
	assumed := RiseFall{Rise: 2, Fall: 2}
	assumed.Assume(false)
	if assumed.Record(false) || !assumed.Known() {
		t.Error("a failure of a target known down changed its state")
	}
}
