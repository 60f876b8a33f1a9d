package datapath_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// in returns an address of prefix p (its network address plus host).
func in(p netip.Prefix, host byte) netip.Addr {
	b := p.Addr().AsSlice()
	b[len(b)-1] = host
	a, _ := netip.AddrFromSlice(b)
	return a
}

// transitForwarded checks a routed packet against the one sent: new MACs, TTL / hop
// limit one lower (IPv4 checksum still valid), every other byte as it was.
func transitForwarded(t *testing.T, sent, got []byte, dstMAC, srcMAC net.HardwareAddr) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format+"\n--- sent:\n%s--- got:\n%s", append(args, dptest.Decode(sent).Dump(), dptest.Decode(got).Dump())...)
	}
	got = got[:len(sent)]
	if !bytes.Equal(got[0:6], dstMAC) || !bytes.Equal(got[6:12], srcMAC) {
		fail("MACs %x → %x, want %s → %s", got[6:12], got[0:6], srcMAC, dstMAC)
	}
	want := append([]byte(nil), sent...)
	copy(want[0:6], dstMAC)
	copy(want[6:12], srcMAC)
	if sent[14]>>4 == 4 {
		want[14+8]--
		if !validIPv4Checksum(got[14 : 14+20]) {
			fail("IPv4 header checksum is wrong")
		}
		binary.BigEndian.PutUint16(want[14+10:], 0)
		binary.BigEndian.PutUint16(got[14+10:], 0) // compared above, not byte for byte
	} else {
		want[14+7]--
	}
	if !bytes.Equal(got, want) {
		fail("routed packet differs from the one sent beyond MACs and TTL")
	}
}

