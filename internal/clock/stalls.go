package clock

import (
	"sync"
	"time"
)

// StallMeter measures when the process did not run, as WatchStalls sees it: a watch
// that wakes every interval, and takes a wake-up later than two intervals for a stall
// of the whole process (the interval past the one it waited). A failure detector asks
// it how much of a peer's silence was its own: a detector that did not run cannot have
// heard the peer, and must not count that time against it.
type StallMeter struct {
	c     Clock
	every time.Duration

	mu      sync.Mutex
	running bool
	beat    time.Time  // the watch's last wake-up
	stalls  []interval // the last maxStalls stalls, oldest first
}

type interval struct{ from, to time.Time }

// maxStalls bounds the stalls a meter keeps: a window longer than they cover counts
// fewer stalls than there were (a detector then takes the peer for gone sooner, never
// later).
const maxStalls = 32

// NewStallMeter returns a meter whose watch wakes every interval once Run runs.
func NewStallMeter(c Clock, every time.Duration) *StallMeter {
	return &StallMeter{c: c, every: every}
}

// Run watches until stop is closed. A meter that does not run sees no stall.
func (m *StallMeter) Run(stop <-chan struct{}) { m.watch(stop, 0, nil) }

// watch is Run calling stalled, when not nil, with every gap between wake-ups longer
// than after.
func (m *StallMeter) watch(stop <-chan struct{}, after time.Duration, stalled func(gap time.Duration)) {
	m.mu.Lock()
	m.running, m.beat = true, m.c.Now()
	m.mu.Unlock()
	t := m.c.NewTicker(m.every) // armed: the meter runs (a test's Fake.BlockUntil)
	defer t.Stop()
	defer func() {
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
	}()
	for {
		select {
		case <-t.C():
		case <-stop:
			return
		}
		now := m.c.Now()
		m.mu.Lock()
		gap := now.Sub(m.beat)
		if s, ok := m.stallLocked(now); ok {
			m.stalls = append(m.stalls, s)
			if len(m.stalls) > maxStalls {
				m.stalls = m.stalls[1:]
			}
		}
		m.beat = now
		m.mu.Unlock()
		if stalled != nil && gap > after {
			stalled(gap)
			now = m.c.Now() // the time stalled took is not a stall
			m.mu.Lock()
			m.beat = now
			m.mu.Unlock()
		}
	}
}

// stallLocked is the stall that ends at now, if the watch has not run for two
// intervals; the caller holds m.mu.
func (m *StallMeter) stallLocked(now time.Time) (interval, bool) {
	if !m.running || now.Sub(m.beat) <= 2*m.every {
		return interval{}, false
	}
	return interval{m.beat.Add(m.every), now}, true
}

// Stalled is how much of the time from since to now the process did not run: the
// stalls the watch saw, and the one going on at now if the watch has not woken since
// (a detector that runs first when the process resumes).
func (m *StallMeter) Stalled(since, now time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	stalls := m.stalls
	if s, ok := m.stallLocked(now); ok {
		stalls = append(stalls[:len(stalls):len(stalls)], s)
	}
	var total time.Duration
	for _, s := range stalls {
		from, to := maxTime(s.from, since), minTime(s.to, now)
		if to.After(from) {
			total += to.Sub(from)
		}
	}
	return total
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
