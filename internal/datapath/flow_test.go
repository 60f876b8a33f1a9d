package datapath_test

import (
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// outerDst returns the outer destination of an encapsulated packet.
func outerDst(t *testing.T, out []byte) netip.Addr {
	t.Helper()
	p := dptest.Decode(out)
	if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		a, _ := netip.AddrFromSlice(ip.DstIP)
		return a
	}
	if ip, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		a, _ := netip.AddrFromSlice(ip.DstIP)
		return a
	}
	t.Fatalf("not an IP packet:\n%s", p.Dump())
	return netip.Addr{}
}

func (b *bench) sendTo(t *testing.T, p dptest.Packet) netip.Addr {
	t.Helper()
	verdict, out := b.run(t, p.Bytes())
	if verdict != dptest.XDPTX {
		t.Fatalf("verdict %d, want XDP_TX for %+v", verdict, p)
	}
	return outerDst(t, out)
}

func flowOf(p dptest.Packet) datapath.Flow {
	proto := uint8(6)
	if p.UDP {
		proto = 17
	}
	return datapath.Flow{Src: p.Src, Dst: p.Dst, SPort: p.SPort, DPort: p.DPort, Proto: proto}
}

// The Go mirror of the flow hash must pick the very backend the program picks: a node's
// tools and the tests predict placement with it.
func TestMaglevPlacementMatchesGoHash(t *testing.T) {
	b := newBench(t)
	table := manyTable(t)
	seen := map[netip.Addr]int{}
	for sport := uint16(1000); sport < 1200; sport++ {
		p := dptest.Packet{Src: dptest.Client4, Dst: vipMany, SPort: sport, DPort: 80, Flags: dptest.SYN}
		got := b.sendTo(t, p)
		want := dptest.Backend4(10 + int(table[datapath.FlowHash(flowOf(p), false)%65537]))
		if got != want {
			t.Fatalf("sport %d went to %s, the Go hash predicts %s", sport, got, want)
		}
		seen[got]++
	}
	if len(seen) != 5 {
		t.Errorf("200 flows reached %d of 5 backends: %v", len(seen), seen)
	}
}

func TestIPv6FlowLabelIsFlowHash(t *testing.T) {
	b := newBench(t)
	p := dptest.Packet{Src: dptest.Client6, Dst: vip6, SPort: 43210, DPort: 80, Flags: dptest.SYN}
	_, out := b.run(t, p.Bytes())
	ip := dptest.Decode(out).Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if want := datapath.FlowHash(flowOf(p), false) & 0xfffff; ip.FlowLabel != want {
		t.Errorf("outer flow label %#x, want the flow hash's low 20 bits %#x", ip.FlowLabel, want)
	}
}

// An established flow keeps its backend when the ring moves under it; a new flow follows
// the new ring.
func TestFlowTableBeforeMaglev(t *testing.T) {
	b := newBench(t)
	est := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 50000, DPort: 80, Flags: dptest.SYN}
	if got := b.sendTo(t, est); got != dptest.Backend4(1) {
		t.Fatalf("SYN went to %s", got)
	}
	est.Flags = dptest.ACK
	if got := b.sendTo(t, est); got != dptest.Backend4(1) {
		t.Fatalf("the handshake's ACK went to %s", got)
	}
	if id, err := b.lb.FlowBackend(flowOf(est)); err != nil || id != idWeb {
		t.Fatalf("flow table holds backend %d (%v) after the ACK, want %d", id, err, idWeb)
	}
	// a second backend takes over the whole ring
	if err := b.lb.PutBackend(20, datapath.Backend{Addr: dptest.Backend4(20), ServiceID: 1, State: datapath.BackendUp}); err != nil {
		t.Fatal(err)
	}
	if err := b.lb.PutRing(1, fill(ringSize, 20)); err != nil {
		t.Fatal(err)
	}
	if got := b.sendTo(t, est); got != dptest.Backend4(1) {
		t.Errorf("established flow moved to %s after a ring change, want it kept on %s", got, dptest.Backend4(1))
	}
	fresh := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 50001, DPort: 80, Flags: dptest.SYN}
	if got := b.sendTo(t, fresh); got != dptest.Backend4(20) {
		t.Errorf("new flow went to %s, want the new ring's %s", got, dptest.Backend4(20))
	}
	// a flow first seen mid-stream (moved here by ECMP) is inserted too
	mid := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 50002, DPort: 80, Flags: dptest.ACK}
	b.sendTo(t, mid)
	if id, _ := b.lb.FlowBackend(flowOf(mid)); id != 20 {
		t.Errorf("mid-stream flow not remembered (backend %d)", id)
	}
	// a RST is forwarded but not remembered
	rst := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 50003, DPort: 80, Flags: dptest.RST}
	b.sendTo(t, rst)
	if id, _ := b.lb.FlowBackend(flowOf(rst)); id != 0 {
		t.Errorf("RST inserted a flow entry (backend %d)", id)
	}
}

