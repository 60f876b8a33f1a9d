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

// Forget: a stale state keeps its guess until the next result, which decides it at once
// either way (a Rise of 3 or a Fall of 3 would otherwise hold the old state for three
// more checks); a state never known is left alone.
func TestRiseFallForget(t *testing.T) {
	up := RiseFall{Rise: 3, Fall: 3}
	for range 3 {
		up.Record(true)
	}
	up.Forget()
	if up.Known() || !up.Up() {
		t.Fatalf("forgotten up state: known %v up %v, want unknown, still up", up.Known(), up.Up())
	}
	if !up.Record(false) || up.Up() || !up.Known() || up.Failures() != 1 {
		t.Fatalf("one failure after Forget: up %v known %v failures %d, want known down", up.Up(), up.Known(), up.Failures())
	}
	// the next result is an ordinary one again: Rise successes to come back
	if up.Record(true) || up.Up() {
		t.Fatal("a single success after the deciding failure brought the target up")
	}

	down := RiseFall{Rise: 3, Fall: 3}
	down.Record(false)
	down.Forget()
	if !down.Record(true) || !down.Up() || !down.Known() {
		t.Fatalf("one success after Forget of a down state: up %v known %v, want known up", down.Up(), down.Known())
	}
	confirmed := RiseFall{Rise: 3, Fall: 3}
	confirmed.Assume(true)
	confirmed.Forget()
	if !confirmed.Record(true) || !confirmed.Up() || !confirmed.Known() {
		t.Fatal("a success after Forget did not report the state known again")
	}

	var never RiseFall
	never.Rise, never.Fall = 2, 2
	never.Forget()
	if never.Record(true) || never.Known() {
		t.Fatal("Forget of a state never known let one success decide it")
	}
}
