// Package health runs backend health checks and reports their state, in the manner of
// keepalived, MetalLB or Katran's healthchecker.
//
// A [Target] is one backend address with one check definition ([config.Health]). The
// [Checker] runs one prober goroutine per distinct target: targets are compared with
// ==, so identical targets asked for by several services are checked only once.
//
// # State machine
//
// A new target starts down (kind none: up at once, and never probed). It becomes up
// after Rise consecutive successful checks and, once up, goes down again after Fall
// consecutive failed checks. The first check runs as soon as the target is added; the
// next ones run every Interval (measured from the start of the previous check; a check
// that outlasts the interval is followed at once by the next), each bounded by Timeout.
// The second check is delayed by a random jitter of at most 10% of the interval, so
// that targets added together do not probe in lockstep afterwards.
//
//   - tcp: a TCP connection to Addr:Port, closed as soon as it is established.
//   - http: GET http://Addr:Port/Path, healthy when the status is 200–399. Redirects
//     are not followed, keep-alives are disabled (every check opens a fresh
//     connection), no proxy is used, and at most [maxBody] bytes of the body are read.
//
// # Events
//
// [Checker.Events] delivers state changes, plus the initial state of each target once
// it is known: up after Rise successes, or down at the first failure. Delivery never
// blocks a prober: events go through a per-target coalescing queue drained by one
// dispatcher goroutine into a buffered channel. When the consumer lags so far behind
// that the channel is full, pending events of the same target are merged and only
// the latest one is kept, so a slow consumer may miss intermediate transitions (and
// may see the same state twice) but always ends up with each target's latest state.
// [Checker.Up] is authoritative. Events of a target removed by [Checker.Set] that are
// still queued are dropped, but one already in the channel buffer stays there:
// consumers should ignore events of targets they no longer have.
package health

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
)

// Target is one thing to check: a backend address with one check definition.
// Identical targets (same address and same check parameters) run once.
type Target struct {
	Addr  netip.Addr
	Check config.Health
}

func (t Target) String() string {
	switch t.Check.Kind {
	case config.HealthTCP:
		return fmt.Sprintf("tcp://%s", hostPort(t))
	case config.HealthHTTP:
		return fmt.Sprintf("http://%s%s", hostPort(t), httpPath(t.Check.Path))
	default:
		return fmt.Sprintf("%s(%s)", t.Check.Kind, t.Addr)
	}
}

// Event is a change of state of a target (or its initial state).
type Event struct {
	Target  Target
	Up      bool
	Reason  string        // e.g. "3 consecutive failures: dial tcp 10.0.1.1:80: connect: connection refused"
	Latency time.Duration // of the check that caused the change; 0 for kind none
}

// Status is the current state of a target and its check counters, for metrics.
type Status struct {
	Target               Target
	Up                   bool
	LastCheck            time.Time     // start of the last completed check; zero before the first one
	LastOK               bool          // result of the last completed check
	LastError            string        // error of the last check, "" when it succeeded
	LastLatency          time.Duration // duration of the last completed check
	ConsecutiveSuccesses int
	ConsecutiveFailures  int
	Checks               uint64 // completed checks
	Failures             uint64 // failed checks
}

const (
	// eventBuffer is the capacity of the Events channel.
	eventBuffer = 1024
	// defaultInterval and defaultTimeout replace non-positive values (config always
	// fills them, this is only a guard against a zero Health).
	defaultInterval = time.Second
	defaultTimeout  = 500 * time.Millisecond
)

// Checker runs the health checks of a set of targets. Its methods are safe for
// concurrent use.
type Checker struct {
	log    *slog.Logger
	clock  clock.Clock  // schedules the checks and times them
	client *http.Client // shared by every http prober; keep-alives disabled

	setMu sync.Mutex // serializes Set and Close

	mu      sync.Mutex // guards everything below
	closed  bool
	probers map[Target]*prober
	pending map[Target]Event // coalescing queue of undelivered events, one per target
	order   []Target         // delivery order of pending (may hold keys no longer pending)

	wake   chan struct{} // capacity 1: tells the dispatcher that pending has events
	stop   chan struct{} // closed by Close: stops the dispatcher
	events chan Event
	dispWG sync.WaitGroup // the dispatcher
}

