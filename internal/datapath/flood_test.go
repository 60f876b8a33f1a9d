package datapath_test

import (
	"net/netip"
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// keptThroughFlood establishes `flows` flows on the five-backend service, moves the
// whole ring to a newcomer (so only the flow table still knows where each flow goes),
// floods `syns` spoofed SYNs under the given new-flow bound, and returns the share of
// established flows that kept their backend. All of it on one CPU: the table's LRU
// lists are per CPU.
func keptThroughFlood(t *testing.T, flows, syns int, rate uint32) (float64, map[string]uint64) {
	t.Helper()
	b := newBench(t) // a 4096-entry table
	est := make([]dptest.Packet, flows)
	first := map[int]netip.Addr{}
	var kept int
	err := b.net.Do(func() error {
		restore, err := dptest.PinCPU(0)
		if err != nil {
			return err
		}
		defer restore()
		run := func(p dptest.Packet) netip.Addr {
			v, out, err := dptest.RunXDP(b.lb.Program(), b.net.Port0.Index, p.Bytes())
			if err != nil || v != dptest.XDPTX {
				t.Fatalf("verdict %d (%v) for %+v", v, err, p)
			}
			return outerDst(t, out)
		}
		for i := range est {
			est[i] = dptest.Packet{Src: netip.AddrFrom4([4]byte{192, 0, 2, byte(i % 250)}), Dst: vipMany, SPort: uint16(20000 + i), DPort: 80, Flags: dptest.SYN}
			first[i] = run(est[i])
			est[i].Flags = dptest.ACK
		}
		if err := b.lb.PutBackend(20, datapath.Backend{Addr: dptest.Backend4(20), ServiceID: 7, State: datapath.BackendUp}); err != nil {
			return err
		}
		if err := b.lb.PutRing(7, fill(65537, 20)); err != nil {
			return err
		}
		// bound from now on: the established flows were inserted before
		if err := b.lb.PutSettings(datapath.Settings{NewFlowRate: rate}); err != nil {
			return err
		}
		if n, err := dptest.FloodSYNs(b.lb.Program(), b.net.Port0.Index, vipMany, 80, syns, 1); err != nil || n != syns {
			t.Fatalf("flood: %d of %d SYNs forwarded (%v)", n, syns, err)
		}
		for i, p := range est {
			if run(p) == first[i] {
				kept++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return float64(kept) / float64(flows), b.events(t)
}

// A million spoofed SYNs do not push established flows out of the flow table when new
// flows are bounded; they are forwarded all the same (to the ring's backend), only not
// remembered, and counted.
func TestFloodKeepsEstablishedFlows(t *testing.T) {
	requireRoot(t)
	const flows, syns = 500, 1000000
	share, events := keptThroughFlood(t, flows, syns, 128)
	if share != 1 {
		t.Errorf("%.1f%% of established flows kept their backend through %d SYNs, want all", 100*share, syns)
	}
	if n := events["flow_not_inserted"]; n < syns*99/100 {
		t.Errorf("flow_not_inserted = %d, want nearly all of the %d SYNs", n, syns)
	}
	// the same kind of flood without the bound evicts them: the test can fail
	share, events = keptThroughFlood(t, flows, 20000, 0)
	if share > 0.5 || events["flow_not_inserted"] != 0 {
		t.Errorf("without a bound %.1f%% of flows kept their backend through the flood (flow_not_inserted %d): the flood did not evict, the test proves nothing",
			100*share, events["flow_not_inserted"])
	}
}
