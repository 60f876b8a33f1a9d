package datapath_test

import (
	"net/netip"
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// runAll runs every packet through the program inside one namespace switch and returns
// the verdicts and output packets.
func (b *bench) runAll(t testing.TB, pkts [][]byte) ([]uint32, [][]byte) {
	t.Helper()
	verdicts, outs := make([]uint32, len(pkts)), make([][]byte, len(pkts))
	err := b.net.Do(func() error {
		for i, p := range pkts {
			v, out, err := dptest.RunXDP(b.lb.Program(), b.net.Port0.Index, p)
			if err != nil {
				return err
			}
			verdicts[i], outs[i] = v, out
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return verdicts, outs
}

func TestGUE(t *testing.T) {
	b := newBench(t)
	c4, c6 := dptest.Client4, dptest.Client6
	cases := []struct {
		name string
		pkt  dptest.Packet
		want expectEncap
	}{
		{"IPv4 SYN", dptest.Packet{Src: c4, Dst: vipGUE, SPort: 40000, DPort: 80, Flags: dptest.SYN, DF: true, TOS: 0x28},
			expectEncap{backend: dptest.Backend4(8), dstMAC: dptest.NeighMAC(8), guePort: 6080}},
		{"IPv4 established, from the flow table", dptest.Packet{Src: c4, Dst: vipGUE, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: []byte("GET /")},
			expectEncap{backend: dptest.Backend4(8), dstMAC: dptest.NeighMAC(8), guePort: 6080}},
		{"IPv4 VLAN-tagged", dptest.Packet{Src: c4, Dst: vipGUE, SPort: 40001, DPort: 80, Flags: dptest.SYN, VLAN: 7},
			expectEncap{backend: dptest.Backend4(8), dstMAC: dptest.NeighMAC(8), guePort: 6080, vlan: 7}},
		{"IPv6 SYN", dptest.Packet{Src: c6, Dst: vipGUE6, SPort: 40000, DPort: 80, Flags: dptest.SYN, TOS: 0x28},
			expectEncap{backend: dptest.Backend6(9), dstMAC: dptest.NeighMAC(9), guePort: 6081}},
		{"IPv6 established with payload of odd length", dptest.Packet{Src: c6, Dst: vipGUE6, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: []byte("odd")},
			expectEncap{backend: dptest.Backend6(9), dstMAC: dptest.NeighMAC(9), guePort: 6081}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.pkt.Bytes()
			verdict, out := b.run(t, in)
			if verdict != dptest.XDPTX {
				t.Fatalf("verdict %d, want XDP_TX", verdict)
			}
			got := checkEncap(t, in, out, c.want)
			hash := datapath.FlowHash(flowOf(c.pkt), false)
			if want := uint16(49152 + hash>>18); got.sport != want {
				t.Errorf("GUE source port %d, want %d (from the flow hash %#x)", got.sport, want, hash)
			}
		})
	}
}

// spread counts the distinct buckets (of 256) that n flows fall in, and checks that each
// flow, sent a second time, gets the same bucket value.
func spreadOf(t *testing.T, b *bench, n int, pkt func(i int) dptest.Packet, want func(i int) expectEncap,
	value func(encapOuter) uint32) int {
	t.Helper()
	pkts := make([][]byte, 0, 2*n)
	for i := 0; i < n; i++ {
		p := pkt(i)
		pkts = append(pkts, p.Bytes())
		p.Flags = dptest.ACK // the second packet of the flow comes from the flow table
		pkts = append(pkts, p.Bytes())
	}
	verdicts, outs := b.runAll(t, pkts)
	buckets := map[uint32]bool{}
	for i := 0; i < n; i++ {
		var vals [2]uint32
		for k := 0; k < 2; k++ {
			j := 2*i + k
			if verdicts[j] != dptest.XDPTX {
				t.Fatalf("flow %d: verdict %d, want XDP_TX", i, verdicts[j])
			}
			vals[k] = value(checkEncap(t, pkts[j], outs[j], want(i)))
		}
		if vals[0] != vals[1] {
			t.Fatalf("flow %d got %#x, then %#x: a flow must keep its outer source", i, vals[0], vals[1])
		}
		buckets[vals[0]%256] = true
	}
	return len(buckets)
}

// 10 000 flows spread their outer UDP source ports (GUE) or source addresses (IPIP with
// entropy) over at least 90% of 256 buckets, and a flow always gets the same one.
func TestOuterEntropy(t *testing.T) {
	b := newBench(t)
	e4, e6 := netip.MustParsePrefix("172.16.0.0/16"), netip.MustParsePrefix("fd00:e::/64")
	if err := b.lb.PutSettings(datapath.Settings{Entropy4: e4, Entropy6: e6}); err != nil {
		t.Fatal(err)
	}
	const flows = 10000
	client4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}) }
	client6 := func(i int) netip.Addr {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)})
	}
	entropy4 := func(i int, vip netip.Addr, sport uint16) netip.Addr {
		h := datapath.FlowHash(datapath.Flow{Src: client4(i), Dst: vip, SPort: sport, DPort: 80, Proto: 6}, false)
		a := e4.Addr().As4()
		a[2], a[3] = byte(h>>8), byte(h)
		return netip.AddrFrom4(a)
	}
	entropy6 := func(i int, vip netip.Addr) netip.Addr {
		h := datapath.FlowHash(datapath.Flow{Src: client6(i), Dst: vip, SPort: 1000, DPort: 80, Proto: 6}, false)
		a := e6.Addr().As16()
		a[12], a[13], a[14], a[15] = byte(h>>24), byte(h>>16), byte(h>>8), byte(h)
		return netip.AddrFrom16(a)
	}
	lastWord := func(a netip.Addr) uint32 {
		s := a.AsSlice()
		return uint32(s[len(s)-2])<<8 | uint32(s[len(s)-1])
	}
	cases := []struct {
		name  string
		pkt   func(i int) dptest.Packet
		want  func(i int) expectEncap
		value func(encapOuter) uint32
	}{
		{"GUE source ports", func(i int) dptest.Packet {
			return dptest.Packet{Src: client4(i), Dst: vipGUE, SPort: uint16(1024 + i), DPort: 80, Flags: dptest.SYN}
		}, func(i int) expectEncap {
			return expectEncap{backend: dptest.Backend4(8), dstMAC: dptest.NeighMAC(8), guePort: 6080, src: entropy4(i, vipGUE, uint16(1024+i))}
		}, func(o encapOuter) uint32 { return uint32(o.sport) }},
		{"IPIP IPv4 outer sources", func(i int) dptest.Packet {
			return dptest.Packet{Src: client4(i), Dst: vipWeb, SPort: 1000, DPort: 80, Flags: dptest.SYN}
		}, func(i int) expectEncap {
			return expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1), src: entropy4(i, vipWeb, 1000)}
		}, func(o encapOuter) uint32 { return lastWord(o.src) }},
		{"IPIP IPv6 outer sources", func(i int) dptest.Packet {
			return dptest.Packet{Src: client6(i), Dst: vip6, SPort: 1000, DPort: 80, Flags: dptest.SYN}
		}, func(i int) expectEncap {
			return expectEncap{backend: dptest.Backend6(3), dstMAC: dptest.NeighMAC(3), src: entropy6(i, vip6)}
		}, func(o encapOuter) uint32 { return lastWord(o.src) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if n := spreadOf(t, b, flows, c.pkt, c.want, c.value); n < 256*9/10 {
				t.Errorf("%d flows fell in %d of 256 buckets, want at least 90%%", flows, n)
			}
		})
	}
	// entropy off again: the node's own address
	if err := b.lb.PutSettings(datapath.Settings{}); err != nil {
		t.Fatal(err)
	}
	p := dptest.Packet{Src: client4(1), Dst: vipWeb, SPort: 1000, DPort: 80, Flags: dptest.ACK}
	_, out := b.run(t, p.Bytes())
	checkEncap(t, p.Bytes(), out, expectEncap{backend: dptest.Backend4(1), dstMAC: dptest.NeighMAC(1)})
}
