package clock

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestFakeTimerFiresOnlyAtItsDeadline(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(3 * time.Second)
	f.Advance(2 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("timer fired 1 s early")
	default:
	}
	f.Advance(time.Second)
	select {
	case at := <-tm.C():
		if !at.Equal(time.Unix(3, 0)) {
			t.Fatalf("fired at %v, want 3 s", at)
		}
	default:
		t.Fatal("timer did not fire at its deadline")
	}
	if f.Waiters() != 0 {
		t.Fatalf("a fired timer is still armed")
	}
}

func TestFakeTickerRearmsAndStops(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		f.Advance(time.Second)
		if at := <-tk.C(); !at.Equal(time.Unix(int64(i), 0)) {
			t.Fatalf("tick %d at %v", i, at)
		}
	}
	tk.Stop()
	f.Advance(5 * time.Second)
	select {
	case <-tk.C():
		t.Fatal("a stopped ticker ticked")
	default:
	}
}

func TestFakeStopAndReset(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	if tm.Stop() {
		t.Fatal("second Stop reported true")
	}
	tm.Reset(2 * time.Second)
	f.Advance(time.Second)
	select {
	case <-tm.C():
		t.Fatal("reset timer fired at its old deadline")
	default:
	}
	f.Advance(time.Second)
	<-tm.C()
}

func TestBlockUntilWaitsForTheCodeToArm(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan bool)
	go func() { done <- Sleep(f, time.Minute, nil) }()
	f.BlockUntil(1)
	f.Advance(time.Minute)
	if !<-done {
		t.Fatal("Sleep reported it was interrupted")
	}
}

func TestSleepInterrupted(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	stop := make(chan struct{})
	close(stop)
	if Sleep(f, time.Hour, stop) {
		t.Fatal("Sleep reported a full wait though done was closed")
	}
	if f.Waiters() != 0 {
		t.Fatal("Sleep left its timer armed")
	}
}

func TestFakeTimerOfNoDurationFiresAtOnce(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	for _, d := range []time.Duration{0, -time.Second} {
		select {
		case at := <-f.NewTimer(d).C():
			if !at.Equal(time.Unix(0, 0)) {
				t.Fatalf("NewTimer(%v) fired at %v, want now", d, at)
			}
		default:
			t.Fatalf("NewTimer(%v) did not fire at once", d)
		}
	}
	tm := f.NewTimer(time.Hour)
	tm.Reset(0)
	select {
	case <-tm.C():
	default:
		t.Fatal("Reset(0) did not fire at once")
	}
	if f.Waiters() != 0 {
		t.Fatalf("%d timers armed, want none: all have fired", f.Waiters())
	}
	if !Sleep(f, 0, nil) {
		t.Fatal("Sleep(0) reported it was interrupted")
	}
}

func TestBlockUntilContextGivesUp(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.BlockUntilContext(ctx, 1) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("BlockUntilContext = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second): // a failure bound only
		t.Fatal("BlockUntilContext still blocked 10 s after its context was cancelled")
	}
	f.NewTimer(time.Second)
	if err := f.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatalf("BlockUntilContext with a timer armed = %v", err)
	}
}

func TestNextDeadline(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	if _, ok := f.NextDeadline(); ok {
		t.Fatal("NextDeadline reported a deadline with nothing armed")
	}
	late := f.NewTimer(5 * time.Second)
	f.NewTicker(2 * time.Second)
	if at, ok := f.NextDeadline(); !ok || !at.Equal(time.Unix(2, 0)) {
		t.Fatalf("NextDeadline = %v, %v; want 2 s (the ticker)", at, ok)
	}
	f.Advance(2 * time.Second)
	f.Advance(2 * time.Second)
	if at, _ := f.NextDeadline(); !at.Equal(time.Unix(5, 0)) {
		t.Fatalf("NextDeadline = %v after two ticks, want 5 s (the timer)", at)
	}
	late.Stop()
	if at, _ := f.NextDeadline(); !at.Equal(time.Unix(6, 0)) {
		t.Fatalf("NextDeadline = %v after the timer stopped, want 6 s (the ticker re-armed)", at)
	}
}

// TestWatchStalls: a jump of the clock between two wake-ups of the watch is a stall,
// reported with its length; the watch stops when told.
func TestWatchStalls(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	stop, done := make(chan struct{}), make(chan struct{})
	gaps := make(chan time.Duration, 1)
	go func() {
		defer close(done)
		WatchStalls(f, 100*time.Millisecond, time.Second, stop, func(gap time.Duration) { gaps <- gap })
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal("the watch armed no ticker")
	}
	f.Advance(5 * time.Second) // stopped for 5 s
	select {
	case gap := <-gaps:
		if gap < 5*time.Second {
			t.Fatalf("stall of %v reported, want at least 5s", gap)
		}
	case <-ctx.Done():
		t.Fatal("a 5 s jump was not reported")
	}
	close(stop)
	<-done
}

// waitBeat waits until m's watch has woken at at.
func waitBeat(t *testing.T, m *StallMeter, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		woke := m.beat.Equal(at)
		m.mu.Unlock()
		if woke {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the meter's watch did not wake at %v", at)
		}
		runtime.Gosched()
	}
}

// TestStallMeter: wake-ups on time are no stall; a jump of the clock is one, counted
// from the first missed wake-up, before the watch has woken as after; a window after
// it holds none of it; a meter that does not run sees none.
func TestStallMeter(t *testing.T) {
	start := time.Unix(0, 0)
	f := NewFake(start)
	m := NewStallMeter(f, 100*time.Millisecond)
	stop, done := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-done }()
	f.Advance(time.Hour) // not running yet: no stall
	if got := m.Stalled(start, f.Now()); got != 0 {
		t.Fatalf("a meter that does not run: %v stalled, want 0", got)
	}
	go func() {
		defer close(done)
		m.Run(stop)
	}()
	f.BlockUntil(1)
	begin := f.Now()
	for range 5 {
		f.Advance(100 * time.Millisecond)
		waitBeat(t, m, f.Now())
	}
	if got := m.Stalled(begin, f.Now()); got != 0 {
		t.Fatalf("wake-ups on time: %v stalled, want 0", got)
	}
	before := f.Now()
	f.Advance(time.Second) // the process stopped for a second
	if got := m.Stalled(begin, f.Now()); got != 900*time.Millisecond {
		t.Fatalf("a stop of 1 s, the watch maybe not woken yet: %v stalled, want 900ms (from its first missed wake-up)", got)
	}
	waitBeat(t, m, f.Now())
	if got := m.Stalled(begin, f.Now()); got != 900*time.Millisecond {
		t.Fatalf("a stop of 1 s, seen by the watch: %v stalled, want 900ms", got)
	}
	if got := m.Stalled(before.Add(500*time.Millisecond), f.Now()); got != 500*time.Millisecond {
		t.Fatalf("the stall's last half: %v, want 500ms", got)
	}
	after := f.Now()
	f.Advance(100 * time.Millisecond)
	waitBeat(t, m, f.Now())
	if got := m.Stalled(after, f.Now()); got != 0 {
		t.Fatalf("after the stall: %v stalled, want 0", got)
	}
}
