// Package clock is the time source of the control plane: health-check intervals, the
// BGP drain timer and the rate sampler read time through a Clock, so that unit tests
// drive time with a Fake and wait on events instead of sleeping.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer behind an interface.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Sleep waits d on c, or until done is closed; it reports whether the whole d passed.
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

// WatchStalls reports the times the process did not run: it wakes every interval and
// calls stalled with the time since its last wake-up whenever that exceeds after (a
// SIGSTOP and SIGCONT, a VM paused, a machine starved of CPU). A goroutine that
// stalls for itself is not one: only a gap in the whole process's time is. It returns
// when stop is closed. stalled runs on the watch's goroutine.
func WatchStalls(c Clock, every, after time.Duration, stop <-chan struct{}, stalled func(gap time.Duration)) {
	NewStallMeter(c, every).watch(stop, after, stalled)
}

// Watch is WatchStalls on m: the stalls it reports are also the meter's (Stalled), for
// the failure detectors of the same process.
func (m *StallMeter) Watch(stop <-chan struct{}, after time.Duration, stalled func(gap time.Duration)) {
	m.watch(stop, after, stalled)
}
