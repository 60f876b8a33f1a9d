package datapath_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
	"github.com/manifoldlb/manifold/internal/maglev"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// bench is a loaded program in a private namespace, with a fixed set of services.
type bench struct {
	lb  *datapath.LB
	net *dptest.Net
}

var (
	vipWeb   = netip.MustParseAddr("198.51.100.10") // :80 tcp → backend 1; :53 udp → backend 2
	vipAny   = netip.MustParseAddr("198.51.100.20") // every tcp port → remote backend (redirect)
	vipDrain = netip.MustParseAddr("198.51.100.30") // :80 tcp, up + draining + down backends
	vipEmpty = netip.MustParseAddr("198.51.100.40") // :80 tcp, no backends at all
	vipMany  = netip.MustParseAddr("198.51.100.50") // :80 tcp, 5 backends on a real Maglev ring
	vip6     = netip.MustParseAddr("2001:db8:100::10")
	vipGUE   = netip.MustParseAddr("198.51.100.60")    // :80 tcp, GUE to port 6080 → backend 8
	vipGUE6  = netip.MustParseAddr("2001:db8:100::60") // :80 tcp, GUE to port 6081 → backend 9
)

// Backend ids of the fixed services.
const (
	idWeb, idDNS, idV6, idRemote, idDrainUp, idDraining, idDown = 1, 2, 3, 4, 5, 6, 7
	idGUE, idGUE6                                               = 8, 9
	idManyFirst                                                 = 10 // 10..14
	ringSize                                                    = 13
)

func requireRoot(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "BPF tests need root (BPF_PROG_TEST_RUN, network namespaces)")
}

func newBench(t testing.TB) *bench {
	t.Helper()
	return newBenchWithFlows(t, 4096)
}

