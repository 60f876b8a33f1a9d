package datapath_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// The flow table (bpf/lib/flowtable.h) is the program's own: these tests pin what the
// kernel's LRU hash used to promise, and what the new design adds.

// ack is the first packet without SYN of the web service's flow from sport: it opens
// the flow's entry.
func ack(sport uint16) dptest.Packet {
	return dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: sport, DPort: 80, Flags: dptest.ACK}
}

// A full bucket gives its least recently used way to a new flow; a packet of a flow
// refreshes its last use. A table of four entries is one bucket, both of every flow's
// choices.
func TestFlowTableEvictsLeastRecentlyUsed(t *testing.T) {
	b := newBenchWithFlows(t, 4)
	a, bb, c, d, e := ack(1001), ack(1002), ack(1003), ack(1004), ack(1005)
	for _, p := range []dptest.Packet{a, bb, c, d} {
		b.sendTo(t, p)
	}
	if n, err := b.lb.FlowCount(); err != nil || n != 4 {
		t.Fatalf("four flows opened, the table holds %d (%v)", n, err)
	}
	if err := b.lb.AgeFlow(flowOf(a), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.lb.AgeFlow(flowOf(bb), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b.sendTo(t, a) // a is in use again: b is now the least recent
	b.sendTo(t, e)
	for _, p := range []dptest.Packet{a, c, d, e} {
		if id, err := b.lb.FlowBackend(flowOf(p)); err != nil || id != idWeb {
			t.Errorf("flow from port %d: backend %d (%v), want it kept on %d", p.SPort, id, err, idWeb)
		}
	}
	if id, _ := b.lb.FlowBackend(flowOf(bb)); id != 0 {
		t.Errorf("the least recently used flow (port %d) kept its entry (backend %d): the new flow evicted another", bb.SPort, id)
	}
	if n, _ := b.lb.FlowCount(); n != 4 {
		t.Errorf("the table holds %d entries, want 4", n)
	}
}

// An entry whose words two CPUs mixed (its choice not the one its check word was made
// with) is a miss: the packet goes by the ring and opens the flow again. A whole write
// of another choice is taken.
func TestTornFlowEntryIsAMiss(t *testing.T) {
	b := newBench(t)
	p := dptest.Packet{Src: dptest.Client4, Dst: vipMany, SPort: 40000, DPort: 80, Flags: dptest.ACK}
	byRing := b.sendTo(t, p)
	ringID := uint32(idManyFirst)
	for i := range 5 {
		if dptest.Backend4(10+i) == byRing {
			ringID = uint32(idManyFirst + i)
		}
	}
	otherID := uint32(idManyFirst) + (ringID-idManyFirst+1)%5 // of the same service
	other := dptest.Backend4(10 + int(otherID-idManyFirst))
	if err := b.lb.RepinFlow(flowOf(p), otherID); err != nil {
		t.Fatal(err)
	}
	if got := b.sendTo(t, p); got != other {
		t.Fatalf("an entry rewritten whole to %s: packet went to %s", other, got)
	}
	before, _ := b.lb.ServiceCounters(7)
	// a third backend: torn back to the ring's, the packet's way would not show
	third := uint32(idManyFirst) + (otherID-idManyFirst+1)%5
	if third == ringID {
		third = uint32(idManyFirst) + (third-idManyFirst+1)%5
	}
	if err := b.lb.TearFlow(flowOf(p), third); err != nil {
		t.Fatal(err)
	}
	if got := b.sendTo(t, p); got != byRing {
		t.Errorf("a torn entry (backend %d, check of %d): packet went to %s, want the ring's %s", third, otherID, got, byRing)
	}
	after, _ := b.lb.ServiceCounters(7)
	if after.NewFlows != before.NewFlows+1 {
		t.Errorf("new flows %d → %d: the torn entry's packet should open the flow again", before.NewFlows, after.NewFlows)
	}
	if id, _ := b.lb.FlowBackend(flowOf(p)); id != ringID {
		t.Errorf("after the torn entry the flow table says backend %d, want the ring's %d", id, ringID)
	}
}

// Each flow has two buckets and goes to the emptier: a table filled to three quarters
// holds nearly all its flows (one bucket per flow would lose about one in nine).
func TestFlowTableHoldsThreeQuarters(t *testing.T) {
	const size, flows = 1024, 768
	b := newBenchWithFlows(t, size)
	pkts := make([][]byte, flows)
	for i := range pkts {
		src := netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)})
		pkts[i] = dptest.Packet{Src: src, Dst: vipWeb, SPort: uint16(2000 + i), DPort: 80, Flags: dptest.ACK}.Bytes()
	}
	verdicts, _ := b.runAll(t, pkts)
	for i, v := range verdicts {
		if v != dptest.XDPTX {
			t.Fatalf("flow %d: verdict %d", i, v)
		}
	}
	n, err := b.lb.FlowCount()
	if err != nil {
		t.Fatal(err)
	}
	if n < flows*98/100 || n > flows {
		t.Errorf("%d flows into a table of %d: it holds %d, want at least 98 %% of them", flows, size, n)
	}
}
