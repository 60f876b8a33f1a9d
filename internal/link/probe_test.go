package link

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// A tunnel comes up after rise answers and goes down once nothing was answered for
// fall intervals; a late answer within the window keeps it up, one past it counts for
// nothing.
func TestProbeRiseFall(t *testing.T) {
	const rise, fall, interval = 3, 2, 100 * time.Millisecond
	s := newProbeState(rise, fall)
	at := time.Unix(0, 0)
	tick := func() (wentDown bool, seq uint64) {
		at = at.Add(interval)
		return s.sendState(at, interval)
	}
	for i := 1; i <= rise; i++ {
		_, seq := tick()
		if up := s.answer(seq, at.Add(time.Millisecond)); up != (i == rise) {
			t.Fatalf("answer %d: came up %v (rise %d)", i, up, rise)
		}
	}
	// probe 4 is answered only after probe 5 left: late, within the window
	_, late := tick()
	tick()
	if s.answer(late, at.Add(50*time.Millisecond)) || !s.view().up || s.view().rtt != 150*time.Millisecond {
		t.Fatalf("a late answer within the window: %+v", s.view())
	}
	// then silence: down once fall intervals passed since that answer
	for i := 1; ; i++ {
		down, _ := tick()
		if down {
			if since := at.Sub(time.Unix(0, 0).Add(5*interval + 50*time.Millisecond)); since < fall*interval || since > fall*interval+interval {
				t.Errorf("down %s after the last answer, fall × interval is %s", since, fall*interval)
			}
			break
		}
		if i > fall+1 {
			t.Fatalf("still up after %d silent intervals: %+v", i, s.view())
		}
	}
	if s.answer(late, at) {
		t.Fatal("an answer past the window counted")
	}
	if v := s.view(); v.up || v.trans != 2 || v.lost == 0 {
		t.Errorf("counters: %+v", v)
	}
}

// Both sides derive the same pair of inner addresses per tunnel, each the other's.
func TestInnerAddrsAgree(t *testing.T) {
	a := &config.Link{InnerPrefix: netip.MustParsePrefix("169.254.200.0/24"),
		Local: config.LinkSite{Address: netip.MustParseAddr("192.0.2.1")}, Remote: config.LinkSite{Address: netip.MustParseAddr("192.0.2.2")}}
	b := &config.Link{InnerPrefix: a.InnerPrefix, Local: a.Remote, Remote: a.Local}
	for i := range 4 {
		al, ar := innerAddrs(a, i)
		bl, br := innerAddrs(b, i)
		if al != br || ar != bl || al == ar {
			t.Errorf("tunnel %d: a %s→%s, b %s→%s", i, al, ar, bl, br)
		}
	}
	if l, _ := innerAddrs(a, 3); l != netip.MustParseAddr("169.254.200.6") {
		t.Errorf("tunnel 3 of the lower side: %s", l)
	}
}

// The prober runs on the clock it is given: two sides probing each other over real UDP
// sockets on lo, with an interval of an hour, see the tunnel come up after rise answers
// and go down fall intervals after the other side went silent, as the test moves the
// clock.
func TestProberRunsOnItsClock(t *testing.T) {
	testenv.NeedRoot(t, "needs root (the probes' port 7)")
	const interval, rise, fall = time.Hour, 2, 3
	a4, b4 := netip.MustParseAddr("127.0.77.1"), netip.MustParseAddr("127.0.77.2")
	clk := clock.NewFake(time.Unix(0, 0))
	// b first: a's first probe, sent as it starts, finds b answering (a's side is judged)
	b, err := newProber([]*tunnel{{local: b4, remote: a4}}, clk, interval, rise, fall)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	a, err := newProber([]*tunnel{{local: a4, remote: b4}}, clk, interval, rise, fall)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 2); err != nil {
		t.Fatal("the probers' tickers are not on the clock given")
	}
	kicked := func(what string) {
		t.Helper()
		select {
		case <-a.kick:
		case <-ctx.Done():
			t.Fatalf("%s: no change of state, %+v", what, a.states[0].view())
		}
	}

	clk.Advance(interval) // the second probe: with the first, rise answers
	kicked("two probes answered")
	if v := a.states[0].view(); !v.up || v.sent != 2 {
		t.Fatalf("after two probes answered: %+v, want up", v)
	}

	b.close() // the other side goes silent
	clk.Advance(fall * interval)
	kicked("the other side silent for fall intervals")
	if v := a.states[0].view(); v.up || v.trans != 2 {
		t.Fatalf("silent for fall intervals: %+v, want down", v)
	}
}