// prober is the state of one target. Its fields after done are guarded by Checker.mu.
type prober struct {
	target  Target
	ctx     context.Context // cancelled (under Checker.mu) when the target is removed
	cancel  context.CancelFunc
	done    chan struct{} // closed when the prober goroutine has returned; nil for kind none
	recheck chan struct{} // capacity 1: Recheck wakes the prober for a check now

	state       RiseFall  // known: the initial state has been reported
	freshAfter  time.Time // Recheck: a check started before says nothing of now
	lastCheck   time.Time
	lastErr     error
	lastLatency time.Duration
	checks      uint64
	failures    uint64
}

// New returns a Checker with no targets, on the wall clock. log may be nil.
func New(log *slog.Logger) *Checker {
	return NewWithClock(log, clock.Real())
}

// NewWithClock returns a Checker whose intervals, jitter, LastCheck times and latencies
// run on clk (tests pass a [clock.Fake]). The timeout of each check stays a wall-clock
// deadline: it bounds a real dial and HTTP exchange. log may be nil.
func NewWithClock(log *slog.Logger, clk clock.Clock) *Checker {
	return newChecker(log, clk, eventBuffer)
}

func newChecker(log *slog.Logger, clk clock.Clock, buffer int) *Checker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Checker{
		log:     log,
		clock:   clk,
		client:  newHTTPClient(),
		probers: make(map[Target]*prober),
		pending: make(map[Target]Event),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		events:  make(chan Event, buffer),
	}
	// The dispatcher goroutine is owned by the Checker: started here, stopped by Close
	// (c.stop), which waits for it through c.dispWG.
	c.dispWG.Go(c.dispatch)
	return c
}

// Events returns the channel of state changes. It is closed by Close.
func (c *Checker) Events() <-chan Event { return c.events }

// Set replaces the set of targets. Targets already present keep their prober and
// state; new ones start (down, except kind none which is up at once, and except a
// target that only changed timing, which keeps its state) and run their first check
// immediately; removed ones are stopped: when Set returns, their prober
// goroutines have returned and no further check of them will start. Duplicate
// targets are checked once. Set is idempotent; after Close it does nothing.
func (c *Checker) Set(targets []Target) {
	c.setMu.Lock()
	defer c.setMu.Unlock()

	want := make(map[Target]bool, len(targets))
	for _, t := range targets {
		want[t] = true
	}

	var stopped []chan struct{}
	// A target whose timing changed (interval, timeout, rise, fall) is a new target,
	// but the backend behind it is the same: it keeps its known state instead of
	// starting down, which would pull a healthy backend out for a moment on reload.
	type endpoint struct {
		addr netip.Addr
		kind config.HealthKind
		port uint16
		path string
	}
	upBefore := map[endpoint]bool{}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	for t, p := range c.probers {
		if want[t] {
			continue
		}
		if p.state.Known() && probed(t.Check.Kind) {
			upBefore[endpoint{t.Addr, t.Check.Kind, t.Check.Port, t.Check.Path}] = p.state.Up()
		}
		p.cancel() // under c.mu: the prober records no result after this
		delete(c.probers, t)
		delete(c.pending, t)
		if p.done != nil {
			stopped = append(stopped, p.done)
		}
		c.log.Debug("health check removed", "target", t.String())
	}
	for t := range want {
		if _, ok := c.probers[t]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		p := &prober{target: t, ctx: ctx, cancel: cancel, recheck: make(chan struct{}, 1), state: RiseFall{Rise: t.Check.Rise, Fall: t.Check.Fall}}
		c.probers[t] = p
		if !probed(t.Check.Kind) {
			p.state.Assume(true)
			c.emitLocked(Event{Target: t, Up: true, Reason: "no health check"})
			continue
		}
		if up, ok := upBefore[endpoint{t.Addr, t.Check.Kind, t.Check.Port, t.Check.Path}]; ok {
			p.state.Assume(up)
		}
		p.done = make(chan struct{})
		// The prober goroutine is owned by the Checker: started here, stopped by Set
		// (when the target is removed) or Close, both through p.cancel, and both wait
		// for p.done.
		go c.run(p)
		c.log.Debug("health check added", "target", t.String())
	}
	c.mu.Unlock()

	for _, done := range stopped {
		<-done
	}
}

