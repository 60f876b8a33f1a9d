package datapath_test

import (
	"net/netip"
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// keptThroughFlood establishes `flows` flows on the five-backend service (each by a
// packet without SYN, as a flow moved here by ECMP: only the flow table knows it, not
// the SYN memory, as for any flow older than a few seconds), moves the whole ring to a newcomer (so only the flow
// table still knows where each flow goes), floods `n` spoofed TCP packets with the given
// flags under the given new-flow bound, and returns the share of established flows that
// kept their backend. All of it on one CPU: the new-flow bound is counted per CPU.
func keptThroughFlood(t *testing.T, flows int, flags dptest.TCPFlags, n int, rate uint32) (float64, map[string]uint64) {
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
			est[i] = dptest.Packet{Src: netip.AddrFrom4([4]byte{192, 0, 2, byte(i % 250)}), Dst: vipMany, SPort: uint16(20000 + i), DPort: 80, Flags: dptest.ACK}
			first[i] = run(est[i])
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
		if fwd, err := dptest.FloodTCP(b.lb.Program(), b.net.Port0.Index, vipMany, 80, flags, n, 1); err != nil || fwd != n {
			t.Fatalf("flood: %d of %d packets forwarded (%v)", fwd, n, err)
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

// A million spoofed SYNs do not push established flows out of the flow table, even
// with no bound on new flows: a SYN opens no entry. Spoofed packets without SYN of
// flows never seen (which the node remembers) do, unless new flows are bounded; above
// the bound they are forwarded all the same (to the ring's backend), only not
// remembered, and counted.
func TestFloodKeepsEstablishedFlows(t *testing.T) {
	requireRoot(t)
	const flows, flood = 500, 1000000
	share, events := keptThroughFlood(t, flows, dptest.SYN, flood, 0)
	if share != 1 || events["flow_not_inserted"] != 0 {
		t.Errorf("%.1f%% of established flows kept their backend through %d unbounded SYNs (flow_not_inserted %d), want all (and 0)",
			100*share, flood, events["flow_not_inserted"])
	}
	// a bound of 16 a second: the 500 flows share CPU 0's ~2 048 entries with the
	// flood's inserts, which at 128 a second (an earlier bound here) evicted them in a
	// flood slower than ~12 s, as under -race on a loaded machine
	share, events = keptThroughFlood(t, flows, dptest.ACK, flood, 16)
	if share != 1 {
		t.Errorf("%.1f%% of established flows kept their backend through %d ACKs of unknown flows, want all", 100*share, flood)
	}
	if n := events["flow_not_inserted"]; n < flood*99/100 {
		t.Errorf("flow_not_inserted = %d, want nearly all of the %d ACKs", n, flood)
	}
	// the same kind of flood without the bound evicts them: the test can fail
	share, events = keptThroughFlood(t, flows, dptest.ACK, 20000, 0)
	if share > 0.5 || events["flow_not_inserted"] != 0 {
		t.Errorf("without a bound %.1f%% of flows kept their backend through the flood (flow_not_inserted %d): the flood did not evict, the test proves nothing",
			100*share, events["flow_not_inserted"])
	}
}
