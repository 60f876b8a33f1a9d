package link

import (
	"net/netip"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
)

// A tunnel comes up after rise answered probes in a row and goes down after fall
// missed ones in a row; a late answer counts for nothing.
func TestProbeRiseFall(t *testing.T) {
	const rise, fall = 3, 2
	s := &probeState{}
	at := time.Unix(0, 0)
	step := func(answered bool) (wentDown, cameUp bool) {
		at = at.Add(100 * time.Millisecond)
		wentDown = s.sendState(at, fall)
		if answered {
			cameUp = s.answer(s.seq, at.Add(time.Millisecond), rise)
		}
		return
	}
	for i := 1; i <= rise; i++ {
		if _, up := step(true); up != (i == rise) {
			t.Fatalf("answer %d: came up %v (rise %d)", i, up, rise)
		}
	}
	step(false)
	step(false) // the first probe judged missed: still up
	if !s.view().up {
		t.Fatal("down after one miss, fall is 2")
	}
	if s.answer(s.seq-1, at, rise) {
		t.Fatal("a late answer counted")
	}
	if down, _ := step(false); !down || s.view().up {
		t.Fatalf("not down after %d misses: %+v", fall, s.view())
	}
	if v := s.view(); v.lost != 2 || v.trans != 2 || v.rtt != time.Millisecond {
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