// probed reports whether targets of the kind run checks. Only none (and the empty
// kind, its zero value) do not; an unknown kind is probed and always fails.
func probed(k config.HealthKind) bool {
	return k != config.HealthNone && k != ""
}

// Up reports the current state of a target: false until it has passed Rise checks,
// and false for a target that is not in the set. A kind none target is always up.
func (c *Checker) Up(t Target) bool {
	if !probed(t.Check.Kind) {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.probers[t]
	return ok && p.state.Up()
}

// Known reports whether a target's state is known: it has passed Rise checks or
// failed one since it was set. A kind none target is known at once; a target that is
// not in the set is not.
func (c *Checker) Known(t Target) bool {
	if !probed(t.Check.Kind) {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.probers[t]
	return ok && p.state.Known()
}

// Recheck makes every probed target's state stale and checks it again now: until
// its next check the target is not Known, Up still answers its last state, and that
// check decides it at once, without Rise or Fall (RiseFall.Forget), so that every
// target gets an event. A check already under way when Recheck is called does not
// count: it may have started long before. It is for a process that did not run for a
// while (stopped, or starved of CPU): its states are as old as that.
func (c *Checker) Recheck() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	for _, p := range c.probers {
		if !probed(p.target.Check.Kind) {
			continue
		}
		p.state.Forget()
		p.freshAfter = now
		select {
		case p.recheck <- struct{}{}:
		default: // a recheck is already due
		}
	}
}

// Status returns the state and counters of every target, sorted by address then
// check parameters.
func (c *Checker) Status() []Status {
	c.mu.Lock()
	out := make([]Status, 0, len(c.probers))
	for _, p := range c.probers {
		out = append(out, p.status())
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Status) int { return compareTargets(a.Target, b.Target) })
	return out
}

// StatusOf returns the state and counters of one target; false when it is not in the
// set. It costs one lookup, whatever the number of targets.
func (c *Checker) StatusOf(t Target) (Status, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.probers[t]
	if !ok {
		return Status{}, false
	}
	return p.status(), true
}

// status is the prober's state and counters; the caller holds the checker's mu.
func (p *prober) status() Status {
	s := Status{
		Target:               p.target,
		Up:                   p.state.Up(),
		LastCheck:            p.lastCheck,
		LastOK:               p.checks > 0 && p.lastErr == nil,
		LastLatency:          p.lastLatency,
		ConsecutiveSuccesses: p.state.Successes(),
		ConsecutiveFailures:  p.state.Failures(),
		Checks:               p.checks,
		Failures:             p.failures,
	}
	if p.lastErr != nil {
		s.LastError = p.lastErr.Error()
	}
	return s
}

func compareTargets(a, b Target) int {
	x, y := a.Check, b.Check
	return cmp.Or(
		a.Addr.Compare(b.Addr),
		cmp.Compare(x.Kind, y.Kind),
		cmp.Compare(x.Port, y.Port),
		cmp.Compare(x.Path, y.Path),
		cmp.Compare(x.Interval, y.Interval),
		cmp.Compare(x.Timeout, y.Timeout),
		cmp.Compare(x.Rise, y.Rise),
		cmp.Compare(x.Fall, y.Fall),
	)
}

// Close stops every prober and the dispatcher, waits for all of them to return, and
// closes the Events channel. It is idempotent. After Close no goroutine of the
// Checker is left, Set does nothing and Status is empty.
func (c *Checker) Close() {
	c.setMu.Lock()
	defer c.setMu.Unlock()

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	var stopped []chan struct{}
	for t, p := range c.probers {
		p.cancel()
		if p.done != nil {
			stopped = append(stopped, p.done)
		}
		delete(c.probers, t)
	}
	clear(c.pending)
	c.order = nil
	c.mu.Unlock()

	for _, done := range stopped {
		<-done
	}
	close(c.stop)
	c.dispWG.Wait()
	close(c.events) // nobody sends any more: the dispatcher was the only sender
	c.client.CloseIdleConnections()
}

