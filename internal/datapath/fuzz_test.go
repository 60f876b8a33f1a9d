package datapath_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// liveBackend is what the fuzz target knows of a backend of the bench: the VIPs it may
// receive packets for, its neighbour entry, and its encapsulation. Down backends are not
// listed: nothing may go to them.
type liveBackend struct {
	vips    []netip.Addr
	mac     []byte
	guePort uint16
}

func benchBackends() map[netip.Addr]liveBackend {
	m := map[netip.Addr]liveBackend{
		dptest.Backend4(1): {vips: []netip.Addr{vipWeb}, mac: dptest.NeighMAC(1)},
		dptest.Backend4(2): {vips: []netip.Addr{vipWeb}, mac: dptest.NeighMAC(2)},
		dptest.Backend6(3): {vips: []netip.Addr{vip6}, mac: dptest.NeighMAC(3)},
		dptest.Remote4(4):  {vips: []netip.Addr{vipAny}, mac: dptest.NeighMAC(4)},
		dptest.Backend4(5): {vips: []netip.Addr{vipDrain}, mac: dptest.NeighMAC(5)},
		dptest.Backend4(8): {vips: []netip.Addr{vipGUE}, mac: dptest.NeighMAC(8), guePort: 6080},
		dptest.Backend6(9): {vips: []netip.Addr{vipGUE6}, mac: dptest.NeighMAC(9), guePort: 6081},
	}
	for i := 10; i < 15; i++ {
		m[dptest.Backend4(i)] = liveBackend{vips: []netip.Addr{vipMany}, mac: dptest.NeighMAC(i)}
	}
	return m
}

// fuzzSeeds are packets of every kind the program handles, the fixed corpus `make test`
// runs; `go test -fuzz FuzzXDP` mutates them.
func fuzzSeeds() [][]byte {
	c4, c6 := dptest.Client4, dptest.Client6
	router := netip.MustParseAddr("192.0.2.1")
	web := dptest.Packet{Src: c4, Dst: vipWeb, SPort: 40000, DPort: 80, Flags: dptest.SYN, DF: true}
	seeds := [][]byte{
		web.Bytes(),
		dptest.Packet{Src: c4, Dst: vipWeb, SPort: 40001, DPort: 80, Flags: dptest.ACK, Payload: []byte("GET /")}.Bytes(),
		dptest.Packet{Src: c4, Dst: vipWeb, SPort: 5353, DPort: 53, UDP: true, Payload: []byte("q")}.Bytes(),
		dptest.Packet{Src: c6, Dst: vip6, SPort: 40000, DPort: 80, Flags: dptest.SYN}.Bytes(),
		dptest.Packet{Src: c4, Dst: vipAny, SPort: 40000, DPort: 22, Flags: dptest.SYN, VLAN: 42}.Bytes(),
		dptest.Packet{Src: c4, Dst: vipDrain, SPort: 40000, DPort: 80, Flags: dptest.RST}.Bytes(),
		dptest.Packet{Src: c4, Dst: vipEmpty, SPort: 40000, DPort: 80}.Bytes(),
		dptest.Packet{Src: c4, Dst: vipMany, SPort: 40000, DPort: 80, Flags: dptest.ACK}.Bytes(),
		dptest.Packet{Src: c4, Dst: vipGUE, SPort: 40000, DPort: 80, Flags: dptest.SYN, VLAN: 3}.Bytes(),
		dptest.Packet{Src: c6, Dst: vipGUE6, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: []byte("x")}.Bytes(),
		dptest.Packet{Src: c4, Dst: netip.MustParseAddr("192.0.2.99"), SPort: 1, DPort: 80}.Bytes(),
		dptest.Packet{Src: c4, Dst: vipWeb, SPort: 1, DPort: 80, DF: true, Payload: make([]byte, 1470)}.Bytes(),
		dptest.Packet{Src: c6, Dst: vipGUE6, SPort: 1, DPort: 80, Payload: make([]byte, 1450)}.Bytes(),
		ipv6Ext(dptest.Packet{Src: c6, Dst: vip6, SPort: 1, DPort: 80}, 44),
		icmpTo(c4, vipWeb, 8, 0, 7, []byte("ping")),
		icmpTo(c6, vip6, 128, 0, 7, []byte("ping")),
		icmpTo(router, vipWeb, 3, 4, 1400, reply(web, 48)),
		icmpTo(netip.MustParseAddr("2001:db8:ff::1"), vipGUE6, 2, 0, 1280, reply(dptest.Packet{Src: c6, Dst: vipGUE6, SPort: 9, DPort: 80}, 60)),
		append([]byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x06}, make([]byte, 28)...),
	}
	return seeds
}

