package fleet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// The source keeps its time on its clock: with etcd gone, a node calls itself stale
// only once staleAfter has passed on that clock since the first failed request, and
// says stale since then. A fake clock drives it, without waiting the seconds out.
func TestStaleOnTheSourcesClock(t *testing.T) {
	c := startEtcd(t, 1)
	cli := c.client()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := clock.NewFake(start)
	k := &sink{updates: make(chan reconcile.Update, 1000)}
	a := &node{Source: NewSource(cli, prefix, nodeFile(t, "a"), k, slog.New(slog.NewTextHandler(io.Discard, nil))), sink: k}
	a.clock = fake
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	a.sink.next(t, "a reads the store", func(reconcile.Update) bool { return true })
	eventually(t, "a applied the store's revision", func() bool { return !a.State().AppliedAt.IsZero() })
	if st := a.State(); !st.AppliedAt.Equal(start) {
		t.Fatalf("applied at %v, want the fake clock's %v", st.AppliedAt, start)
	}

	// etcd goes at once: often before the source's watches are up (the etcd client's
	// Watch waits for its stream, which held the source unprobed, never stale, until
	// etcd was back), sometimes after
	c.kill(c.members[0])
	// each step: the source waits on its clock (the probe's ticker, or the pause
	// before it reads again), the clock moves a probe's period, the source asks etcd
	step := func() {
		t.Helper()
		bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer bcancel()
		if err := fake.BlockUntilContext(bctx, 1); err != nil {
			t.Fatal("the source armed no timer on its clock")
		}
		fake.Advance(probeEvery)
	}
	failingSince := func() time.Time {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.failing
	}
	var first time.Time
	eventually(t, "a request fails", func() bool {
		if first = failingSince(); first.IsZero() {
			step()
		}
		return !first.IsZero()
	})
	eventually(t, "the source calls itself stale", func() bool {
		st := a.State()
		if st.Reachable {
			step()
			return false
		}
		if now := fake.Now(); now.Sub(first) < staleAfter {
			t.Fatalf("stale at %v on the clock, %v after the first failure at %v: want %v at least", now, now.Sub(first), first, staleAfter)
		}
		return true
	})
	if st := a.State(); !st.StaleSince.Equal(first) || first.Before(start) || first.After(fake.Now()) {
		t.Fatalf("stale since %v, want the first failure on the fake clock, %v", st.StaleSince, first)
	}
}

// A node that did not run (its stall watch saw it) does not count that time against
// the store: its probe, which timed out for want of a core, calls nothing unreachable
// (which would close the watches and read every service again). The same silence with
// no stall seen does.
func TestOwnStallIsNotTheStores(t *testing.T) {
	for _, c := range []struct {
		name         string
		meter, stale bool
	}{{"the node did not run", true, false}, {"the store was silent", false, true}} {
		fake := clock.NewFake(time.Unix(0, 0))
		s := &Source{clock: fake, reachable: true, log: slog.New(slog.DiscardHandler), want: newDesired()}
		stop, done := make(chan struct{}), make(chan struct{})
		if c.meter {
			m := clock.NewStallMeter(fake, 100*time.Millisecond)
			s.SetStallMeter(m)
			go func() { defer close(done); m.Run(stop) }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := fake.BlockUntilContext(ctx, 1); err != nil {
				t.Fatal("the stall watch armed no ticker")
			}
			cancel()
		} else {
			close(done)
		}
		asked := fake.Now()
		fake.Advance(5 * time.Second) // the probe asked, then nothing ran for 5 s
		stale := s.failed(errors.New("probe: context deadline exceeded"), asked)
		close(stop)
		<-done
		if stale != c.stale || s.State().Reachable == c.stale {
			t.Errorf("%s for 5 s after a probe: stale %v (reachable %v), want %v", c.name, stale, s.State().Reachable, c.stale)
		}
	}
}