// newBenchWithFlows is newBench with a flow table of flowTableSize entries.
func newBenchWithFlows(t testing.TB, flowTableSize uint32) *bench {
	t.Helper()
	requireRoot(t)
	n, err := dptest.NewNet()
	if err != nil {
		t.Fatalf("test namespace: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, NodeAddr6: dptest.NodeAddr6, FlowTableSize: flowTableSize})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { lb.Close() })
	b := &bench{lb: lb, net: n}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// one backend per service, a ring that is that backend everywhere
	single := []struct {
		key       datapath.ServiceKey
		svc, back uint32
		addr      netip.Addr
	}{
		{datapath.ServiceKey{VIP: vipWeb, Port: 80, Proto: 6}, 1, idWeb, dptest.Backend4(1)},
		{datapath.ServiceKey{VIP: vipWeb, Port: 53, Proto: 17}, 2, idDNS, dptest.Backend4(2)},
		{datapath.ServiceKey{VIP: vip6, Port: 80, Proto: 6}, 3, idV6, dptest.Backend6(3)},
		{datapath.ServiceKey{VIP: vipAny, Port: 0, Proto: 6}, 4, idRemote, dptest.Remote4(4)},
		{datapath.ServiceKey{VIP: vipDrain, Port: 80, Proto: 6}, 5, idDrainUp, dptest.Backend4(5)},
	}
	for _, s := range single {
		must(lb.PutBackend(s.back, datapath.Backend{Addr: s.addr, ServiceID: s.svc, State: datapath.BackendUp}))
		must(lb.PutRing(s.svc, fill(ringSize, s.back)))
		must(lb.PutService(s.key, datapath.Service{ID: s.svc}))
	}
	must(lb.PutBackend(idDraining, datapath.Backend{Addr: dptest.Backend4(6), ServiceID: 5, State: datapath.BackendDraining}))
	must(lb.PutBackend(idDown, datapath.Backend{Addr: dptest.Backend4(7), ServiceID: 5, State: datapath.BackendDown}))
	must(lb.PutService(datapath.ServiceKey{VIP: vipEmpty, Port: 80, Proto: 6}, datapath.Service{ID: 6}))

	// GUE services (ids 8 and 9, service ids alike)
	for _, g := range []struct {
		vip, addr netip.Addr
		id        uint32
		port      uint16
	}{{vipGUE, dptest.Backend4(8), idGUE, 6080}, {vipGUE6, dptest.Backend6(9), idGUE6, 6081}} {
		must(lb.PutBackend(g.id, datapath.Backend{Addr: g.addr, ServiceID: g.id, State: datapath.BackendUp, GUE: true, GUEPort: g.port}))
		must(lb.PutRing(g.id, fill(ringSize, g.id)))
		must(lb.PutService(datapath.ServiceKey{VIP: g.vip, Port: 80, Proto: 6}, datapath.Service{ID: g.id}))
	}

	// a real Maglev ring over 5 backends
	for i := 0; i < 5; i++ {
		id := uint32(idManyFirst + i)
		must(lb.PutBackend(id, datapath.Backend{Addr: dptest.Backend4(10 + i), ServiceID: 7, State: datapath.BackendUp}))
	}
	table := manyTable(t)
	ring := make([]uint32, len(table))
	for i, idx := range table {
		ring[i] = uint32(idManyFirst) + uint32(idx)
	}
	must(lb.PutRing(7, ring))
	must(lb.PutService(datapath.ServiceKey{VIP: vipMany, Port: 80, Proto: 6}, datapath.Service{ID: 7}))

	for _, a := range []netip.Addr{vipWeb, vipAny, vipDrain, vipEmpty, vipMany, vip6, vipGUE, vipGUE6} {
		must(lb.PutVIPAddr(a, 1))
	}
	must(n.Do(func() error { return lb.PutTxPort(n.Port1.Index) })) // ifindex is resolved in the caller's netns
	return b
}

// manyTable is the Maglev table of the five-backend service: index i → Backend4(10+i).
func manyTable(t testing.TB) []int32 {
	var mb []maglev.Backend
	for i := 0; i < 5; i++ {
		mb = append(mb, maglev.Backend{Key: dptest.Backend4(10 + i).String(), Weight: 1})
	}
	table, err := maglev.Build("many", mb, 65537)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func fill(n int, id uint32) []uint32 {
	r := make([]uint32, n)
	for i := range r {
		r[i] = id
	}
	return r
}

func (b *bench) run(t testing.TB, pkt []byte) (uint32, []byte) {
	t.Helper()
	var (
		verdict uint32
		out     []byte
	)
	err := b.net.Do(func() (err error) {
		verdict, out, err = dptest.RunXDP(b.lb.Program(), b.net.Port0.Index, pkt)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return verdict, out
}

func (b *bench) drops(t testing.TB) map[string]uint64 {
	t.Helper()
	d, err := b.lb.Drops()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// expectEncap checks an encapsulated packet field by field against the client packet.
type expectEncap struct {
	backend netip.Addr
	dstMAC  []byte
	vlan    uint16     // VLAN id of the tag the output carries ...
	tagged  bool       // ... which it carries if vlan != 0 or tagged (VLAN id 0)
	guePort uint16     // 0: IPIP
	src     netip.Addr // outer source; zero: the node's address
}

// encapOuter returns what checkEncap found: the outer source and, for GUE, the UDP
// source port.
type encapOuter struct {
	src   netip.Addr
	sport uint16
}

func checkEncap(t *testing.T, in, out []byte, want expectEncap) (got encapOuter) {
	t.Helper()
	p := dptest.Decode(out)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format+"\n--- sent:\n%s--- got:\n%s", append(args, dptest.Decode(in).Dump(), p.Dump())...)
	}
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil {
		fail("no Ethernet header")
		return
	}
	if !bytes.Equal(eth.DstMAC, want.dstMAC) {
		fail("dst MAC %s, want %x (the backend's neighbour entry)", eth.DstMAC, want.dstMAC)
	}
	inL2 := 14
	if in[12] == 0x81 && in[13] == 0 {
		inL2 = 18
	}
	outL2 := 14
	if want.vlan != 0 || want.tagged {
		outL2 = 18
		q, _ := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
		if q == nil || q.VLANIdentifier != want.vlan {
			fail("VLAN tag %v, want id %d", q, want.vlan)
		}
	}
	inner := ipPacket(in[inL2:])
	v4 := want.backend.Is4()
	ipLen, udpLen := 20, 0
	if !v4 {
		ipLen = 40
	}
	if want.guePort != 0 {
		udpLen = 8
	}
	l3 := outL2
	if len(out) < l3+ipLen+udpLen+len(inner) {
		fail("output too short")
		return
	}
	hdr, udp := out[l3:l3+ipLen], out[l3+ipLen:l3+ipLen+udpLen]
	gotInner := out[l3+ipLen+udpLen : l3+ipLen+udpLen+len(inner)]
	if !bytes.Equal(gotInner, inner) {
		fail("inner packet changed")
	}
	wantSrc := want.src
	proto := layers.IPProtocolIPv4
	if want.guePort != 0 {
		proto = layers.IPProtocolUDP
	}
	if v4 {
		if !wantSrc.IsValid() {
			wantSrc = dptest.NodeAddr4
		}
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil {
			fail("no outer IPv4")
			return
		}
		inTOS, inDF := inner[1], inner[6]&0x40 != 0 // raw: fuzzed inner headers may not decode
		got.src, _ = netip.AddrFromSlice(ip.SrcIP)
		switch {
		case ip.Protocol != proto:
			fail("outer protocol %v, want %v", ip.Protocol, proto)
		case got.src != wantSrc:
			fail("outer source %s, want %s", ip.SrcIP, wantSrc)
		case !ip.DstIP.Equal(want.backend.AsSlice()):
			fail("outer destination %s, want backend %s", ip.DstIP, want.backend)
		case ip.TTL != 64:
			fail("outer TTL %d, want 64", ip.TTL)
		case int(ip.Length) != len(inner)+ipLen+udpLen:
			fail("outer length %d, want %d", ip.Length, len(inner)+ipLen+udpLen)
		case ip.TOS != inTOS:
			fail("outer TOS %d, want the inner %d", ip.TOS, inTOS)
		case (ip.Flags&layers.IPv4DontFragment != 0) != inDF:
			fail("outer DF %v, want the inner's", ip.Flags)
		case ip.IHL != 5 || ip.FragOffset != 0 || ip.Flags&layers.IPv4MoreFragments != 0:
			fail("outer IHL %d, fragment offset %d, flags %v", ip.IHL, ip.FragOffset, ip.Flags)
		}
		if !validIPv4Checksum(hdr) {
			fail("outer IPv4 checksum is wrong")
		}
	} else {
		if !wantSrc.IsValid() {
			wantSrc = dptest.NodeAddr6
		}
		ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if ip == nil {
			fail("no outer IPv6")
			return
		}
		if want.guePort == 0 {
			proto = layers.IPProtocolIPv6
		}
		got.src, _ = netip.AddrFromSlice(ip.SrcIP)
		switch {
		case ip.NextHeader != proto:
			fail("outer next header %v, want %v", ip.NextHeader, proto)
		case got.src != wantSrc:
			fail("outer source %s, want %s", ip.SrcIP, wantSrc)
		case !ip.DstIP.Equal(want.backend.AsSlice()):
			fail("outer destination %s, want backend %s", ip.DstIP, want.backend)
		case ip.HopLimit != 64:
			fail("outer hop limit %d, want 64", ip.HopLimit)
		case int(ip.Length) != len(inner)+udpLen:
			fail("outer payload length %d, want %d", ip.Length, len(inner)+udpLen)
		}
	}
	if want.guePort == 0 {
		return got
	}
	got.sport = binary.BigEndian.Uint16(udp[0:])
	switch {
	case got.sport < 49152:
		fail("GUE source port %d, want one of 49152..65535", got.sport)
	case binary.BigEndian.Uint16(udp[2:]) != want.guePort:
		fail("GUE destination port %d, want %d", binary.BigEndian.Uint16(udp[2:]), want.guePort)
	case int(binary.BigEndian.Uint16(udp[4:])) != len(inner)+8:
		fail("UDP length %d, want %d", binary.BigEndian.Uint16(udp[4:]), len(inner)+8)
	case v4 && binary.BigEndian.Uint16(udp[6:]) != 0:
		fail("UDP checksum %#x over IPv4, want 0 (none)", binary.BigEndian.Uint16(udp[6:]))
	case !v4 && validUDP6Checksum(hdr, out[l3+ipLen:l3+ipLen+udpLen+len(inner)]) != validL4Checksum6(inner):
		// derived from the inner checksum without reading the payload (encap.h): right
		// exactly when the client's own checksum is
		fail("UDP checksum over IPv6 valid: %v, the inner packet's: %v; want both or neither",
			validUDP6Checksum(hdr, out[l3+ipLen:l3+ipLen+udpLen+len(inner)]), validL4Checksum6(inner))
	}
	return got
}

// ipPacket cuts a frame's IP part (from l3 on) to the IP packet's own length, without
// the Ethernet padding of short frames.
func ipPacket(l3 []byte) []byte {
	if l3[0]>>4 == 4 {
		return l3[:int(l3[2])<<8|int(l3[3])]
	}
	return l3[:40+(int(l3[4])<<8|int(l3[5]))]
}

// validL4Checksum6 checks the TCP/UDP/ICMPv6 checksum of an IPv6 packet without
// extension headers.
func validL4Checksum6(pkt []byte) bool {
	return onesSum(append(append([]byte{}, pkt[8:40]...), pkt[40:]...), uint32(len(pkt)-40), uint32(pkt[6])) == 0xffff
}

// validUDP6Checksum checks a UDP segment's checksum against the IPv6 header in front.
func validUDP6Checksum(ip6, seg []byte) bool {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(ip6[8:40])
	sum += uint32(len(seg)) + 17
	add(seg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff && (seg[6] != 0 || seg[7] != 0)
}

func validIPv4Checksum(h []byte) bool {
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

func cut(b []byte, n int) []byte { return append([]byte(nil), b[:n]...) }

// ipv6Ext puts an 8-byte extension header of type nh (fragment: offset 0, more
// fragments) between the IPv6 header and TCP.
func ipv6Ext(p dptest.Packet, nh byte) []byte {
	b := p.Bytes()
	ext := []byte{b[14+6], 0, 0, 0, 0, 0, 0, 0}
	if nh == 44 {
		ext[3] = 1 // M flag
		ext[7] = 1 // identification
	}
	out := append(append(append([]byte{}, b[:14+40]...), ext...), b[14+40:]...)
	out[14+6] = nh
	binary.BigEndian.PutUint16(out[14+4:], binary.BigEndian.Uint16(b[14+4:])+8)
	return out
}

// tamper serializes a packet after f changed its layers (lengths are not fixed up when
// fix is false, so f's own lengths stand).
func tamper(p dptest.Packet, fix bool, f func(ls []gopacket.SerializableLayer)) []byte {
	ls := p.Layers()
	f(ls)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: fix, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func TestXDPPackets(t *testing.T) {
	b := newBench(t)
	c4, c6 := dptest.Client4, dptest.Client6
	syn := dptest.Packet{Src: c4, Dst: vipWeb, SPort: 40000, DPort: 80, Flags: dptest.SYN, DF: true, TOS: 0x28}
	ipv4Layer := func(ls []gopacket.SerializableLayer) *layers.IPv4 { return ls[1].(*layers.IPv4) }

	cases := []struct {
		name    string
		pkt     []byte
		verdict uint32
		drop    string       // drop reason that must grow by exactly one
		encap   *expectEncap // for TX / redirect
	}{
		{"TCP SYN to VIP", syn.Bytes(), dptest.XDPTX, "", &expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1), vlan: 0}},
		{"TCP established (ACK) to VIP", dptest.Packet{Src: c4, Dst: vipWeb, SPort: 40001, DPort: 80, Flags: dptest.ACK, Payload: []byte("GET / HTTP/1.1\r\n\r\n")}.Bytes(),
			dptest.XDPTX, "", &expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1), vlan: 0}},
		{"UDP to VIP", dptest.Packet{Src: c4, Dst: vipWeb, SPort: 5353, DPort: 53, UDP: true, Payload: []byte("query")}.Bytes(),
			dptest.XDPTX, "", &expectEncap{backend: dptest.Backend4(2), dstMAC: dptest.NeighMAC(2), vlan: 0}},
		{"IPv6 TCP SYN to VIP", dptest.Packet{Src: c6, Dst: vip6, SPort: 40000, DPort: 80, Flags: dptest.SYN}.Bytes(),
			dptest.XDPTX, "", &expectEncap{backend: dptest.Backend6(3), dstMAC: dptest.NeighMAC(3), vlan: 0}},
		{"wildcard port service, other link (redirect)", dptest.Packet{Src: c4, Dst: vipAny, SPort: 40000, DPort: 8443, Flags: dptest.SYN}.Bytes(),
			dptest.XDPRedirect, "", &expectEncap{backend: dptest.Remote4(4), dstMAC: dptest.NeighMAC(4), vlan: 0}},
		{"VLAN-tagged SYN keeps its tag on XDP_TX", dptest.Packet{Src: c4, Dst: vipWeb, SPort: 40002, DPort: 80, Flags: dptest.SYN, VLAN: 42}.Bytes(),
			dptest.XDPTX, "", &expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1), vlan: 42}},
		{"VLAN-tagged, redirected: tag dropped", dptest.Packet{Src: c4, Dst: vipAny, SPort: 40003, DPort: 22, Flags: dptest.SYN, VLAN: 42}.Bytes(),
			dptest.XDPRedirect, "", nil},
		{"non-VIP destination passes", dptest.Packet{Src: c4, Dst: netip.MustParseAddr("198.51.100.99"), SPort: 1, DPort: 80, Flags: dptest.SYN}.Bytes(),
			dptest.XDPPass, "", nil},
		{"VIP, wrong port passes", dptest.Packet{Src: c4, Dst: vipWeb, SPort: 1, DPort: 81, Flags: dptest.SYN}.Bytes(), dptest.XDPPass, "", nil},
		{"VIP, wrong protocol (UDP to TCP service) passes", dptest.Packet{Src: c4, Dst: vipWeb, SPort: 1, DPort: 80, UDP: true}.Bytes(), dptest.XDPPass, "", nil},
		{"non-IP frame passes", append([]byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x06}, make([]byte, 28)...), dptest.XDPPass, "", nil},
		{"Ethernet header alone passes", cut(syn.Bytes(), 14), dptest.XDPPass, "", nil},
		{"truncated VLAN tag passes", cut(dptest.Packet{Src: c4, Dst: vipWeb, SPort: 1, DPort: 80, VLAN: 5}.Bytes(), 16), dptest.XDPPass, "", nil},
		{"truncated IPv4 header passes (unknown destination)", cut(syn.Bytes(), 14+12), dptest.XDPPass, "", nil},
		{"truncated IPv6 header passes", cut(dptest.Packet{Src: c6, Dst: vip6, SPort: 1, DPort: 80}.Bytes(), 14+30), dptest.XDPPass, "", nil},
		{"truncated TCP header to VIP dropped", cut(syn.Bytes(), 14+20+10), dptest.XDPDrop, "truncated", nil},
		{"truncated UDP header to VIP dropped", cut(dptest.Packet{Src: c4, Dst: vipWeb, SPort: 1, DPort: 53, UDP: true}.Bytes(), 14+20+4), dptest.XDPDrop, "truncated", nil},
		{"truncated IPv6 TCP to VIP dropped", cut(dptest.Packet{Src: c6, Dst: vip6, SPort: 1, DPort: 80}.Bytes(), 14+40+8), dptest.XDPDrop, "truncated", nil},
		{"IPv4 total length beyond frame dropped", tamper(syn, true, func(ls []gopacket.SerializableLayer) {})[:14+20+20-1], dptest.XDPDrop, "truncated", nil},
		{"IPv4 IHL < 5 dropped", func() []byte {
			p := syn.Bytes()
			p[14] = 0x44
			return p
		}(), dptest.XDPDrop, "malformed", nil},
		{"TCP data offset < 5 dropped", func() []byte {
			p := syn.Bytes()
			p[14+20+12] = 0x40
			return p
		}(), dptest.XDPDrop, "malformed", nil},
		{"IPv4 length shorter than TCP header dropped", tamper(syn, false, func(ls []gopacket.SerializableLayer) {
			ls[0].(*layers.Ethernet).EthernetType = layers.EthernetTypeIPv4
			ip := ipv4Layer(ls)
			ip.Length = 30
			ip.IHL = 5
			ls[2].(*layers.TCP).DataOffset = 5
		}), dptest.XDPDrop, "truncated", nil},
		{"IPv4 fragment to VIP dropped", tamper(syn, true, func(ls []gopacket.SerializableLayer) {
			ipv4Layer(ls).Flags = layers.IPv4MoreFragments
		}), dptest.XDPDrop, "fragment", nil},
		{"IPv4 with options to VIP is forwarded", tamper(syn, true, func(ls []gopacket.SerializableLayer) {
			ipv4Layer(ls).Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}} // NOPs, EOL
		}), dptest.XDPTX, "", &expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1), vlan: 0}},
		{"IPv4 last fragment (offset, no MF) to VIP dropped", tamper(syn, true, func(ls []gopacket.SerializableLayer) {
			ipv4Layer(ls).FragOffset = 185
		}), dptest.XDPDrop, "fragment", nil},
		{"IPv4 first fragment of a UDP datagram to VIP dropped", tamper(dptest.Packet{Src: c4, Dst: vipWeb, SPort: 5353, DPort: 53, UDP: true, Payload: make([]byte, 64)}, true,
			func(ls []gopacket.SerializableLayer) { ipv4Layer(ls).Flags = layers.IPv4MoreFragments }), dptest.XDPDrop, "fragment", nil},
		{"IPv4 fragment to another address passes", tamper(dptest.Packet{Src: c4, Dst: netip.MustParseAddr("198.51.100.99"), SPort: 1, DPort: 80}, true,
			func(ls []gopacket.SerializableLayer) { ipv4Layer(ls).Flags = layers.IPv4MoreFragments }), dptest.XDPPass, "", nil},
		{"GRE to a VIP address passes", tamper(syn, true, func(ls []gopacket.SerializableLayer) {
			ipv4Layer(ls).Protocol = layers.IPProtocolGRE
		}), dptest.XDPPass, "", nil},
		{"IPv6 fragment header to VIP dropped", ipv6Ext(dptest.Packet{Src: c6, Dst: vip6, SPort: 1, DPort: 80}, 44), dptest.XDPDrop, "fragment", nil},
		{"IPv6 destination options to VIP dropped", ipv6Ext(dptest.Packet{Src: c6, Dst: vip6, SPort: 1, DPort: 80}, 60), dptest.XDPDrop, "ipv6_ext", nil},
		{"IPv6 routing header to VIP dropped", ipv6Ext(dptest.Packet{Src: c6, Dst: vip6, SPort: 1, DPort: 80}, 43), dptest.XDPDrop, "ipv6_ext", nil},
		{"IPv6 hop-by-hop header to VIP dropped", func() []byte {
			p := dptest.Packet{Src: c6, Dst: vip6, SPort: 1, DPort: 80}.Bytes()
			p[14+6] = 0 // next header: hop-by-hop
			return p
		}(), dptest.XDPDrop, "ipv6_ext", nil},
		{"service without backends dropped", dptest.Packet{Src: c4, Dst: vipEmpty, SPort: 1, DPort: 80, Flags: dptest.SYN}.Bytes(), dptest.XDPDrop, "no_backend", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.drops(t)
			verdict, out := b.run(t, c.pkt)
			if verdict != c.verdict {
				t.Fatalf("verdict %d, want %d\n%s", verdict, c.verdict, dptest.Decode(c.pkt).Dump())
			}
			after := b.drops(t)
			for reason, n := range after {
				want := before[reason]
				if reason == c.drop {
					want++
				}
				if n != want {
					t.Errorf("drop counter %s: %d → %d, want %d", reason, before[reason], n, want)
				}
			}
			if c.verdict == dptest.XDPPass && !bytes.Equal(out, c.pkt) {
				t.Errorf("XDP_PASS changed the packet")
			}
			if c.encap != nil {
				checkEncap(t, c.pkt, out, *c.encap)
			}
		})
	}
}

