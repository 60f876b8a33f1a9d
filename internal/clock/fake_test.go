package clock

import (
	"context"
	"errors"
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