// A TCP flow is remembered from its first packet without SYN: the SYN (and its
// retransmits) go to the ring's backend and leave no entry; the ACK goes to the same
// backend and opens the entry; the flow counts as new once, at its entry. A ring change
// between SYN and ACK does not move the handshake (the SYN memory), unless the SYN's
// backend went down.
func TestTCPFlowRememberedFromFirstACK(t *testing.T) {
	b := newBench(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	table := manyTable(t)
	syn := dptest.Packet{Src: dptest.Client4, Dst: vipMany, SPort: 41000, DPort: 80, Flags: dptest.SYN}
	want := dptest.Backend4(10 + int(table[datapath.FlowHash(flowOf(syn), false)%65537]))
	wantID := uint32(idManyFirst) + uint32(table[datapath.FlowHash(flowOf(syn), false)%65537])
	for range 2 { // the SYN and a retransmit
		if got := b.sendTo(t, syn); got != want {
			t.Fatalf("SYN went to %s, the ring says %s", got, want)
		}
		if id, err := b.lb.FlowBackend(flowOf(syn)); err != nil || id != 0 {
			t.Fatalf("a SYN left a flow entry (backend %d, %v)", id, err)
		}
	}
	if c, _ := b.lb.ServiceCounters(7); c.NewFlows != 0 || c.Packets != 2 {
		t.Errorf("after two SYNs the service counts %+v, want 2 packets and no new flow yet", c)
	}
	ack := syn
	ack.Flags = dptest.ACK
	for range 3 {
		if got := b.sendTo(t, ack); got != want {
			t.Fatalf("ACK went to %s, its SYN to %s", got, want)
		}
	}
	if id, err := b.lb.FlowBackend(flowOf(ack)); err != nil || id != wantID {
		t.Errorf("the ACK's flow entry holds backend %d (%v), want the SYN's %d", id, err, wantID)
	}
	svc, _ := b.lb.ServiceCounters(7)
	backend, _ := b.lb.BackendCounters(wantID)
	if svc.NewFlows != 1 || backend.NewFlows != 1 || svc.Packets != 5 {
		t.Errorf("after SYN, SYN, ACK, ACK, ACK: service %+v, backend %+v; want 5 packets and 1 new flow", svc, backend)
	}
	// the ring moves to a newcomer between two SYNs and their ACKs: each ACK goes where
	// its SYN went and opens the entry there, while a new SYN follows the new ring
	kept := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 41001, DPort: 80, Flags: dptest.SYN}
	gone := dptest.Packet{Src: dptest.Client4, Dst: vipDrain, SPort: 41002, DPort: 80, Flags: dptest.SYN}
	if got := b.sendTo(t, kept); got != dptest.Backend4(1) {
		t.Fatalf("SYN went to %s", got)
	}
	if got := b.sendTo(t, gone); got != dptest.Backend4(5) {
		t.Fatalf("SYN went to %s", got)
	}
	must(b.lb.PutBackend(20, datapath.Backend{Addr: dptest.Backend4(20), ServiceID: 1, State: datapath.BackendUp}))
	must(b.lb.PutRing(1, fill(ringSize, 20)))
	fresh := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 41003, DPort: 80, Flags: dptest.SYN}
	if got := b.sendTo(t, fresh); got != dptest.Backend4(20) {
		t.Errorf("a SYN after the ring change went to %s, want the new ring's %s", got, dptest.Backend4(20))
	}
	kept.Flags = dptest.ACK
	if got := b.sendTo(t, kept); got != dptest.Backend4(1) {
		t.Errorf("ACK after a ring change went to %s, want its SYN's %s", got, dptest.Backend4(1))
	}
	if id, _ := b.lb.FlowBackend(flowOf(kept)); id != idWeb {
		t.Errorf("the ACK opened an entry on backend %d, want its SYN's %d", id, idWeb)
	}
	// the SYN memory is the node's, not a CPU's: on a veth, unlike behind a NIC's RSS, a
	// SYN and its ACK may come in on different CPUs
	onCPU := func(cpu int, p dptest.Packet) netip.Addr {
		var out []byte
		must(b.net.Do(func() error {
			unpin, err := dptest.PinCPU(cpu)
			if err != nil {
				return err
			}
			defer unpin()
			_, out, err = dptest.RunXDP(b.lb.Program(), b.net.Port0.Index, p.Bytes())
			return err
		}))
		return outerDst(t, out)
	}
	across := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 41004, DPort: 80, Flags: dptest.SYN}
	if got := onCPU(0, across); got != dptest.Backend4(20) {
		t.Fatalf("SYN went to %s", got)
	}
	must(b.lb.PutRing(1, fill(ringSize, idWeb)))
	across.Flags = dptest.ACK
	if got := onCPU(1, across); got != dptest.Backend4(20) {
		t.Errorf("ACK on another CPU than its SYN went to %s, want its SYN's %s", got, dptest.Backend4(20))
	}
	// the SYN's backend is down by the time of the ACK: the ACK follows the ring
	must(b.lb.PutBackend(idDrainUp, datapath.Backend{Addr: dptest.Backend4(5), ServiceID: 5, State: datapath.BackendDown}))
	must(b.lb.PutRing(5, fill(ringSize, idDraining)))
	must(b.lb.PutBackend(idDraining, datapath.Backend{Addr: dptest.Backend4(6), ServiceID: 5, State: datapath.BackendUp}))
	gone.Flags = dptest.ACK
	if got := b.sendTo(t, gone); got != dptest.Backend4(6) {
		t.Errorf("ACK whose SYN's backend is down went to %s, want the ring's %s", got, dptest.Backend4(6))
	}
}

