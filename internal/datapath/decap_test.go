package datapath_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

func TestDecap(t *testing.T) {
	d := loadDecap(t, vipWeb, vip6)
	other4, other6 := netip.MustParseAddr("198.51.100.99"), netip.MustParseAddr("2001:db8:100::99")
	in4 := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 40000, DPort: 80, Flags: dptest.SYN, Payload: []byte("hello")}
	in6 := dptest.Packet{Src: dptest.Client6, Dst: vip6, SPort: 40000, DPort: 80, Flags: dptest.SYN, Payload: []byte("hello")}
	notVIP4 := dptest.Packet{Src: dptest.Client4, Dst: other4, SPort: 1, DPort: 80, Flags: dptest.SYN}
	notVIP6 := dptest.Packet{Src: dptest.Client6, Dst: other6, SPort: 1, DPort: 80, Flags: dptest.SYN}

	cases := []struct {
		name    string
		pkt     []byte
		want    []byte // nil: unchanged
		counter func(datapath.DecapCounters) uint64
	}{
		{"IPv4-in-IPv4 for a VIP is stripped", dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1)), in4.Bytes(),
			func(c datapath.DecapCounters) uint64 { return c.IPIP4 }},
		{"IPv6-in-IPv6 for a VIP is stripped", dptest.IPIP(in6, dptest.NodeAddr6, dptest.Backend6(1)), in6.Bytes(),
			func(c datapath.DecapCounters) uint64 { return c.IPIP6 }},
		{"IPv4-in-IPv4 for another address passes untouched", dptest.IPIP(notVIP4, dptest.NodeAddr4, dptest.Backend4(1)), nil,
			func(c datapath.DecapCounters) uint64 { return c.NotVIP }},
		{"IPv6-in-IPv6 for another address passes untouched", dptest.IPIP(notVIP6, dptest.NodeAddr6, dptest.Backend6(1)), nil,
			func(c datapath.DecapCounters) uint64 { return c.NotVIP }},
		{"plain packet to the VIP passes untouched", in4.Bytes(), nil, nil},
		{"plain IPv6 packet passes untouched", in6.Bytes(), nil, nil},
		{"truncated IPIP passes untouched", dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1))[:14+20+10], nil, nil},
		{"GUE in IPv4 for a VIP is stripped", dptest.GUE(in4, dptest.NodeAddr4, dptest.Backend4(1), 6080), in4.Bytes(),
			func(c datapath.DecapCounters) uint64 { return c.GUE4 }},
		{"GUE in IPv6 for a VIP is stripped", dptest.GUE(in6, dptest.NodeAddr6, dptest.Backend6(1), 6080), in6.Bytes(),
			func(c datapath.DecapCounters) uint64 { return c.GUE6 }},
		{"GUE for another address passes untouched", dptest.GUE(notVIP4, dptest.NodeAddr4, dptest.Backend4(1), 6080), nil,
			func(c datapath.DecapCounters) uint64 { return c.NotVIP }},
		{"UDP to another port passes untouched", dptest.GUE(in4, dptest.NodeAddr4, dptest.Backend4(1), 6081), nil, nil},
		{"GUE with IPv6 inside IPv4 passes untouched", dptest.GUE(in6, dptest.NodeAddr4, dptest.Backend4(1), 6080), nil, nil},
		{"fragmented GUE passes untouched (the stack reassembles)", func() []byte {
			p := dptest.GUE(in4, dptest.NodeAddr4, dptest.Backend4(1), 6080)
			p[14+6] = 0x20 // more fragments
			return p
		}(), nil, nil},
		{"truncated GUE passes untouched", dptest.GUE(in4, dptest.NodeAddr4, dptest.Backend4(1), 6080)[:14+20+8+10], nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := d.Counters()
			verdict, out, err := dptest.RunTC(d.Program(), c.pkt)
			if err != nil {
				t.Fatal(err)
			}
			if verdict != dptest.TCActOK {
				t.Fatalf("verdict %d, want TC_ACT_OK", verdict)
			}
			want := c.want
			if want == nil {
				want = c.pkt
			}
			// the client's Ethernet header is not restored (the backend's own is kept):
			// compare from the EtherType on
			if !bytes.Equal(withoutPadding(out)[12:], withoutPadding(want)[12:]) {
				t.Errorf("got\n%s\nwant\n%s", dptest.Decode(out).Dump(), dptest.Decode(want).Dump())
			}
			after, _ := d.Counters()
			if c.counter != nil && c.counter(after) != c.counter(before)+1 {
				t.Errorf("counter did not grow by one: %+v → %+v", before, after)
			}
			if c.counter == nil && after != before {
				t.Errorf("counters changed for a packet left alone: %+v → %+v", before, after)
			}
		})
	}
}

// TestDecapRemoveVIP: a removed VIP's packets pass untouched; removing it twice is
// not an error; the other VIP is still decapsulated.
func TestDecapRemoveVIP(t *testing.T) {
	d := loadDecap(t, vipWeb, vip6)
	for range 2 {
		if err := d.RemoveVIP(vipWeb); err != nil {
			t.Fatal(err)
		}
	}
	in4 := dptest.Packet{Src: dptest.Client4, Dst: vipWeb, SPort: 40000, DPort: 80, Flags: dptest.SYN}
	in6 := dptest.Packet{Src: dptest.Client6, Dst: vip6, SPort: 40000, DPort: 80, Flags: dptest.SYN}
	removed := dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1))
	if _, out, err := dptest.RunTC(d.Program(), removed); err != nil || !bytes.Equal(withoutPadding(out), withoutPadding(removed)) {
		t.Errorf("a packet for the removed VIP was changed (err %v)", err)
	}
	kept := dptest.IPIP(in6, dptest.NodeAddr6, dptest.Backend6(1))
	if _, out, err := dptest.RunTC(d.Program(), kept); err != nil || !bytes.Equal(withoutPadding(out)[12:], in6.Bytes()[12:]) {
		t.Errorf("a packet for the VIP still there was not decapsulated (err %v)", err)
	}
}

// loadDecap loads the decapsulation program (GUE on 6080) decapsulating vips; the test
// closes it.
func loadDecap(t *testing.T, vips ...netip.Addr) *datapath.Decap {
	t.Helper()
	requireRoot(t)
	d, err := datapath.LoadDecap(6080)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for _, v := range vips {
		if err := d.AddVIP(v); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// withoutPadding cuts the Ethernet padding of a short frame after the IP packet.
func withoutPadding(b []byte) []byte {
	if len(b) < 14+20 {
		return b
	}
	n := 14
	switch {
	case b[12] == 0x08 && b[13] == 0x00:
		n += int(b[16])<<8 | int(b[17])
	case b[12] == 0x86 && b[13] == 0xdd && len(b) >= 14+40:
		n += 40 + (int(b[18])<<8 | int(b[19]))
	default:
		return b
	}
	if n > len(b) {
		return b
	}
	return b[:n]
}
