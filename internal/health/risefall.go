package health

// RiseFall judges a target by its consecutive results, the state machine of the
// health checks and of link's probes: up after Rise successes in a row, and once up,
// down after Fall failures in a row. A new RiseFall is unknown and not up; its first
// failure makes it known down, its Rise-th success in a row known up. Rise and Fall
// below 1 count as 1. The zero value with Rise and Fall set is ready; the caller
// guards it.
type RiseFall struct {
	Rise, Fall int
	up, known  bool
	stale      bool // Forget: the next result decides, either way
	succ, fail int  // the current run of successes or failures (one of them 0)
}

// Record takes one result; it reports whether the state changed or became known.
func (r *RiseFall) Record(ok bool) (changed bool) {
	if r.stale {
		r.stale, r.known, r.up = false, true, ok
		r.succ, r.fail = 0, 0
		if ok {
			r.succ = 1
		} else {
			r.fail = 1
		}
		return true
	}
	if ok {
		r.succ++
		r.fail = 0
		if !r.up && r.succ >= max(r.Rise, 1) {
			r.up, r.known = true, true
			return true
		}
		return false
	}
	r.fail++
	r.succ = 0
	if (r.up && r.fail >= max(r.Fall, 1)) || !r.known {
		r.up, r.known = false, true
		return true
	}
	return false
}

// Assume sets the state known, without a result: a target without a check, or one
// whose state carries over from before.
func (r *RiseFall) Assume(up bool) { r.up, r.known = up, true }

// Forget makes a known state stale: unknown again, though Up still answers the state
// it had (the best guess until a result comes), and the next result decides it either
// way, without Rise or Fall. It is for a state that may be out of date because no
// check ran for a while (the process was stopped): the hysteresis that guards a
// fresh run of results does not apply to an old one. It does nothing to a state not
// known yet.
func (r *RiseFall) Forget() {
	if r.known {
		r.known, r.stale = false, true
		r.succ, r.fail = 0, 0
	}
}

// Up reports whether the target is up (false until known; the last known state while
// stale).
func (r *RiseFall) Up() bool { return r.up }

// Known reports whether the state is known: Rise successes, a failure, or Assume.
func (r *RiseFall) Known() bool { return r.known }

// Successes and Failures are the current run of consecutive results (one of them 0).
func (r *RiseFall) Successes() int { return r.succ }
func (r *RiseFall) Failures() int  { return r.fail }
