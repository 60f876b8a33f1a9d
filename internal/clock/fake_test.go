package clock

import (
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