// FuzzXDP feeds arbitrary frames through the loaded XDP program and checks, on every
// verdict: never XDP_ABORTED; XDP_PASS leaves the frame byte for byte; XDP_DROP counts
// exactly one drop reason; XDP_TX / REDIRECT is either a well-formed encapsulation of
// the frame's IP packet, intact, to a live backend of the service it is for, or an ICMP
// answer of the node's (echo reply, fragmentation needed / packet too big).
func FuzzXDP(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	b := newBench(f)
	backends := benchBackends()
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14 || len(in) > 3000 {
			return // not a frame BPF_PROG_TEST_RUN takes (14..~3500 bytes): no verdict to check
		}
		in = append([]byte(nil), in...)
		before := b.drops(t)
		verdict, out := b.run(t, in)
		after := b.drops(t)
		var grown uint64
		for r, n := range after {
			grown += n - before[r]
		}
		switch verdict {
		case dptest.XDPPass:
			if !bytes.Equal(out, in) {
				t.Fatalf("XDP_PASS changed the frame\n--- in:\n%s--- out:\n%s", dptest.Decode(in).Dump(), dptest.Decode(out).Dump())
			}
		case dptest.XDPDrop:
			if grown != 1 {
				t.Fatalf("XDP_DROP grew the drop counters by %d, want exactly 1 (%v → %v)", grown, before, after)
			}
			return
		case dptest.XDPTX, dptest.XDPRedirect:
			checkForwarded(t, in, out, verdict, backends)
		default:
			t.Fatalf("verdict %d\n%s", verdict, dptest.Decode(in).Dump())
		}
		if grown != 0 {
			t.Fatalf("verdict %d grew the drop counters by %d", verdict, grown)
		}
	})
}

func checkForwarded(t *testing.T, in, out []byte, verdict uint32, backends map[netip.Addr]liveBackend) {
	t.Helper()
	inL2, vlan, tagged := 14, uint16(0), false
	if in[12] == 0x81 && in[13] == 0 {
		inL2, vlan, tagged = 18, uint16(in[14]&0x0f)<<8|uint16(in[15]), true
	}
	if verdict == dptest.XDPTX && bytes.Equal(out[0:6], in[6:12]) && bytes.Equal(out[6:12], in[0:6]) {
		checkNodeAnswer(t, in, out, inL2)
		return
	}
	outL2 := 14
	if verdict == dptest.XDPTX && tagged {
		outL2 = 18
	} else {
		vlan, tagged = 0, false // a redirect leaves the tag behind
	}
	ip := out[outL2:]
	var dst netip.Addr
	if len(ip) >= 40 && ip[0]>>4 == 6 {
		dst, _ = netip.AddrFromSlice(ip[24:40])
	} else if len(ip) >= 20 {
		dst, _ = netip.AddrFromSlice(ip[16:20])
	}
	be, ok := backends[dst]
	if !ok {
		t.Fatalf("verdict %d to %s, not a live backend\n--- in:\n%s--- out:\n%s", verdict, dst, dptest.Decode(in).Dump(), dptest.Decode(out).Dump())
	}
	checkEncap(t, in, out, expectEncap{backend: dst, dstMAC: be.mac, vlan: vlan, tagged: tagged, guePort: be.guePort})
	_, vip := ipAddrs(ipPacket(in[inL2:]))
	for _, v := range be.vips {
		if v == vip {
			return
		}
	}
	t.Fatalf("a packet for %s went to %s, a backend of %v", vip, dst, be.vips)
}