// A client that reuses its port opens a new connection on the 5-tuple of an earlier
// one: the new SYN, not the earlier flow's entry, decides where the new ACK goes. The
// SYN leaves the entry alone (it does not probe the flow table); the ACK finds it
// superseded by the SYN and reopens it with the SYN's backend.
func TestReusedTupleFollowsItsSYN(t *testing.T) {
	b := newBench(t)
	p := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 42000, DPort: 80, Flags: dptest.SYN}
	b.sendTo(t, p)
	p.Flags = dptest.ACK
	if got := b.sendTo(t, p); got != dptest.Backend4(1) {
		t.Fatalf("first connection went to %s", got)
	}
	if err := b.lb.PutBackend(20, datapath.Backend{Addr: dptest.Backend4(20), ServiceID: 1, State: datapath.BackendUp}); err != nil {
		t.Fatal(err)
	}
	if err := b.lb.PutRing(1, fill(ringSize, 20)); err != nil {
		t.Fatal(err)
	}
	p.Flags = dptest.SYN
	if got := b.sendTo(t, p); got != dptest.Backend4(20) {
		t.Fatalf("the new connection's SYN went to %s, want the ring's %s", got, dptest.Backend4(20))
	}
	p.Flags = dptest.ACK
	for i := range 3 {
		if got := b.sendTo(t, p); got != dptest.Backend4(20) {
			t.Errorf("packet %d of the new connection went to %s, want its SYN's %s", i, got, dptest.Backend4(20))
		}
	}
	if id, _ := b.lb.FlowBackend(flowOf(p)); id != 20 {
		t.Errorf("the flow entry holds backend %d after the new connection's ACK, want its SYN's 20", id)
	}
	if c, _ := b.lb.BackendCounters(20); c.NewFlows != 1 {
		t.Errorf("the new connection counted %d new flows on its backend, want 1", c.NewFlows)
	}
}

