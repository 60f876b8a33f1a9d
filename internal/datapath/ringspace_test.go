package datapath_test

import (
	"net/netip"
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// Rings share blocks: replacing one service's ring, again and again until the block's
// slots are reused, moves that service's flows as its new ring says and leaves its
// neighbours' forwarding as it was — through the program, packet by packet.
func TestRingChangeLeavesItsNeighboursAlone(t *testing.T) {
	b := newBench(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const size = 4093 // 16 rings a block: the replacements below fill it many times
	vipA, vipB := netip.MustParseAddr("198.51.100.70"), netip.MustParseAddr("198.51.100.71")
	const svcA, svcB = 20, 21
	// backend ids 20, 21 (A), 22, 23 (B), 24 (A's replacement of 21)
	for id, svc := range map[uint32]uint32{20: svcA, 21: svcA, 22: svcB, 23: svcB, 24: svcA} {
		must(b.lb.PutBackend(id, datapath.Backend{Addr: dptest.Backend4(int(id)), ServiceID: svc, State: datapath.BackendUp}))
	}
	alternate := func(x, y uint32) []uint32 {
		r := make([]uint32, size)
		for i := range r {
			r[i] = []uint32{x, y}[i%2]
		}
		return r
	}
	must(b.lb.PutRings(map[uint32][]uint32{svcA: alternate(20, 21), svcB: alternate(22, 23)}))
	must(b.lb.PutService(datapath.ServiceKey{VIP: vipA, Port: 80, Proto: 6}, datapath.Service{ID: svcA}))
	must(b.lb.PutService(datapath.ServiceKey{VIP: vipB, Port: 80, Proto: 6}, datapath.Service{ID: svcB}))
	must(b.lb.PutVIPAddr(vipA, 1))
	must(b.lb.PutVIPAddr(vipB, 1))

	send := func(vip netip.Addr) []netip.Addr {
		var to []netip.Addr
		for sport := uint16(2000); sport < 2100; sport++ {
			to = append(to, b.sendTo(t, dptest.Packet{Src: dptest.Client4, Dst: vip, SPort: sport, DPort: 80, Flags: dptest.SYN}))
		}
		return to
	}
	beforeA, beforeB := send(vipA), send(vipB)
	ringB, err := b.lb.Ring(svcB)
	must(err)
	memBefore, err := b.lb.Memory()
	must(err)

	for i := range 100 {
		ring := alternate(20, 24)
		if i%2 == 1 {
			ring = alternate(20, 21)
		}
		must(b.lb.PutRing(svcA, ring))
	}
	must(b.lb.PutRing(svcA, alternate(20, 24)))

	afterA, afterB := send(vipA), send(vipB)
	for i := range beforeA {
		wantA := beforeA[i]
		if wantA == dptest.Backend4(21) {
			wantA = dptest.Backend4(24)
		}
		if afterA[i] != wantA {
			t.Errorf("flow %d of A went to %s before, %s after its ring changed; want %s", i, beforeA[i], afterA[i], wantA)
		}
		if afterB[i] != beforeB[i] {
			t.Errorf("flow %d of B went to %s before, %s after A's ring changed", i, beforeB[i], afterB[i])
		}
	}
	got, err := b.lb.Ring(svcB)
	must(err)
	for i := range got {
		if got[i] != ringB[i] {
			t.Fatalf("B's ring in the kernel changed at slot %d: %d, was %d", i, got[i], ringB[i])
		}
	}
	mem, err := b.lb.Memory()
	must(err)
	if mem.RingBlocks != memBefore.RingBlocks || mem.Rings != memBefore.Rings {
		t.Errorf("101 replacements of A's ring took %d blocks, %d bytes; before, %d blocks, %d bytes",
			mem.RingBlocks, mem.Rings, memBefore.RingBlocks, memBefore.Rings)
	}
}

// A service whose ring is taken away keeps its entry and finds no backend: the
// program drops its new flows (counted), and its neighbour in the block forwards.
func TestDeletedRingNamesNoBackend(t *testing.T) {
	b := newBench(t)
	if err := b.lb.DeleteRing(1); err != nil { // vipWeb:80's
		t.Fatal(err)
	}
	verdict, _ := b.run(t, dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 3000, DPort: 80, Flags: dptest.SYN}.Bytes())
	if verdict != dptest.XDPDrop {
		t.Errorf("SYN to a service without a ring: verdict %d, want XDP_DROP", verdict)
	}
	if got := b.sendTo(t, dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 3000, DPort: 53, UDP: true}); got != dptest.Backend4(2) {
		t.Errorf("its neighbour vipWeb:53 sent to %s, want %s", got, dptest.Backend4(2))
	}
}
