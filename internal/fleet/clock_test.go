package fleet

import (
	"context"
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