func TestTransit(t *testing.T) {
	b := newBench(t)
	if err := b.lb.PutSettings(datapath.Settings{ForwardTransit: true}); err != nil {
		t.Fatal(err)
	}
	c4, c6 := dptest.Client4, dptest.Client6
	tx4, tx6 := in(dptest.TransitTX4, 1), in(dptest.TransitTX6, 1)
	port0, port1 := b.net.Port0.HardwareAddr, b.net.Port1.HardwareAddr
	withOptions := tamper(dptest.Packet{Src: c4, Dst: tx4, SPort: 1, DPort: 80}, true, func(ls []gopacket.SerializableLayer) {
		ls[1].(*layers.IPv4).Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	})
	multicastFrame := dptest.Packet{Src: c4, Dst: tx4, SPort: 1, DPort: 80}.Bytes()
	copy(multicastFrame[0:6], []byte{0x01, 0x00, 0x5e, 0, 0, 5})
	hopByHop := dptest.Packet{Src: c6, Dst: tx6, SPort: 1, DPort: 80}.Bytes()
	hopByHop[14+6] = 0

	cases := []struct {
		name    string
		pkt     []byte
		verdict uint32
		dstMAC  net.HardwareAddr // routed: the next hop's; nil: passed untouched
		srcMAC  net.HardwareAddr
	}{
		{"IPv4 TCP, next hop on the ingress link", dptest.Packet{Src: c4, Dst: tx4, SPort: 40000, DPort: 443, Flags: dptest.ACK, Payload: []byte("data"), TOS: 0x28, DF: true}.Bytes(),
			dptest.XDPTX, dptest.NeighMAC(1), port0},
		{"IPv4 UDP, next hop on another port (redirect)", dptest.Packet{Src: c4, Dst: in(dptest.TransitRedirect4, 9), SPort: 5353, DPort: 53, UDP: true, Payload: []byte("q")}.Bytes(),
			dptest.XDPRedirect, dptest.NeighMAC(1), port1},
		{"IPv4 TTL 2 leaves with TTL 1", dptest.Packet{Src: c4, Dst: tx4, SPort: 1, DPort: 80, TTL: 2}.Bytes(), dptest.XDPTX, dptest.NeighMAC(1), port0},
		{"IPv4 TTL 255 (checksum carry)", dptest.Packet{Src: c4, Dst: tx4, SPort: 1, DPort: 80, TTL: 255}.Bytes(), dptest.XDPTX, dptest.NeighMAC(1), port0},
		{"IPv6 TCP, hop limit decremented", dptest.Packet{Src: c6, Dst: tx6, SPort: 40000, DPort: 443, Flags: dptest.ACK, TOS: 0xb8}.Bytes(),
			dptest.XDPTX, dptest.NeighMAC(1), port0},
		{"IPv6 UDP", dptest.Packet{Src: c6, Dst: in(dptest.TransitTX6, 0x77), SPort: 5353, DPort: 53, UDP: true}.Bytes(), dptest.XDPTX, dptest.NeighMAC(1), port0},

		{"IPv4 TTL 1: the kernel sends time exceeded", dptest.Packet{Src: c4, Dst: tx4, SPort: 1, DPort: 80, TTL: 1}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv6 hop limit 1", dptest.Packet{Src: c6, Dst: tx6, SPort: 1, DPort: 80, TTL: 1}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv4 options", withOptions, dptest.XDPPass, nil, nil},
		{"IPv6 hop-by-hop options", hopByHop, dptest.XDPPass, nil, nil},
		{"IPv4 next hop not resolved", dptest.Packet{Src: c4, Dst: in(dptest.TransitNoNeigh4, 1), SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv6 next hop not resolved", dptest.Packet{Src: c6, Dst: in(dptest.TransitNoNeigh6, 1), SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv4 for the node itself", dptest.Packet{Src: c4, Dst: dptest.NodeAddr4, SPort: 1, DPort: 22}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv6 for the node itself", dptest.Packet{Src: c6, Dst: dptest.NodeAddr6, SPort: 1, DPort: 22}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv4 no route", dptest.Packet{Src: c4, Dst: netip.MustParseAddr("192.0.2.99"), SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv4 link-local destination (routed in the FIB)", dptest.Packet{Src: c4, Dst: in(dptest.LinkLocal4, 5), SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv4 link-local source", dptest.Packet{Src: netip.MustParseAddr("169.254.3.3"), Dst: tx4, SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv6 link-local destination (a neighbour)", dptest.Packet{Src: c6, Dst: dptest.LinkLocal6, SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv6 link-local source", dptest.Packet{Src: netip.MustParseAddr("fe80::7"), Dst: tx6, SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv4 loopback source", dptest.Packet{Src: netip.MustParseAddr("127.0.0.1"), Dst: tx4, SPort: 1, DPort: 80}.Bytes(), dptest.XDPPass, nil, nil},
		{"IPv4 multicast destination", dptest.Packet{Src: c4, Dst: netip.MustParseAddr("224.0.0.5"), SPort: 1, DPort: 80, UDP: true}.Bytes(), dptest.XDPPass, nil, nil},
		{"multicast frame", multicastFrame, dptest.XDPPass, nil, nil},
		{"VLAN-tagged", dptest.Packet{Src: c4, Dst: tx4, SPort: 1, DPort: 80, VLAN: 7}.Bytes(), dptest.XDPPass, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.events(t)["transit_forwarded"]
			verdict, out := b.run(t, c.pkt)
			if verdict != c.verdict {
				t.Fatalf("verdict %d, want %d\n%s", verdict, c.verdict, dptest.Decode(c.pkt).Dump())
			}
			routed := uint64(0)
			if c.dstMAC == nil {
				if !bytes.Equal(out, c.pkt) {
					t.Errorf("XDP_PASS changed the packet")
				}
			} else {
				routed = 1
				transitForwarded(t, c.pkt, out, c.dstMAC, c.srcMAC)
			}
			if n := b.events(t)["transit_forwarded"] - before; n != routed {
				t.Errorf("transit_forwarded grew by %d, want %d", n, routed)
			}
		})
	}

	t.Run("VIP traffic is still balanced", func(t *testing.T) {
		syn := dptest.Packet{Src: c4, Dst: vipWeb, SPort: 40100, DPort: 80, Flags: dptest.SYN}.Bytes()
		verdict, out := b.run(t, syn)
		if verdict != dptest.XDPTX {
			t.Fatalf("verdict %d, want XDP_TX", verdict)
		}
		checkEncap(t, syn, out, expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1)})
	})
	t.Run("off: transit passes to the kernel", func(t *testing.T) {
		if err := b.lb.PutSettings(datapath.Settings{}); err != nil {
			t.Fatal(err)
		}
		pkt := cases[0].pkt
		if verdict, out := b.run(t, pkt); verdict != dptest.XDPPass || !bytes.Equal(out, pkt) {
			t.Errorf("verdict %d (want XDP_PASS), packet changed: %v", verdict, !bytes.Equal(out, pkt))
		}
	})
}