// A connection on a reused 5-tuple whose SYN picks the same backend as the earlier one
// is a new flow all the same: the node's new-flow rates (which the steering controller
// reads) count it. Its later packets are not counted again.
func TestReusedTupleCountsANewFlow(t *testing.T) {
	b := newBench(t)
	p := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 42500, DPort: 80}
	for conn := range 2 {
		for _, flags := range []dptest.TCPFlags{dptest.SYN, dptest.ACK, dptest.ACK, dptest.ACK} {
			p.Flags = flags
			if got := b.sendTo(t, p); got != dptest.Backend4(1) {
				t.Fatalf("connection %d: packet went to %s", conn, got)
			}
		}
	}
	svc, _ := b.lb.ServiceCounters(1)
	backend, _ := b.lb.BackendCounters(idWeb)
	if svc.NewFlows != 2 || backend.NewFlows != 2 || svc.Packets != 8 {
		t.Errorf("two connections of SYN and 3 ACKs on one 5-tuple: service %+v, backend %+v; want 8 packets and 2 new flows", svc, backend)
	}
}

// The SYN memory is shared by all flows: an established flow whose slot a fresh SYN of
// another 5-tuple took, or whose own SYN is still there, keeps its backend whatever the
// ring says now.
func TestEstablishedFlowIgnoresOtherSYNs(t *testing.T) {
	b := newBench(t)
	p := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 43000, DPort: 80, Flags: dptest.SYN}
	b.sendTo(t, p)
	p.Flags = dptest.ACK
	if got := b.sendTo(t, p); got != dptest.Backend4(1) {
		t.Fatalf("connection went to %s", got)
	}
	if err := b.lb.PutBackend(20, datapath.Backend{Addr: dptest.Backend4(20), ServiceID: 1, State: datapath.BackendUp}); err != nil {
		t.Fatal(err)
	}
	if err := b.lb.PutRing(1, fill(ringSize, 20)); err != nil {
		t.Fatal(err)
	}
	// SYNs of other 5-tuples into the flow's slot (the flow table hash's low bits), each
	// choosing the new ring's backend
	slot := func(q dptest.Packet) uint32 { return b.lb.SYNSlot(flowOf(q)) }
	// (one 5-tuple in 16 384 shares a slot: the search walks the ports of several clients)
	colliding := 0
	for i := 0; colliding < 3 && i < 16<<16; i++ {
		syn := dptest.Packet{Src: netip.AddrFrom4([4]byte{203, 0, 113, byte(7 + i>>16)}), Dst: vipWeb, SPort: uint16(i), DPort: 80, Flags: dptest.SYN}
		if syn.SPort < 1024 || syn.Src == p.Src && syn.SPort == p.SPort || slot(syn) != slot(p) {
			continue
		}
		colliding++
		if got := b.sendTo(t, syn); got != dptest.Backend4(20) {
			t.Fatalf("SYN from %s port %d went to %s, want the new ring's %s", syn.Src, syn.SPort, got, dptest.Backend4(20))
		}
		if got := b.sendTo(t, p); got != dptest.Backend4(1) {
			t.Fatalf("after a SYN from %s port %d into its SYN slot, the established flow went to %s, want its own %s", syn.Src, syn.SPort, got, dptest.Backend4(1))
		}
	}
	if colliding < 3 {
		t.Fatalf("found %d SYNs into the flow's slot, want 3", colliding)
	}
}

