package datapath_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// A client packet that would not fit the egress MTU (1500 on the bench's links) once
// encapsulated is answered with "fragmentation needed" (DF set) / "packet too big"
// carrying the MTU that does fit; without DF it is dropped and counted.
func TestTooBigAfterEncapsulation(t *testing.T) {
	b := newBench(t)
	c4, c6 := dptest.Client4, dptest.Client6
	// IP packets of exactly 1500 bytes
	big4 := func(vip netip.Addr, df bool, vlan uint16) dptest.Packet {
		return dptest.Packet{Src: c4, Dst: vip, SPort: 43000, DPort: 80, Flags: dptest.ACK, DF: df, VLAN: vlan, Payload: make([]byte, 1500-40)}
	}
	big6 := func(vip netip.Addr) dptest.Packet {
		return dptest.Packet{Src: c6, Dst: vip, SPort: 43000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 1500-60)}
	}
	cases := []struct {
		name    string
		pkt     dptest.Packet
		verdict uint32
		mtu     uint32 // of the answer; 0: dropped as too_big
	}{
		{"IPv4 IPIP, DF", big4(vipWeb, true, 0), dptest.XDPTX, 1500 - 20},
		{"IPv4 GUE, DF", big4(vipGUE, true, 0), dptest.XDPTX, 1500 - 28},
		{"IPv4 VLAN-tagged, DF", big4(vipWeb, true, 9), dptest.XDPTX, 1480},
		{"IPv4 without DF is dropped", big4(vipWeb, false, 0), dptest.XDPDrop, 0},
		{"IPv6 IPIP", big6(vip6), dptest.XDPTX, 1500 - 40},
		{"IPv6 GUE", big6(vipGUE6), dptest.XDPTX, 1500 - 48},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.pkt.Bytes()
			drops, events := b.drops(t), b.events(t)
			verdict, out := b.run(t, in)
			if verdict != c.verdict {
				t.Fatalf("verdict %d, want %d", verdict, c.verdict)
			}
			if c.mtu == 0 {
				checkDrops(t, drops, b.drops(t), "too_big")
				return
			}
			checkDrops(t, drops, b.drops(t), "")
			if d := b.events(t)["icmp_too_big_sent"] - events["icmp_too_big_sent"]; d != 1 {
				t.Errorf("icmp_too_big_sent grew by %d, want 1", d)
			}
			checkTooBig(t, in, out, c.pkt, c.mtu)
		})
	}
	// the largest packet that fits is forwarded
	fits := big4(vipWeb, true, 0)
	fits.Payload = fits.Payload[:1480-40]
	if verdict, out := b.run(t, fits.Bytes()); verdict != dptest.XDPTX {
		t.Errorf("a 1480-byte packet (1500 with IPIP): verdict %d, want XDP_TX", verdict)
	} else {
		checkEncap(t, fits.Bytes(), out, expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1)})
	}
}

// checkTooBig checks an ICMP "fragmentation needed" / "packet too big" the node sent
// back for client packet in (built from p).
func checkTooBig(t *testing.T, in, out []byte, p dptest.Packet, mtu uint32) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format+"\n--- got:\n%s", append(args, dptest.Decode(out).Dump())...)
	}
	if !bytes.Equal(out[0:6], in[6:12]) || !bytes.Equal(out[6:12], in[0:6]) {
		fail("MACs %x, want the client packet's swapped", out[:12])
	}
	l2 := 14
	if p.VLAN != 0 {
		l2 = 18
		if out[12] != 0x81 || binary.BigEndian.Uint16(out[14:])&0xfff != p.VLAN {
			fail("VLAN tag lost")
		}
	}
	ip, msg := splitIP(out[l2:])
	src, dst := ipAddrs(ip)
	if src != p.Dst || dst != p.Src {
		fail("answer %s → %s, want %s → %s", src, dst, p.Dst, p.Src)
	}
	quote := 128
	typ, code := uint8(3), uint8(4)
	gotMTU := uint32(binary.BigEndian.Uint16(msg[6:]))
	if p.Dst.Is6() {
		quote, typ, code = 256, 2, 0
		gotMTU = binary.BigEndian.Uint32(msg[4:])
	} else {
		if ip[6]&0x40 == 0 || ip[8] != 64 || ip[9] != 1 || !validIPv4Checksum(ip) {
			fail("outer IPv4 header: flags %#x TTL %d protocol %d, want DF, 64, ICMP, valid checksum", ip[6], ip[8], ip[9])
		}
		if binary.BigEndian.Uint16(msg[4:]) != 0 {
			fail("unused field %#x, want 0", msg[4:6])
		}
	}
	if len(out) != l2+len(ip)+8+quote || len(msg) != 8+quote {
		fail("length %d, want %d (headers and a %d-byte quote)", len(out), l2+len(ip)+8+quote, quote)
		return
	}
	switch {
	case msg[0] != typ || msg[1] != code:
		fail("type %d code %d, want %d %d", msg[0], msg[1], typ, code)
	case gotMTU != mtu:
		fail("MTU %d, want %d", gotMTU, mtu)
	case !bytes.Equal(msg[8:], in[l2:l2+quote]):
		fail("the quote is not the first %d bytes of the client's packet", quote)
	case !validICMPChecksum(ip, msg):
		fail("ICMP checksum is wrong")
	}
}
