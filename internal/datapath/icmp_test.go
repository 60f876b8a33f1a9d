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

// onesSum is the Internet checksum's one's-complement sum of b (and of more words).
func onesSum(b []byte, more ...uint32) uint32 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for _, m := range more {
		sum += m
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return sum
}

// validICMPChecksum checks the checksum of an ICMP (v4) message, or of an ICMPv6 message
// with the IPv6 header in front of it.
func validICMPChecksum(ip, msg []byte) bool {
	if ip[0]>>4 == 4 {
		return onesSum(msg) == 0xffff
	}
	return onesSum(append(append([]byte{}, ip[8:40]...), msg...), uint32(len(msg)), 58) == 0xffff
}

// icmpTo builds an ICMP / ICMPv6 message from `from` to `to` with the given type, code,
// the 4 bytes after the checksum, and payload.
func icmpTo(from, to netip.Addr, typ, code uint8, rest uint32, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: dptest.RouterMAC, DstMAC: dptest.ClientMAC}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], rest)
	body := gopacket.Payload(append(b[:], payload...))
	if to.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: from.AsSlice(), DstIP: to.AsSlice()}
		icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code),
			Id: binary.BigEndian.Uint16(b[:]), Seq: binary.BigEndian.Uint16(b[2:])}
		return dptest.Serialize(eth, ip, icmp, gopacket.Payload(payload))
	}
	eth.EthernetType = layers.EthernetTypeIPv6
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: from.AsSlice(), DstIP: to.AsSlice()}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	icmp.SetNetworkLayerForChecksum(ip)
	return dptest.Serialize(eth, ip, icmp, body)
}

// reply is the packet a backend sent to the client for flow p (DSR: from the VIP), as
// an ICMP error quotes it: its IP packet, cut to n bytes.
func reply(p dptest.Packet, n int) []byte {
	r := p
	r.Src, r.Dst, r.SPort, r.DPort = p.Dst, p.Src, p.DPort, p.SPort
	r.Flags = dptest.ACK
	r.Payload = make([]byte, 1400)
	return ipPacket(r.Bytes()[14:])[:n]
}

func TestICMPEcho(t *testing.T) {
	b := newBench(t)
	for _, c := range []struct {
		name        string
		client, vip netip.Addr
		req, rep    uint8
	}{
		{"IPv4", dptest.Client4, vipWeb, 8, 0},
		{"IPv6", dptest.Client6, vip6, 128, 129},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := icmpTo(c.client, c.vip, c.req, 0, 0x12340007, []byte("ping payload"))
			before := b.events(t)
			verdict, out := b.run(t, in)
			if verdict != dptest.XDPTX {
				t.Fatalf("verdict %d, want XDP_TX (answered)", verdict)
			}
			if d := b.events(t)["icmp_echo_reply"] - before["icmp_echo_reply"]; d != 1 {
				t.Errorf("icmp_echo_reply grew by %d, want 1", d)
			}
			if !bytes.Equal(out[0:6], in[6:12]) || !bytes.Equal(out[6:12], in[0:6]) {
				t.Errorf("MACs not swapped: %x → %x", in[:12], out[:12])
			}
			ip, msg := splitIP(out[14:])
			inIP, inMsg := splitIP(in[14:])
			src, dst := ipAddrs(ip)
			if src != c.vip || dst != c.client {
				t.Errorf("reply %s → %s, want %s → %s", src, dst, c.vip, c.client)
			}
			if msg[0] != c.rep || msg[1] != 0 || !bytes.Equal(msg[4:], inMsg[4:]) || len(ip) != len(inIP) {
				t.Errorf("reply type %d code %d, want %d 0 with id, sequence and data of the request", msg[0], msg[1], c.rep)
			}
			if !validICMPChecksum(ip, msg) {
				t.Errorf("reply checksum is wrong:\n%s", dptest.Decode(out).Dump())
			}
			if c.vip.Is4() && !validIPv4Checksum(ip) {
				t.Error("reply IPv4 header checksum is wrong")
			}
		})
	}
}

// splitIP splits an IP packet (no options) into header and payload.
func splitIP(pkt []byte) ([]byte, []byte) {
	pkt = ipPacket(pkt)
	if pkt[0]>>4 == 4 {
		return pkt[:20], pkt[20:]
	}
	return pkt[:40], pkt[40:]
}

func ipAddrs(ip []byte) (src, dst netip.Addr) {
	if ip[0]>>4 == 4 {
		src, _ = netip.AddrFromSlice(ip[12:16])
		dst, _ = netip.AddrFromSlice(ip[16:20])
		return
	}
	src, _ = netip.AddrFromSlice(ip[8:24])
	dst, _ = netip.AddrFromSlice(ip[24:40])
	return
}

