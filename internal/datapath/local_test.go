package datapath_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// A service mixing routed and tunnelled origins: its ring names a routed backend and
// the local pseudo-backend (the node's own stack). A flow the ring gives the local one
// passes to the stack untouched (XDP_PASS), the others are encapsulated; both are
// pinned by the flow table, so a ring change moves neither.
func TestLocalBackendPassesItsShare(t *testing.T) {
	b := newBench(t)
	vip := netip.MustParseAddr("198.51.100.70")
	const svc, routed, local = 30, 30, 31
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.lb.PutBackend(routed, datapath.Backend{Addr: dptest.Backend4(30), ServiceID: svc, State: datapath.BackendUp}))
	must(b.lb.PutBackend(local, datapath.Backend{Addr: vip, ServiceID: svc, State: datapath.BackendUp, Local: true}))
	ring := make([]uint32, ringSize)
	for i := range ring {
		ring[i] = routed + uint32(i%2) // even slots routed, odd ones local
	}
	must(b.lb.PutRing(svc, ring))
	must(b.lb.PutService(datapath.ServiceKey{VIP: vip, Port: 443, Proto: 6}, datapath.Service{ID: svc}))
	must(b.lb.PutVIPAddr(vip, 1))

	// each flow goes where the ring says: the stack for the local slots
	var passed, forwarded []dptest.Packet
	for sport := uint16(2000); sport < 2040; sport++ {
		p := dptest.Packet{Src: dptest.Client4, Dst: vip, SPort: sport, DPort: 443, Flags: dptest.SYN}
		toLocal := ring[datapath.FlowHash(flowOf(p), false)%ringSize] == local
		in := p.Bytes()
		verdict, out := b.run(t, in)
		switch {
		case toLocal && verdict != dptest.XDPPass:
			t.Fatalf("sport %d: the ring gives it the local backend, verdict %d, want XDP_PASS", sport, verdict)
		case toLocal && !bytes.Equal(out, in):
			t.Fatalf("sport %d: passed to the stack changed:\n% x\nwas\n% x", sport, out, in)
		case toLocal:
			passed = append(passed, p)
		case verdict != dptest.XDPTX:
			t.Fatalf("sport %d: the ring gives it the routed backend, verdict %d, want XDP_TX", sport, verdict)
		case outerDst(t, out) != dptest.Backend4(30):
			t.Fatalf("sport %d encapsulated to %s, want %s", sport, outerDst(t, out), dptest.Backend4(30))
		default:
			forwarded = append(forwarded, p)
		}
	}
	if len(passed) == 0 || len(forwarded) == 0 {
		t.Fatalf("40 flows: %d passed, %d forwarded: the test needs both", len(passed), len(forwarded))
	}
	// the handshakes' ACKs pin every flow to its backend, the local one too
	for _, p := range append(append([]dptest.Packet(nil), passed...), forwarded...) {
		p.Flags = dptest.ACK
		b.run(t, p.Bytes())
	}
	for _, p := range passed {
		if id, err := b.lb.FlowBackend(flowOf(p)); err != nil || id != local {
			t.Fatalf("flow %d pinned to %d (%v), want the local backend %d", p.SPort, id, err, local)
		}
	}
	// the whole ring to the routed backend: the pinned flows stay where they are ...
	must(b.lb.PutRing(svc, fill(ringSize, routed)))
	for _, p := range passed {
		p.Flags = dptest.ACK
		if verdict, _ := b.run(t, p.Bytes()); verdict != dptest.XDPPass {
			t.Fatalf("established local flow %d: verdict %d after a ring change, want XDP_PASS (kept on the stack)", p.SPort, verdict)
		}
	}
	for _, p := range forwarded {
		p.Flags = dptest.ACK
		if got := b.sendTo(t, p); got != dptest.Backend4(30) {
			t.Fatalf("established routed flow %d went to %s", p.SPort, got)
		}
	}
	// ... and a new flow that the old ring gave the stack now goes to the routed backend
	fresh := passed[0]
	fresh.SPort += 10000
	for ring[datapath.FlowHash(flowOf(fresh), false)%ringSize] != local {
		fresh.SPort++
	}
	if got := b.sendTo(t, fresh); got != dptest.Backend4(30) {
		t.Fatalf("new flow went to %s, want the new ring's %s", got, dptest.Backend4(30))
	}
	// the local backend's flows are counted as its load, as any backend's
	c, err := b.lb.BackendCounters(local)
	must(err)
	if c.NewFlows != uint64(len(passed)) {
		t.Errorf("local backend counted %d new flows, want %d", c.NewFlows, len(passed))
	}
	// an ICMP error about a flow on the stack (the node's own connection: path MTU)
	// passes to the stack too; one about a routed flow goes to its backend
	router := netip.MustParseAddr("192.0.2.1")
	fragNeeded := func(p dptest.Packet) []byte { return icmpTo(router, p.Dst, 3, 4, 1400, reply(p, 28+40)) }
	if verdict, _ := b.run(t, fragNeeded(passed[0])); verdict != dptest.XDPPass {
		t.Errorf("frag-needed quoting a flow on the stack: verdict %d, want XDP_PASS", verdict)
	}
	if verdict, out := b.run(t, fragNeeded(forwarded[0])); verdict != dptest.XDPTX || outerDst(t, out) != dptest.Backend4(30) {
		t.Errorf("frag-needed quoting a routed flow: verdict %d, want XDP_TX to its backend %s", verdict, dptest.Backend4(30))
	}
}