// run is the body of a prober goroutine (see Set for its ownership).
func (c *Checker) run(p *prober) {
	defer close(p.done)
	interval, timeout := timing(p.target.Check)
	jitter := time.Duration(rand.Int64N(int64(interval)/10 + 1)) // ≤ 10% of interval
	for {
		start := c.clock.Now()
		// A real deadline, not one of c.clock: it must cut a real socket short, which
		// a test's fake clock would never do.
		ctx, cancel := context.WithTimeout(p.ctx, timeout)
		err := probe(ctx, c.client, p.target)
		cancel()
		latency := c.clock.Now().Sub(start)
		wait := interval - latency + jitter
		jitter = 0 // only the first wait: it shifts the phase of the prober
		if !c.record(p, start, latency, err) {
			wait = 0 // a Recheck came during the check: check again at once
		}
		t := c.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-p.recheck:
			t.Stop()
		case <-p.ctx.Done():
			t.Stop()
			return
		}
	}
}

func timing(h config.Health) (interval, timeout time.Duration) {
	interval, timeout = h.Interval, h.Timeout
	if interval <= 0 {
		interval = defaultInterval
	}
	if timeout <= 0 {
		timeout = min(defaultTimeout, interval)
	}
	return interval, timeout
}

// record applies the result of one check to the state of p, emitting an event when the
// state changes or becomes known. It reports false for a check that started before a
// Recheck: the result is not recorded.
func (c *Checker) record(p *prober, start time.Time, latency time.Duration, err error) (fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.ctx.Err() != nil {
		return true // removed (or closed) during the check: the result is stale, and so is the prober
	}
	if start.Before(p.freshAfter) {
		return false
	}
	p.checks++
	p.lastCheck, p.lastErr, p.lastLatency = start, err, latency
	if err != nil {
		p.failures++
	}
	if !p.state.Record(err == nil) {
		return true
	}
	if err == nil {
		c.transitionLocked(p, latency, plural(p.state.Successes(), "success", "successes"))
	} else {
		c.transitionLocked(p, latency, plural(p.state.Failures(), "failure", "failures")+": "+err.Error())
	}
	return true
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 consecutive " + one
	}
	return fmt.Sprintf("%d consecutive %s", n, many)
}

func (c *Checker) transitionLocked(p *prober, latency time.Duration, reason string) {
	state := "down"
	if p.state.Up() {
		state = "up"
	}
	c.log.Info("backend "+state, "target", p.target.String(), "reason", reason)
	c.emitLocked(Event{Target: p.target, Up: p.state.Up(), Reason: reason, Latency: latency})
}

// emitLocked queues ev for delivery, replacing an undelivered event of the same target.
// It never blocks.
func (c *Checker) emitLocked(ev Event) {
	if _, ok := c.pending[ev.Target]; !ok {
		c.order = append(c.order, ev.Target)
	}
	c.pending[ev.Target] = ev
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// pop takes the oldest pending event.
func (c *Checker) pop() (Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.order) > 0 {
		t := c.order[0]
		c.order = c.order[1:]
		if ev, ok := c.pending[t]; ok {
			delete(c.pending, t)
			return ev, true
		}
	}
	c.order = nil // let the backing array go
	return Event{}, false
}

// dispatch is the body of the dispatcher goroutine (see newChecker for its ownership):
// it moves pending events to the Events channel. It is the only goroutine that may
// block on a slow consumer; while it does, probers keep queueing (and coalescing)
// events in c.pending.
func (c *Checker) dispatch() {
	for {
		ev, ok := c.pop()
		if !ok {
			select {
			case <-c.wake:
				continue
			case <-c.stop:
				return
			}
		}
		select {
		case c.events <- ev:
		case <-c.stop:
			return
		}
	}
}