func (b *bench) events(t testing.TB) map[string]uint64 {
	t.Helper()
	e, err := b.lb.Events()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// An ICMP error about a VIP flow's reply ("fragmentation needed" / "packet too big",
// port unreachable, time exceeded) goes to the flow's backend, the one that sent the
// reply, whatever the ring says now; and it creates no flow entry.
func TestICMPErrorsGoToTheFlowsBackend(t *testing.T) {
	b := newBench(t)
	router4, router6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:ff::1")
	table := manyTable(t)
	pinned := dptest.Packet{Src: dptest.Client4, Dst: vipMany, SPort: 41000, DPort: 80, Flags: dptest.ACK}
	ring := uint32(idManyFirst) + uint32(table[datapath.FlowHash(flowOf(pinned), false)%65537])
	other := uint32(idManyFirst) + (ring-idManyFirst+1)%5 // a backend the ring does not pick
	if err := b.lb.PutFlow(flowOf(pinned), other, 7); err != nil {
		t.Fatal(err)
	}
	fresh := dptest.Packet{Src: dptest.Client4, Dst: vipMany, SPort: 41001, DPort: 80}
	freshBackend := uint32(idManyFirst) + uint32(table[datapath.FlowHash(flowOf(fresh), false)%65537])
	v6 := dptest.Packet{Src: dptest.Client6, Dst: vip6, SPort: 41000, DPort: 80}
	gue6 := dptest.Packet{Src: dptest.Client6, Dst: vipGUE6, SPort: 41000, DPort: 80}
	fragNeeded := func(p dptest.Packet) []byte {
		return icmpTo(router4, p.Dst, 3, 4, 1400, reply(p, 28+40))
	}
	tooBig := func(p dptest.Packet) []byte {
		return icmpTo(router6, p.Dst, 2, 0, 1280, reply(p, 40+200))
	}
	portUnreachable := func(p dptest.Packet) []byte { return icmpTo(dptest.Client4, p.Dst, 3, 3, 0, reply(p, 28)) }
	timeExceeded := func(p dptest.Packet) []byte { return icmpTo(router4, p.Dst, 11, 0, 0, reply(p, 28)) }
	portUnreachable6 := func(p dptest.Packet) []byte { return icmpTo(dptest.Client6, p.Dst, 1, 4, 0, reply(p, 48)) }
	timeExceeded6 := func(p dptest.Packet) []byte { return icmpTo(router6, p.Dst, 3, 0, 0, reply(p, 48)) }
	backend := func(id uint32) netip.Addr { return dptest.Backend4(10 + int(id-idManyFirst)) }
	mac := func(id uint32) []byte { return dptest.NeighMAC(10 + int(id-idManyFirst)) }
	cases := []struct {
		name string
		pkt  []byte
		want expectEncap
	}{
		{"IPv4, flow in the table: its backend, not the ring's", fragNeeded(pinned), expectEncap{backend: backend(other), dstMAC: mac(other)}},
		{"IPv4, flow unknown here: the ring's choice", fragNeeded(fresh), expectEncap{backend: backend(freshBackend), dstMAC: mac(freshBackend)}},
		{"IPv6 packet too big", tooBig(v6), expectEncap{backend: dptest.Backend6(3), dstMAC: dptest.NeighMAC(3)}},
		{"IPv6 packet too big, GUE service", tooBig(gue6), expectEncap{backend: dptest.Backend6(9), dstMAC: dptest.NeighMAC(9), guePort: 6081}},
		{"IPv4 port unreachable, flow in the table", portUnreachable(pinned), expectEncap{backend: backend(other), dstMAC: mac(other)}},
		{"IPv4 time exceeded, flow unknown here", timeExceeded(fresh), expectEncap{backend: backend(freshBackend), dstMAC: mac(freshBackend)}},
		{"IPv6 port unreachable", portUnreachable6(v6), expectEncap{backend: dptest.Backend6(3), dstMAC: dptest.NeighMAC(3)}},
		{"IPv6 time exceeded", timeExceeded6(v6), expectEncap{backend: dptest.Backend6(3), dstMAC: dptest.NeighMAC(3)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flows, _ := b.lb.FlowCount()
			before := b.events(t)
			verdict, out := b.run(t, c.pkt)
			if verdict != dptest.XDPTX {
				t.Fatalf("verdict %d, want XDP_TX\n%s", verdict, dptest.Decode(c.pkt).Dump())
			}
			checkEncap(t, c.pkt, out, c.want)
			if d := b.events(t)["icmp_to_backend"] - before["icmp_to_backend"]; d != 1 {
				t.Errorf("icmp_to_backend grew by %d, want 1", d)
			}
			if n, _ := b.lb.FlowCount(); n != flows {
				t.Errorf("flow table went from %d to %d entries: an ICMP error must not create flows", flows, n)
			}
		})
	}
}

// ICMP to a VIP address that the node neither answers nor forwards passes to the
// kernel untouched; broken errors about VIP flows are dropped and counted.
func TestICMPOther(t *testing.T) {
	b := newBench(t)
	router := netip.MustParseAddr("192.0.2.1")
	p := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 42000, DPort: 80}
	notOurs := dptest.Packet{Src: dptest.Client4, Dst: netip.MustParseAddr("198.51.100.99"), SPort: 42000, DPort: 80}
	noService := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 42000, DPort: 8080}
	p6 := dptest.Packet{Src: dptest.Client6, Dst: vip6, SPort: 42000, DPort: 80}
	echoWithOptions := tamperICMPv4(icmpTo(dptest.Client4, vipWeb, 8, 0, 1, nil))
	cases := []struct {
		name    string
		pkt     []byte
		verdict uint32
		drop    string
	}{
		{"redirect passes", icmpTo(router, vipWeb, 5, 1, 0, reply(p, 28)), dptest.XDPPass, ""},
		{"source quench passes", icmpTo(router, vipWeb, 4, 0, 0, reply(p, 28)), dptest.XDPPass, ""},
		{"parameter problem passes", icmpTo(router, vipWeb, 12, 0, 0, reply(p, 28)), dptest.XDPPass, ""},
		{"IPv6 parameter problem passes", icmpTo(netip.MustParseAddr("2001:db8:ff::1"), vip6, 4, 0, 0, reply(p6, 48)), dptest.XDPPass, ""},
		{"port unreachable quoting a port without service passes", icmpTo(dptest.Client4, vipWeb, 3, 3, 0, reply(noService, 28)), dptest.XDPPass, ""},
		{"echo reply to the VIP passes", icmpTo(dptest.Client4, vipWeb, 0, 0, 1, nil), dptest.XDPPass, ""},
		{"echo request with IP options passes", echoWithOptions, dptest.XDPPass, ""},
		{"frag-needed quoting another source passes", icmpTo(router, vipWeb, 3, 4, 1400, reply(notOurs, 28)), dptest.XDPPass, ""},
		{"frag-needed quoting a port without service passes", icmpTo(router, vipWeb, 3, 4, 1400, reply(noService, 28)), dptest.XDPPass, ""},
		{"IPv6 neighbour solicitation for the VIP passes", icmpTo(dptest.Client6, vip6, 135, 0, 0, vip6.AsSlice()), dptest.XDPPass, ""},
		{"frag-needed with its quote cut short dropped", icmpTo(router, vipWeb, 3, 4, 1400, reply(p, 22)), dptest.XDPDrop, "truncated"},
		{"frag-needed quoting a non-IPv4 header dropped", icmpTo(router, vipWeb, 3, 4, 1400, append([]byte{0x65}, reply(p, 28)[1:]...)), dptest.XDPDrop, "malformed"},
		{"ICMP header cut short dropped", cut(icmpTo(router, vipWeb, 3, 4, 1400, nil), 14+20+4), dptest.XDPDrop, "truncated"},
		{"ICMP fragment to the VIP dropped", func() []byte {
			f := icmpTo(dptest.Client4, vipWeb, 8, 0, 1, nil)
			f[14+6] = 0x20 // more fragments
			return f
		}(), dptest.XDPDrop, "fragment"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.drops(t)
			verdict, out := b.run(t, c.pkt)
			if verdict != c.verdict {
				t.Fatalf("verdict %d, want %d\n%s", verdict, c.verdict, dptest.Decode(c.pkt).Dump())
			}
			if c.verdict == dptest.XDPPass && !bytes.Equal(out, c.pkt) {
				t.Error("XDP_PASS changed the packet")
			}
			checkDrops(t, before, b.drops(t), c.drop)
		})
	}
}

// checkDrops checks that exactly the drop counter `reason` (none if "") grew by one.
func checkDrops(t *testing.T, before, after map[string]uint64, reason string) {
	t.Helper()
	for r, n := range after {
		want := before[r]
		if r == reason {
			want++
		}
		if n != want {
			t.Errorf("drop counter %s: %d → %d, want %d", r, before[r], n, want)
		}
	}
}

// tamperICMPv4 gives an IPv4 ICMP packet 4 bytes of IP options (NOPs, EOL).
func tamperICMPv4(pkt []byte) []byte {
	p := dptest.Decode(pkt)
	ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	icmp := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	return dptest.Serialize(p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet), ip, icmp, gopacket.Payload(icmp.Payload))
}