// checkNodeAnswer checks an answer of the node itself: an echo reply, or fragmentation
// needed / packet too big, from a VIP back to the sender.
func checkNodeAnswer(t *testing.T, in, out []byte, l2 int) {
	t.Helper()
	ip, msg := splitIP(out[l2:])
	inIP := ipPacket(in[l2:])
	src, dst := ipAddrs(ip)
	inSrc, inDst := ipAddrs(inIP)
	fail := func(what string) {
		t.Helper()
		t.Fatalf("%s\n--- in:\n%s--- out:\n%s", what, dptest.Decode(in).Dump(), dptest.Decode(out).Dump())
	}
	if src != inDst || dst != inSrc {
		fail("answer not from the VIP to the sender")
	}
	switch {
	case ip[0]>>4 == 4 && msg[0] == 0, ip[0]>>4 == 6 && msg[0] == 129: // echo reply: the request's data
		if len(msg) != len(inIP)-len(ip) || !bytes.Equal(msg[4:], inIP[len(ip)+4:]) {
			fail("echo reply does not carry the request's data")
		}
		// updated, not recomputed: valid exactly when the request's was
		if validICMPChecksum(ip, msg) != validICMPChecksum(inIP[:len(ip)], inIP[len(ip):]) {
			fail("echo reply's checksum validity differs from the request's")
		}
	case ip[0]>>4 == 4 && msg[0] == 3 && msg[1] == 4, ip[0]>>4 == 6 && msg[0] == 2:
		if !validICMPChecksum(ip, msg) {
			fail("too-big answer's ICMP checksum is wrong")
		}
		if !bytes.Equal(msg[8:], inIP[:len(msg)-8]) {
			fail("too-big answer does not quote the packet")
		}
	default:
		fail("an answer of unknown type")
	}
}

// FuzzDecap feeds arbitrary frames through the backend's two programs, tc and XDP: each
// always lets the packet through; a packet it counts as decapsulated lost exactly its
// outer headers (the XDP program writes the Ethernet header as received again in front
// of the inner packet), any other is untouched.
func FuzzDecap(f *testing.F) {
	in4 := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 40000, DPort: 80, Flags: dptest.SYN}
	in6 := dptest.Packet{Src: dptest.Client6, Dst: vip6, SPort: 40000, DPort: 80, Flags: dptest.SYN}
	for _, s := range [][]byte{
		dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1)),
		dptest.IPIP(in6, dptest.NodeAddr6, dptest.Backend6(1)),
		dptest.GUE(in4, dptest.NodeAddr4, dptest.Backend4(1), 6080),
		dptest.GUE(in6, dptest.NodeAddr6, dptest.Backend6(1), 6080),
		in4.Bytes(),
	} {
		f.Add(s)
	}
	requireRoot(f)
	d, err := datapath.LoadDecap(6080)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	for _, v := range []netip.Addr{vipWeb, vip6} {
		if err := d.AddVIP(v); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14 || len(in) > 3000 {
			return // not a frame BPF_PROG_TEST_RUN takes (14..~3500 bytes): no verdict to check
		}
		for _, hook := range []string{"tc", "xdp"} {
			before, _ := d.Counters()
			var verdict uint32
			var out []byte
			var err error
			if hook == "tc" {
				verdict, out, err = dptest.RunTC(d.Program(), in)
			} else {
				verdict, out, err = dptest.RunXDP(d.XDPProgram(), 0, in)
			}
			if errors.Is(err, unix.EINVAL) {
				return // the kernel's test run refuses this frame (an IP EtherType without an IP header)
			}
			if err != nil {
				t.Fatal(err)
			}
			after, _ := d.Counters()
			if want := map[string]uint32{"tc": dptest.TCActOK, "xdp": dptest.XDPPass}[hook]; verdict != want {
				t.Fatalf("%s: verdict %d, want %d", hook, verdict, want)
			}
			stripped := after.IPIP4 + after.IPIP6 + after.GUE4 + after.GUE6 - (before.IPIP4 + before.IPIP6 + before.GUE4 + before.GUE6)
			switch {
			case after.Errors != before.Errors:
				t.Fatalf("%s: the kernel refused to shrink %x", hook, in)
			case stripped == 0 && !bytes.Equal(out, in):
				t.Fatalf("%s: a packet left alone changed\n--- in:\n%s--- out:\n%s", hook, dptest.Decode(in).Dump(), dptest.Decode(out).Dump())
			case stripped == 1:
				olen := len(in) - len(out)
				proto := in[12:14]
				if hook == "xdp" && len(out) > 14 {
					proto = map[byte][]byte{4: {0x08, 0x00}, 6: {0x86, 0xdd}}[out[14]>>4]
				}
				if olen < 20 || !bytes.Equal(out[14:], in[14+olen:]) || !bytes.Equal(out[:12], in[:12]) || !bytes.Equal(out[12:14], proto) {
					t.Fatalf("%s: decapsulation did not remove exactly the outer headers (%d bytes)\n--- in:\n%s--- out:\n%s", hook, olen, dptest.Decode(in).Dump(), dptest.Decode(out).Dump())
				}
			case stripped > 1:
				t.Fatalf("%s: one packet counted %d times", hook, stripped)
			}
		}
	})
}
