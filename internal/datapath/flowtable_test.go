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

// Flows lists what the table holds as the program reads it: each flow's 5-tuple, its
// service and backend and how long it has been idle; a torn entry is left out, a
// filter and a limit apply.
func TestFlowsListsTheTable(t *testing.T) {
	b := newBench(t)
	tcp := ack(41000)
	udp := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 41001, DPort: 53, UDP: true}
	v6 := dptest.Packet{Src: dptest.Client6, Dst: vip6, SPort: 41002, DPort: 80, Flags: dptest.ACK}
	for _, p := range []dptest.Packet{tcp, udp, v6} {
		b.sendTo(t, p)
	}
	if err := b.lb.AgeFlow(flowOf(udp), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	all := func(id, _ uint32) (bool, bool) { return true, id == 3 }
	flows, total, err := b.lb.Flows(10, all)
	if err != nil {
		t.Fatal(err)
	}
	if total != 3 || len(flows) != 3 {
		t.Fatalf("%d flows listed of %d, want 3 of 3: %+v", len(flows), total, flows)
	}
	want := map[string]uint32{
		"tcp 203.0.113.7:41000 198.51.100.10:80":           idWeb,
		"udp 203.0.113.7:41001 198.51.100.10:53":           idDNS,
		"tcp [2001:db8:ff::7]:41002 [2001:db8:100::10]:80": idV6,
	}
	for _, f := range flows {
		proto := map[uint8]string{6: "tcp", 17: "udp"}[f.Proto]
		key := proto + " " + netip.AddrPortFrom(f.Src, f.SPort).String() + " " + netip.AddrPortFrom(f.Dst, f.DPort).String()
		id, ok := want[key]
		if !ok || f.BackendID != id {
			t.Errorf("listed %s on backend %d; want one of %v", key, f.BackendID, want)
		}
		if f.DPort == 53 && (f.Idle < 29*time.Second || f.Idle > time.Minute) {
			t.Errorf("the flow aged by 30 s is idle %s", f.Idle)
		}
		if f.DPort != 53 && (f.Idle < 0 || f.Idle > 5*time.Second) {
			t.Errorf("a flow just used is idle %s", f.Idle)
		}
	}
	if flows, total, _ := b.lb.Flows(1, all); len(flows) != 1 || total != 3 {
		t.Errorf("limit 1: %d listed of %d, want 1 of 3", len(flows), total)
	}
	onlyWeb := func(id, _ uint32) (bool, bool) { return id == 1, false }
	if flows, total, _ := b.lb.Flows(10, onlyWeb); total != 1 || len(flows) != 1 || flows[0].DPort != 80 {
		t.Errorf("service 1 only: %+v of %d, want the TCP flow alone", flows, total)
	}
	if err := b.lb.TearFlow(flowOf(tcp), idDNS); err != nil {
		t.Fatal(err)
	}
	if _, total, _ := b.lb.Flows(10, all); total != 2 {
		t.Errorf("a torn entry is listed: %d flows, want 2", total)
	}
}

// The node reads the table from its status, metrics and fleet goroutines at once: under
// -race, reading it from several goroutines must not race (the memory mapping is made
// once, at load).
func TestFlowTableReadsFromManyGoroutines(t *testing.T) {
	b := newBench(t)
	b.sendTo(t, ack(42000))
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			var err error
			if i%2 == 0 {
				_, err = b.lb.FlowCount()
			} else {
				_, _, err = b.lb.Flows(10, func(_, _ uint32) (bool, bool) { return true, false })
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