func TestBackendStates(t *testing.T) {
	b := newBench(t)
	drainFlow := dptest.Packet{Src: dptest.Client4, Dst: vipDrain, SPort: 60000, DPort: 80, Flags: dptest.ACK}
	downFlow := dptest.Packet{Src: dptest.Client4, Dst: vipDrain, SPort: 60001, DPort: 80, Flags: dptest.ACK}
	// flows established earlier on the draining and on the (now) down backend
	if err := b.lb.PutFlow(flowOf(drainFlow), idDraining, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.lb.PutFlow(flowOf(downFlow), idDown, 5); err != nil {
		t.Fatal(err)
	}
	if got := b.sendTo(t, drainFlow); got != dptest.Backend4(6) {
		t.Errorf("flow of a draining backend went to %s, want it kept on %s", got, dptest.Backend4(6))
	}
	if got := b.sendTo(t, downFlow); got != dptest.Backend4(5) {
		t.Errorf("flow of a down backend went to %s, want it re-hashed to %s", got, dptest.Backend4(5))
	}
	if id, _ := b.lb.FlowBackend(flowOf(downFlow)); id != idDrainUp {
		t.Errorf("re-hashed flow's entry points at %d, want %d", id, idDrainUp)
	}
	// marking the draining backend down moves its flow too
	if err := b.lb.PutBackend(idDraining, datapath.Backend{Addr: dptest.Backend4(6), ServiceID: 5, State: datapath.BackendDown}); err != nil {
		t.Fatal(err)
	}
	if got := b.sendTo(t, drainFlow); got != dptest.Backend4(5) {
		t.Errorf("after down, flow went to %s, want %s", got, dptest.Backend4(5))
	}
	// a ring that still names a down backend yields no backend rather than a dead one
	if err := b.lb.PutRing(5, fill(ringSize, idDown)); err != nil {
		t.Fatal(err)
	}
	before := b.drops(t)["no_backend"]
	verdict, _ := b.run(t, dptest.Packet{Src: dptest.Client4, Dst: vipDrain, SPort: 60002, DPort: 80, Flags: dptest.SYN}.Bytes())
	if verdict != dptest.XDPDrop || b.drops(t)["no_backend"] != before+1 {
		t.Errorf("new flow onto a down backend: verdict %d, no_backend %d→%d", verdict, before, b.drops(t)["no_backend"])
	}
}

// A flow entry whose backend id now belongs to another service (the id was freed and
// reused) never steers the flow there: the flow is re-hashed in its own service.
func TestFlowEntryOfAnotherService(t *testing.T) {
	b := newBench(t)
	p := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 61000, DPort: 80, Flags: dptest.ACK}
	if err := b.lb.PutFlow(flowOf(p), idRemote, 1); err != nil { // idRemote is service 4's
		t.Fatal(err)
	}
	if got := b.sendTo(t, p); got != dptest.Backend4(1) {
		t.Errorf("went to %s via another service's backend id, want %s", got, dptest.Backend4(1))
	}
}

func TestCounters(t *testing.T) {
	b := newBench(t)
	var bytes uint64
	// seven handshakes: a SYN, then the ACK that opens the flow's entry
	for i := 0; i < 7; i++ {
		p := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: uint16(62000 + i), DPort: 80, Flags: dptest.SYN, Payload: make([]byte, i)}
		b.sendTo(t, p)
		p.Flags = dptest.ACK
		b.sendTo(t, p)
		bytes += 2 * uint64(40+i)
	}
	// three more packets of the first flow: the table answers, no new flow
	for range 3 {
		b.sendTo(t, dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 62000, DPort: 80, Flags: dptest.ACK})
		bytes += 40
	}
	got, err := b.lb.BackendCounters(idWeb)
	if err != nil {
		t.Fatal(err)
	}
	if got.Packets != 17 || got.Bytes != bytes || got.NewFlows != 7 {
		t.Errorf("backend counters %+v, want 17 packets, %d bytes, 7 new flows", got, bytes)
	}
	svc, _ := b.lb.ServiceCounters(1)
	if svc != got {
		t.Errorf("service counters %+v, want %+v", svc, got)
	}
	if n, err := b.lb.FlowCount(); err != nil || n != 7 {
		t.Errorf("flow table has %d entries (%v), want 7", n, err)
	}
	if err := b.lb.DeleteBackend(idWeb); err != nil {
		t.Fatal(err)
	}
	if c, _ := b.lb.BackendCounters(idWeb); c.Packets != 0 {
		t.Errorf("a freed backend slot keeps its counters: %+v", c)
	}
}