// A backend whose route leaves by a port manifold may not redirect to is a counted
// drop (no_tx_port), never a redirect, nor a forwarded packet in the counters.
func TestRedirectToAPortNotOursIsDropped(t *testing.T) {
	b := newBench(t)
	p := dptest.Packet{Src: dptest.Client4, Dst: vipAny, SPort: 40000, DPort: 22, Flags: dptest.ACK}
	if v, _ := b.run(t, p.Bytes()); v != dptest.XDPRedirect {
		t.Fatalf("verdict %d, want XDP_REDIRECT while the port is one of manifold's", v)
	}
	before, _ := b.lb.BackendCounters(idRemote)
	if err := b.net.Do(func() error { return b.lb.DeleteTxPort(b.net.Port1.Index) }); err != nil {
		t.Fatal(err)
	}
	if v, _ := b.run(t, p.Bytes()); v != dptest.XDPDrop {
		t.Fatalf("verdict %d, want XDP_DROP once the port is not manifold's", v)
	}
	drops, err := b.lb.Drops()
	if err != nil {
		t.Fatal(err)
	}
	if drops["no_tx_port"] != 1 {
		t.Errorf("drops %v, want one no_tx_port", drops)
	}
	if after, _ := b.lb.BackendCounters(idRemote); after.Packets != before.Packets {
		t.Errorf("the dropped packet was counted as forwarded: %d → %d", before.Packets, after.Packets)
	}
}
