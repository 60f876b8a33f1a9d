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
)

var (
	vipNAT4 = netip.MustParseAddr("198.51.100.70") // :80 tcp → backend 20 port 8080; :53 udp → backend 21, same port
	vipNAT6 = netip.MustParseAddr("2001:db8:100::70")
)

const idNATWeb, idNATDNS, idNAT6 = 20, 21, 22

func newNATBench(t *testing.T) *bench {
	b := newBench(t)
	for _, s := range []struct {
		key  datapath.ServiceKey
		id   uint32
		addr netip.Addr
		port uint16
	}{
		{datapath.ServiceKey{VIP: vipNAT4, Port: 80, Proto: 6}, idNATWeb, dptest.Backend4(idNATWeb), 8080},
		{datapath.ServiceKey{VIP: vipNAT4, Port: 53, Proto: 17}, idNATDNS, dptest.Backend4(idNATDNS), 0},
		{datapath.ServiceKey{VIP: vipNAT6, Port: 80, Proto: 6}, idNAT6, dptest.Backend6(idNAT6), 8080},
	} {
		for _, err := range []error{
			b.lb.PutBackend(s.id, datapath.Backend{Addr: s.addr, ServiceID: s.id, State: datapath.BackendUp, NAT: true, NATPort: s.port}),
			b.lb.PutRing(s.id, fill(ringSize, s.id)),
			b.lb.PutService(s.key, datapath.Service{ID: s.id}),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range []netip.Addr{vipNAT4, vipNAT6} {
		if err := b.lb.PutVIPAddr(a, 1); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// natSeen is what a translated packet carries.
type natSeen struct {
	src, dst     netip.Addr
	sport, dport uint16
}

// checkNAT decodes a translated packet, checks what must hold of every one (the IPv4
// header and L4 checksums, the payload, TTL unchanged, the next hop's MAC) and
// returns its addresses and ports.
func checkNAT(t *testing.T, sent, got []byte, dstMAC []byte) natSeen {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n--- sent:\n%s--- got:\n%s", append(args, dptest.Decode(sent).Dump(), dptest.Decode(got).Dump())...)
	}
	got = got[:len(sent)] // NAT neither grows nor shrinks a packet
	if !bytes.Equal(got[0:6], dstMAC) {
		fail("dst MAC %x, want %x", got[0:6], dstMAC)
	}
	in, out := dptest.Decode(sent), dptest.Decode(got)
	var s natSeen
	var l4 []byte
	if ip, _ := out.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip != nil {
		inIP := in.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		s.src, _ = netip.AddrFromSlice(ip.SrcIP)
		s.dst, _ = netip.AddrFromSlice(ip.DstIP)
		if !validIPv4Checksum(got[14 : 14+20]) {
			fail("IPv4 header checksum is wrong")
		}
		if ip.TTL != inIP.TTL {
			fail("TTL %d, want %d (unchanged)", ip.TTL, inIP.TTL)
		}
		l4 = got[14+20:]
		if !validL4Checksum4(got[14:], ip.Protocol) {
			fail("%v checksum is wrong", ip.Protocol)
		}
	} else {
		ip := out.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		s.src, _ = netip.AddrFromSlice(ip.SrcIP)
		s.dst, _ = netip.AddrFromSlice(ip.DstIP)
		l4 = got[14+40:]
		if !validL4Checksum6(got[14:]) {
			fail("%v checksum over IPv6 is wrong", ip.NextHeader)
		}
	}
	s.sport, s.dport = binary.BigEndian.Uint16(l4[0:]), binary.BigEndian.Uint16(l4[2:])
	if !bytes.Equal(payloadOf(in), payloadOf(out)) {
		fail("payload changed")
	}
	return s
}

func payloadOf(p gopacket.Packet) []byte {
	if app := p.ApplicationLayer(); app != nil {
		return app.Payload()
	}
	return nil
}

// validL4Checksum4 checks a TCP or UDP checksum (UDP: 0 means none) of an IPv4 packet.
func validL4Checksum4(ip []byte, proto layers.IPProtocol) bool {
	n := int(binary.BigEndian.Uint16(ip[2:]))
	seg := ip[20:n]
	if proto == layers.IPProtocolUDP && seg[6] == 0 && seg[7] == 0 {
		return true
	}
	return onesSum(append(append([]byte{}, ip[12:20]...), seg...), uint32(len(seg)), uint32(proto)) == 0xffff
}

func natPort(t *testing.T, p uint16) {
	t.Helper()
	if p < 1024 || p > 32767 {
		t.Errorf("node port %d, want one of 1024..32767 (below the kernel's ephemeral range)", p)
	}
}

func natState(t *testing.T, b *bench, backend netip.Addr, bport, nport uint16, proto uint8, want uint8, wantReplied bool) {
	t.Helper()
	state, replied, ok, err := b.lb.NATEntry(backend, bport, nport, proto)
	if err != nil || !ok {
		t.Fatalf("no NAT entry for %s:%d ← node port %d (%v)", backend, bport, nport, err)
	}
	if state != want || replied != wantReplied {
		t.Errorf("NAT entry state %d replied %v, want %d %v", state, replied, want, wantReplied)
	}
}

// A TCP flow through a NAT service, both families: the client's packets reach the
// backend from the node's address and a node port, the backend's replies reach the
// client from the VIP, the state follows the handshake and the close.
func TestNATTCP(t *testing.T) {
	b := newNATBench(t)
	for _, f := range []struct {
		name          string
		client, vip   netip.Addr
		node, backend netip.Addr
		backendID     int
		router        []byte
	}{
		{"IPv4", dptest.Client4, vipNAT4, dptest.NodeAddr4, dptest.Backend4(idNATWeb), idNATWeb, dptest.NeighMAC(dptest.ClientRouter)},
		{"IPv6", dptest.Client6, vipNAT6, dptest.NodeAddr6, dptest.Backend6(idNAT6), idNAT6, dptest.NeighMAC(dptest.ClientRouter)},
	} {
		t.Run(f.name, func(t *testing.T) {
			toBackend := func(flags dptest.TCPFlags, payload string) natSeen {
				t.Helper()
				pkt := dptest.Packet{Src: f.client, Dst: f.vip, SPort: 40000, DPort: 80, Flags: flags, Payload: []byte(payload)}.Bytes()
				verdict, out := b.run(t, pkt)
				if verdict != dptest.XDPTX {
					t.Fatalf("client → VIP: verdict %d, want XDP_TX", verdict)
				}
				s := checkNAT(t, pkt, out, dptest.NeighMAC(f.backendID))
				if s.src != f.node || s.dst != f.backend || s.dport != 8080 {
					t.Fatalf("client → VIP left as %s:%d → %s:%d, want %s:* → %s:8080", s.src, s.sport, s.dst, s.dport, f.node, f.backend)
				}
				natPort(t, s.sport)
				return s
			}
			toClient := func(nport uint16, flags dptest.TCPFlags, payload string) {
				t.Helper()
				before := b.events(t)["nat_reply"]
				pkt := dptest.Packet{Src: f.backend, Dst: f.node, SPort: 8080, DPort: nport, Flags: flags, Payload: []byte(payload)}.Bytes()
				verdict, out := b.run(t, pkt)
				if verdict != dptest.XDPTX {
					t.Fatalf("backend → node port %d: verdict %d, want XDP_TX", nport, verdict)
				}
				s := checkNAT(t, pkt, out, f.router)
				if s.src != f.vip || s.sport != 80 || s.dst != f.client || s.dport != 40000 {
					t.Fatalf("reply left as %s:%d → %s:%d, want %s:80 → %s:40000", s.src, s.sport, s.dst, s.dport, f.vip, f.client)
				}
				if n := b.events(t)["nat_reply"] - before; n != 1 {
					t.Errorf("nat_reply grew by %d, want 1", n)
				}
			}
			syn := toBackend(dptest.SYN, "")
			natState(t, b, f.backend, 8080, syn.sport, 6, datapath.NATOpening, false)
			toClient(syn.sport, dptest.TCPFlags{SYN: true, ACK: true}, "")
			natState(t, b, f.backend, 8080, syn.sport, 6, datapath.NATOpening, true)
			if s := toBackend(dptest.ACK, "GET / HTTP/1.1\r\n\r\n"); s.sport != syn.sport {
				t.Fatalf("the flow's second packet left from node port %d, its first from %d", s.sport, syn.sport)
			}
			natState(t, b, f.backend, 8080, syn.sport, 6, datapath.NATEstablished, true)
			toClient(syn.sport, dptest.ACK, "HTTP/1.1 200 OK\r\n\r\n")
			toClient(syn.sport, dptest.TCPFlags{FIN: true, ACK: true}, "")
			natState(t, b, f.backend, 8080, syn.sport, 6, datapath.NATClosing, true)
			toBackend(dptest.TCPFlags{RST: true}, "")
			natState(t, b, f.backend, 8080, syn.sport, 6, datapath.NATClosed, true)

			// not ours: another node port, another backend port, the node's own traffic
			for _, p := range []dptest.Packet{
				{Src: f.backend, Dst: f.node, SPort: 8080, DPort: syn.sport + 1, Flags: dptest.ACK},
				{Src: f.backend, Dst: f.node, SPort: 8081, DPort: syn.sport, Flags: dptest.ACK},
				{Src: f.client, Dst: f.node, SPort: 8080, DPort: syn.sport, Flags: dptest.ACK},
			} {
				pkt := p.Bytes()
				if verdict, out := b.run(t, pkt); verdict != dptest.XDPPass || !bytes.Equal(out, pkt) {
					t.Errorf("%s:%d → node port %d: verdict %d (want XDP_PASS, untouched)", p.Src, p.SPort, p.DPort, verdict)
				}
			}
			// an expired entry translates nothing, and its port is free again
			if err := b.lb.ExpireNAT(f.backend, 8080, syn.sport, 6); err != nil {
				t.Fatal(err)
			}
			reply := dptest.Packet{Src: f.backend, Dst: f.node, SPort: 8080, DPort: syn.sport, Flags: dptest.ACK}.Bytes()
			if verdict, _ := b.run(t, reply); verdict != dptest.XDPPass {
				t.Errorf("reply to an expired entry: verdict %d, want XDP_PASS", verdict)
			}
			if s := toBackend(dptest.SYN, ""); s.sport != syn.sport {
				t.Errorf("the flow reopened after expiry on node port %d, want its first candidate %d", s.sport, syn.sport)
			}
		})
	}
}

// UDP both ways; an IPv4 datagram without checksum keeps none, one with a checksum
// gets a valid one (checkNAT checks both).
func TestNATUDP(t *testing.T) {
	b := newNATBench(t)
	for _, zero := range []bool{false, true} {
		sport := uint16(5353)
		if zero {
			sport = 5354
		}
		pkt := dptest.Packet{Src: dptest.Client4, Dst: vipNAT4, SPort: sport, DPort: 53, UDP: true, Payload: []byte("query")}.Bytes()
		if zero {
			pkt[14+20+6], pkt[14+20+7] = 0, 0
		}
		verdict, out := b.run(t, pkt)
		if verdict != dptest.XDPTX {
			t.Fatalf("verdict %d, want XDP_TX", verdict)
		}
		s := checkNAT(t, pkt, out, dptest.NeighMAC(idNATDNS))
		if s.src != dptest.NodeAddr4 || s.dst != dptest.Backend4(idNATDNS) || s.dport != 53 {
			t.Fatalf("left as %s:%d → %s:%d, want node → backend:53 (the service's port kept)", s.src, s.sport, s.dst, s.dport)
		}
		if gotZero := out[14+20+6] == 0 && out[14+20+7] == 0; gotZero != zero {
			t.Errorf("UDP checksum zero: %v, want %v", gotZero, zero)
		}
		natState(t, b, dptest.Backend4(idNATDNS), 53, s.sport, 17, datapath.NATUDP, false)
		reply := dptest.Packet{Src: dptest.Backend4(idNATDNS), Dst: dptest.NodeAddr4, SPort: 53, DPort: s.sport, UDP: true, Payload: []byte("answer")}.Bytes()
		verdict, out = b.run(t, reply)
		if verdict != dptest.XDPTX {
			t.Fatalf("reply: verdict %d, want XDP_TX", verdict)
		}
		r := checkNAT(t, reply, out, dptest.NeighMAC(dptest.ClientRouter))
		if r.src != vipNAT4 || r.sport != 53 || r.dst != dptest.Client4 || r.dport != sport {
			t.Errorf("reply left as %s:%d → %s:%d", r.src, r.sport, r.dst, r.dport)
		}
		natState(t, b, dptest.Backend4(idNATDNS), 53, s.sport, 17, datapath.NATUDP, true)
	}
}

// Many flows to one backend get as many node ports: no two share (backend, port,
// node port), or replies would reach the wrong client.
func TestNATPortsDoNotCollide(t *testing.T) {
	b := newNATBench(t)
	const flows = 2000
	seen := map[uint16]uint16{}
	for i := 0; i < flows; i++ {
		cport := uint16(10000 + i)
		pkt := dptest.Packet{Src: dptest.Client4, Dst: vipNAT4, SPort: cport, DPort: 80, Flags: dptest.SYN}.Bytes()
		verdict, out := b.run(t, pkt)
		if verdict != dptest.XDPTX {
			t.Fatalf("flow %d: verdict %d, drops %v", i, verdict, b.drops(t))
		}
		nport := binary.BigEndian.Uint16(out[14+20:])
		natPort(t, nport)
		if other, ok := seen[nport]; ok {
			t.Fatalf("client ports %d and %d both got node port %d", other, cport, nport)
		}
		seen[nport] = cport
	}
}

// lb_nat_flows is only an index: a flow whose entry there was evicted finds its own
// port again among its candidates, whatever other flows hold, and keeps it.
func TestNATFlowKeepsItsPortWithoutItsIndex(t *testing.T) {
	b := newNATBench(t)
	send := func(cport uint16, flags dptest.TCPFlags) uint16 {
		t.Helper()
		pkt := dptest.Packet{Src: dptest.Client4, Dst: vipNAT4, SPort: cport, DPort: 80, Flags: flags}.Bytes()
		verdict, out := b.run(t, pkt)
		if verdict != dptest.XDPTX {
			t.Fatalf("verdict %d, want XDP_TX", verdict)
		}
		return binary.BigEndian.Uint16(out[14+20:])
	}
	// enough other flows that many of the flows' candidates are taken
	for i := range 500 {
		send(20000+uint16(i), dptest.SYN)
	}
	for i := range 50 {
		cport := uint16(30000 + i)
		first := send(cport, dptest.SYN)
		if err := b.lb.ForgetNATFlow(datapath.Flow{Src: dptest.Client4, Dst: vipNAT4, SPort: cport, DPort: 80, Proto: 6}); err != nil {
			t.Fatal(err)
		}
		if again := send(cport, dptest.ACK); again != first {
			t.Fatalf("client port %d: node port %d, then %d once its index entry was gone", cport, first, again)
		}
	}
}

// natICMPCase is a NAT flow's family in the ICMP tests: its addresses, the router that
// writes the message, the message's type and code, and how many bytes it quotes.
type natICMPCase struct {
	name                string
	client, vip, router netip.Addr
	node, backend       netip.Addr
	backendID           int
	typ, code           uint8
	quote               int
}

// A router on the client's side that cannot forward a NAT backend's reply (translated:
// from the VIP to the client) answers the VIP with "fragmentation needed" / "packet too
// big"; a client gone answers "port unreachable", a router on a loop "time exceeded".
// The node sends each to the backend translated back, as an error about the packet
// the backend itself sent (from its port to the node's address and the flow's node
// port): the outer addresses (from the node), the quote's addresses, ports, IPv4 header checksum and
// TCP checksum, and the ICMP checksum (over IPv6 with its pseudo-header) all as the
// backend's stack expects them. Without a NAT flow of that 5-tuple it passes untouched.
func TestNATICMPErrorsToBackend(t *testing.T) {
	b := newNATBench(t)
	router4, router6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:ff::1")
	v4 := natICMPCase{"IPv4", dptest.Client4, vipNAT4, router4, dptest.NodeAddr4, dptest.Backend4(idNATWeb), idNATWeb, 0, 0, 20 + 20}
	v6 := natICMPCase{"IPv6", dptest.Client6, vipNAT6, router6, dptest.NodeAddr6, dptest.Backend6(idNAT6), idNAT6, 0, 0, 40 + 20}
	kind := func(f natICMPCase, name string, typ, code uint8) natICMPCase {
		f.name, f.typ, f.code = f.name+" "+name, typ, code
		return f
	}
	for i, f := range []natICMPCase{
		kind(v4, "frag-needed", 3, 4), kind(v4, "port unreachable", 3, 3), kind(v4, "time exceeded", 11, 0),
		kind(v6, "packet too big", 2, 0), kind(v6, "port unreachable", 1, 4), kind(v6, "time exceeded", 3, 0),
	} {
		t.Run(f.name, func(t *testing.T) {
			flow := dptest.Packet{Src: f.client, Dst: f.vip, SPort: 40100 + uint16(i), DPort: 80, Flags: dptest.SYN}
			syn := flow.Bytes()
			verdict, out := b.run(t, syn)
			if verdict != dptest.XDPTX {
				t.Fatalf("client's SYN: verdict %d, want XDP_TX", verdict)
			}
			nport := checkNAT(t, syn, out, dptest.NeighMAC(f.backendID)).sport

			in := icmpTo(f.router, f.vip, f.typ, f.code, 1400, reply(flow, f.quote))
			// the quote is now the start of the packet the backend sent, byte for byte
			sent := dptest.Packet{Src: f.backend, Dst: f.node, SPort: 8080, DPort: nport, Flags: dptest.ACK, Payload: make([]byte, 1400)}
			checkTranslatedICMP(t, b, in, "icmp_to_backend", dptest.NeighMAC(f.backendID), f.node, f.backend,
				ipPacket(sent.Bytes()[14:])[:f.quote], 1400)

			// a 5-tuple the node holds no NAT flow of is the kernel's
			other := flow
			other.SPort += 100
			in = icmpTo(f.router, f.vip, f.typ, f.code, 1400, reply(other, f.quote))
			if verdict, out := b.run(t, in); verdict != dptest.XDPPass || !bytes.Equal(out, in) {
				t.Errorf("an error about a flow without NAT entry: verdict %d (want XDP_PASS, untouched)", verdict)
			}
		})
	}
}

// checkTranslatedICMP runs an ICMP error the node translates and checks what it sends:
// XDP_TX to the next hop's MAC, event counted once, outer addresses src → dst with a
// valid IPv4 header checksum, a valid ICMP checksum (ICMPv6: with its pseudo-header), the
// MTU as sent, and a quote that is wantQuote byte for byte.
func checkTranslatedICMP(t *testing.T, b *bench, in []byte, event string, mac []byte, src, dst netip.Addr, wantQuote []byte, mtu uint32) {
	t.Helper()
	before := b.events(t)[event]
	verdict, out := b.run(t, in)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n--- in:\n%s--- out:\n%s", append(args, dptest.Decode(in).Dump(), dptest.Decode(out).Dump())...)
	}
	if verdict != dptest.XDPTX {
		fail("verdict %d, want XDP_TX", verdict)
	}
	if n := b.events(t)[event] - before; n != 1 {
		t.Errorf("%s grew by %d, want 1", event, n)
	}
	out = out[:len(in)]
	if !bytes.Equal(out[0:6], mac) {
		fail("dst MAC %x, want %x", out[0:6], mac)
	}
	ip := ipPacket(out[14:])
	gotSrc, gotDst, hl := addrsOf(ip)
	if hl == 20 && !validIPv4Checksum(ip[:20]) {
		fail("outer IPv4 header checksum is wrong")
	}
	if gotSrc != src || gotDst != dst {
		fail("outer %s → %s, want %s → %s", gotSrc, gotDst, src, dst)
	}
	if !validICMPChecksum(ip, ip[hl:]) {
		fail("ICMP checksum is wrong")
	}
	if got := binary.BigEndian.Uint32(ip[hl+4:]); got != mtu && !(hl == 20 && got&0xffff == mtu) {
		fail("the word after the checksum (the MTU) %#x, want %#x as sent", got, mtu)
	}
	if got := ip[hl+8 : hl+8+len(wantQuote)]; !bytes.Equal(got, wantQuote) {
		fail("quote\n%x\nwant\n%x", got, wantQuote)
	}
}

// addrsOf returns an IP packet's source and destination and its header length.
func addrsOf(ip []byte) (src, dst netip.Addr, hl int) {
	if ip[0]>>4 == 4 {
		src, _ = netip.AddrFromSlice(ip[12:16])
		dst, _ = netip.AddrFromSlice(ip[16:20])
		return src, dst, 20
	}
	src, _ = netip.AddrFromSlice(ip[8:24])
	dst, _ = netip.AddrFromSlice(ip[24:40])
	return src, dst, 40
}

// The other way: an ICMP error about a client's packet after translation (from the
// node's address and the flow's node port to the backend), sent to the node's address
// by a router on the backend's side ("fragmentation needed" / "packet too big") or by
// the backend itself (port unreachable: no UDP socket there). The node sends the message
// to the client translated back: from the VIP, its quote the client's own packet to the
// VIP, byte for byte, checksums and all. A quote of a node port without a live NAT
// entry, and an ICMP message that is no error, pass untouched.
func TestNATICMPErrorToClient(t *testing.T) {
	b := newNATBench(t)
	routerB4, routerB6 := netip.MustParseAddr("10.0.0.250"), netip.MustParseAddr("2001:db8:ff::250")
	for _, f := range []natICMPCase{
		{"IPv4", dptest.Client4, vipNAT4, routerB4, dptest.NodeAddr4, dptest.Backend4(idNATWeb), idNATWeb, 3, 4, 20 + 20},
		{"IPv6", dptest.Client6, vipNAT6, routerB6, dptest.NodeAddr6, dptest.Backend6(idNAT6), idNAT6, 2, 0, 40 + 20},
	} {
		t.Run(f.name, func(t *testing.T) {
			flow := dptest.Packet{Src: f.client, Dst: f.vip, SPort: 40200, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 1400)}
			pkt := flow.Bytes()
			verdict, out := b.run(t, pkt)
			if verdict != dptest.XDPTX {
				t.Fatalf("client's packet: verdict %d, want XDP_TX", verdict)
			}
			nport := checkNAT(t, pkt, out, dptest.NeighMAC(f.backendID)).sport
			translated := dptest.Packet{Src: f.node, Dst: f.backend, SPort: nport, DPort: 8080, Flags: dptest.ACK, Payload: make([]byte, 1400)}

			in := icmpTo(f.router, f.node, f.typ, f.code, 1400, ipPacket(translated.Bytes()[14:])[:f.quote])
			checkTranslatedICMP(t, b, in, "nat_icmp_to_client", dptest.NeighMAC(dptest.ClientRouter), f.vip, f.client,
				ipPacket(pkt[14:])[:f.quote], 1400)

			other := translated
			other.SPort = nport + 1
			in = icmpTo(f.router, f.node, f.typ, f.code, 1400, ipPacket(other.Bytes()[14:])[:f.quote])
			if verdict, out := b.run(t, in); verdict != dptest.XDPPass || !bytes.Equal(out, in) {
				t.Errorf("too-big about a node port without NAT entry: verdict %d (want XDP_PASS, untouched)", verdict)
			}
		})
	}
	t.Run("IPv4 UDP, port unreachable from the backend", func(t *testing.T) {
		flow := dptest.Packet{Src: dptest.Client4, Dst: vipNAT4, SPort: 40300, DPort: 53, UDP: true, Payload: []byte("query")}
		pkt := flow.Bytes()
		verdict, out := b.run(t, pkt)
		if verdict != dptest.XDPTX {
			t.Fatalf("client's datagram: verdict %d, want XDP_TX", verdict)
		}
		nport := checkNAT(t, pkt, out, dptest.NeighMAC(idNATDNS)).sport
		backend := dptest.Backend4(idNATDNS)
		translated := dptest.Packet{Src: dptest.NodeAddr4, Dst: backend, SPort: nport, DPort: 53, UDP: true, Payload: []byte("query")}
		quote := ipPacket(translated.Bytes()[14:])
		in := icmpTo(backend, dptest.NodeAddr4, 3, 3, 0, quote)
		checkTranslatedICMP(t, b, in, "nat_icmp_to_client", dptest.NeighMAC(dptest.ClientRouter), vipNAT4, dptest.Client4,
			ipPacket(pkt[14:]), 0)
		// an echo request to the node is the node's own business
		echo := icmpTo(backend, dptest.NodeAddr4, 8, 0, 0x12340001, quote)
		if verdict, out := b.run(t, echo); verdict != dptest.XDPPass || !bytes.Equal(out, echo) {
			t.Errorf("echo request to the node: verdict %d (want XDP_PASS, untouched)", verdict)
		}
	})
}
