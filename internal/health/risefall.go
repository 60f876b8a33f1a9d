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
	succ, fail int // the current run of successes or failures (one of them 0)
}

// Record takes one result; it reports whether the state changed or became known.
func (r *RiseFall) Record(ok bool) (changed bool) {
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

// Up reports whether the target is up (false until known).
func (r *RiseFall) Up() bool { return r.up }

// Known reports whether the state is known: Rise successes, a failure, or Assume.
func (r *RiseFall) Known() bool { return r.known }

// Successes and Failures are the current run of consecutive results (one of them 0).
func (r *RiseFall) Successes() int { return r.succ }
func (r *RiseFall) Failures() int  { return r.fail }
