package tunnel

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
)

// A peer silent for deadAfter while this process runs is gone, not a moment before.
func TestWatchdogSilentPeer(t *testing.T) {
	f := clock.NewFake(time.Now())
	dog := newWatchdog(f, clock.NewStallMeter(f, stallWatch), nil)
	f.Advance(deadAfter - time.Millisecond)
	if dog.gone(os.ErrDeadlineExceeded) {
		t.Fatal("gone before deadAfter of silence")
	}
	if got := dog.deadline(); !got.Equal(f.Now().Add(time.Millisecond)) {
		t.Fatalf("deadline in %v, want 1ms", got.Sub(f.Now()))
	}
	f.Advance(time.Millisecond)
	if !dog.gone(os.ErrDeadlineExceeded) {
		t.Fatal("not gone after deadAfter of silence")
	}
	if dog.gone(io.EOF) {
		t.Fatal("a read that failed otherwise than by its deadline: taken for silence")
	}
	dog.heard()
	if dog.gone(os.ErrDeadlineExceeded) {
		t.Fatal("gone just after a message")
	}
}

// The process stopped for two seconds (a VM paused, SIGSTOP): on resuming, before the
// pings waiting in its socket are read, the silence it could not hear is not the
// peer's — the peer has what is left of deadAfter, counted from the resume.
func TestWatchdogOwnStall(t *testing.T) {
	f := clock.NewFake(time.Now())
	stalls := clock.NewStallMeter(f, stallWatch)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		stalls.Run(stop)
	}()
	defer func() { close(stop); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal("the stall meter armed no ticker")
	}
	dog := newWatchdog(f, stalls, nil)
	f.Advance(2 * time.Second) // stopped: the meter's watch missed every wake-up but the first
	if dog.gone(os.ErrDeadlineExceeded) {
		t.Fatal("the tunnel dropped for this process's own stall")
	}
	// silent for the first wake-up's interval only: the rest of deadAfter is left
	if got, want := dog.deadline().Sub(f.Now()), deadAfter-stallWatch; got != want {
		t.Fatalf("deadline in %v after the stall, want %v", got, want)
	}
}

// Over TCP any frame of the tunnel is a word from the peer: a ping behind the
// streams' data is late, not lost.
func TestWatchdogFramesOverTCP(t *testing.T) {
	client, _ := muxPair(t, 10)
	f := clock.NewFake(time.Now())
	dog := newWatchdog(f, clock.NewStallMeter(f, stallWatch), client)
	f.Advance(deadAfter)
	client.heard.Store(f.Now().Add(-time.Millisecond).UnixNano())
	if dog.gone(os.ErrDeadlineExceeded) {
		t.Fatal("gone though a frame arrived 1ms ago")
	}
	f.Advance(deadAfter)
	if !dog.gone(os.ErrDeadlineExceeded) {
		t.Fatal("not gone after deadAfter without a frame")
	}
}
