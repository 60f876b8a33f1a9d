package clock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Fake is a Clock that moves only when a test calls Advance. Timers and tickers fire
// (send on their channel, without blocking: a full channel drops the tick, as the
// runtime's do) when Advance passes their deadline; a timer of a non-positive
// duration fires at once, as the runtime's does.
//
// BlockUntil lets a test wait for the code under test to arm its timers before it
// advances time: the test waits on an event, never on a sleep.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeTimer
	armed   *sync.Cond
}

// NewFake returns a Fake that reads start.
func NewFake(start time.Time) *Fake {
	f := &Fake{now: start}
	f.armed = sync.NewCond(&f.mu)
	return f
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) Timer { return f.add(d, 0) }

func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	return fakeTicker{f.add(d, d)}
}

// fakeTicker is a periodic fakeTimer with a Ticker's Stop.
type fakeTicker struct{ t *fakeTimer }

func (t fakeTicker) C() <-chan time.Time { return t.t.c }
func (t fakeTicker) Stop()               { t.t.Stop() }

func (f *Fake) add(d, period time.Duration) *fakeTimer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: period}
	t.armLocked(d)
	return t
}

// Advance moves the clock by d, firing every timer and ticker due on the way, in the
// order of their deadlines.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.now.Add(d)
	for {
		slices.SortStableFunc(f.waiters, func(a, b *fakeTimer) int { return a.when.Compare(b.when) })
		if len(f.waiters) == 0 || f.waiters[0].when.After(end) {
			break
		}
		t := f.waiters[0]
		f.waiters = f.waiters[1:]
		f.now = t.when
		t.fireLocked()
		if t.period > 0 {
			t.armLocked(t.period)
		}
	}
	f.now = end
}

// Waiters is how many timers and tickers are armed now.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// BlockUntil returns once at least n timers or tickers are armed.
func (f *Fake) BlockUntil(n int) {
	_ = f.BlockUntilContext(context.Background(), n) // a background context is never done
}

// BlockUntilContext is BlockUntil bounded by ctx: it returns ctx's error when ctx is
// done first, so that a test whose code never arms its timer fails instead of hanging.
func (f *Fake) BlockUntilContext(ctx context.Context, n int) error {
	// The wake-up takes f.mu, so it cannot slip in between the check of ctx and Wait.
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.armed.Broadcast()
	})
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.waiters) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		f.armed.Wait()
	}
	return nil
}

// NextDeadline is when the earliest armed timer or ticker fires; false when none is
// armed. A test advances to it to fire exactly the next one.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiters) == 0 {
		return time.Time{}, false
	}
	return slices.MinFunc(f.waiters, func(a, b *fakeTimer) int { return a.when.Compare(b.when) }).when, true
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Time
	period time.Duration // tickers only
}

func (t *fakeTimer) armLocked(d time.Duration) {
	t.when = t.f.now.Add(d)
	if d <= 0 && t.period == 0 {
		t.when = t.f.now // the runtime's timers send the time they fired at, not a past one
		t.fireLocked()
		return
	}
	t.f.waiters = append(t.f.waiters, t)
	t.f.armed.Broadcast()
}

// fireLocked sends the deadline on t's channel, dropping it when the channel is full.
func (t *fakeTimer) fireLocked() {
	select {
	case t.c <- t.when:
	default:
	}
}

// removeLocked disarms t and reports whether it was armed.
func (t *fakeTimer) removeLocked() bool {
	i := slices.Index(t.f.waiters, t)
	if i < 0 {
		return false
	}
	t.f.waiters = slices.Delete(t.f.waiters, i, i+1)
	return true
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.removeLocked()
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.removeLocked()
	t.armLocked(d)
	return was
}