// A service's counters are its backends' summed (the program counts per backend only).
// A deleted backend's counts stay in its service's while its slot starts afresh, and
// resetting the service id (about to serve another service) forgets them.
func TestServiceCountersSumItsBackends(t *testing.T) {
	b := newBench(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const flows = 40
	for i := range flows {
		b.sendTo(t, dptest.Packet{Src: dptest.Client4, Dst: vipMany, SPort: uint16(42000 + i), DPort: 80, Flags: dptest.ACK})
	}
	per := map[uint32]datapath.Counters{}
	var sum datapath.Counters
	var gone uint32
	for i := range 5 {
		id := uint32(idManyFirst + i)
		c, err := b.lb.BackendCounters(id)
		must(err)
		per[id] = c
		sum.Packets, sum.Bytes, sum.NewFlows = sum.Packets+c.Packets, sum.Bytes+c.Bytes, sum.NewFlows+c.NewFlows
		if c.Packets > 0 && gone == 0 {
			gone = id
		}
	}
	svc, err := b.lb.ServiceCounters(7)
	must(err)
	if svc != sum || svc.Packets != flows || svc.NewFlows != flows || per[gone].Packets == flows {
		t.Fatalf("service %+v, its backends %+v: want the sum, %d packets and new flows over more than one backend", svc, per, flows)
	}
	// the snapshot says the same, read in one bpf() call (the slots in use are few)
	reads := datapath.CounterReads()
	snap, err := b.lb.ReadCounters()
	must(err)
	if n := datapath.CounterReads() - reads; n != 1 {
		t.Errorf("a snapshot of every backend's counters took %d bpf() calls, want 1", n)
	}
	if got := snap.Service(7); got != svc {
		t.Errorf("the snapshot's service counts %+v, want %+v", got, svc)
	}
	for id, c := range per {
		if got := snap.Backend(id); got != c {
			t.Errorf("the snapshot's backend %d counts %+v, want %+v", id, got, c)
		}
	}
	must(b.lb.DeleteBackend(gone))
	if after, err := b.lb.ServiceCounters(7); err != nil || after != svc {
		t.Errorf("after backend %d was deleted the service counts %+v (%v), want %+v as before", gone, after, err, svc)
	}
	if snap, err := b.lb.ReadCounters(); err != nil || snap.Service(7) != svc || snap.Backend(gone) != (datapath.Counters{}) {
		t.Errorf("after backend %d was deleted the snapshot counts %+v for the service (%v), %+v for the slot; want %+v and nothing",
			gone, snap.Service(7), err, snap.Backend(gone), svc)
	}
	if c, err := b.lb.BackendCounters(gone); err != nil || c != (datapath.Counters{}) {
		t.Errorf("the deleted backend's slot counts %+v (%v), want nothing", c, err)
	}
	if web, err := b.lb.ServiceCounters(1); err != nil || web != (datapath.Counters{}) {
		t.Errorf("another service counts %+v (%v), want nothing", web, err)
	}
	// a slot far up: the read goes in batches up to it, 4096 slots a call
	if _, err := b.lb.PutBackends([]uint32{9000}, []datapath.Backend{{Addr: dptest.Backend4(9), ServiceID: 7, State: datapath.BackendUp}}); err != nil {
		t.Fatal(err)
	}
	reads = datapath.CounterReads()
	if snap, err := b.lb.ReadCounters(); err != nil || snap.Service(7) != svc {
		t.Errorf("with a backend at slot 9000 the snapshot counts %+v for the service (%v), want %+v", snap.Service(7), err, svc)
	}
	if n := datapath.CounterReads() - reads; n != 3 {
		t.Errorf("a snapshot up to slot 9000 took %d bpf() calls, want 3", n)
	}
	must(b.lb.ResetServiceCounters(7))
	want := svc
	want.Packets, want.Bytes, want.NewFlows = svc.Packets-per[gone].Packets, svc.Bytes-per[gone].Bytes, svc.NewFlows-per[gone].NewFlows
	if reset, err := b.lb.ServiceCounters(7); err != nil || reset != want {
		t.Errorf("after a reset the service counts %+v (%v), want its live backends' %+v", reset, err, want)
	}
}
