package datapath_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

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
		{"fragmented IPIP passes untouched (the stack reassembles)", func() []byte {
			p := dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1))
			p[14+6] = 0x20 // more fragments
			return p
		}(), nil, nil},
		{"IPIP with IPv6 inside IPv4 passes untouched", dptest.IPIP(in6, dptest.NodeAddr4, dptest.Backend4(1)), nil, nil},
		{"IPIP with IPv4 inside IPv6 passes untouched", dptest.IPIP(in4, dptest.NodeAddr6, dptest.Backend6(1)), nil, nil},
		{"garbage after an IPv4 EtherType passes untouched", append([]byte{
			0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00}, bytes.Repeat([]byte{0xff}, 40)...), nil, nil},
		{"a bare Ethernet header passes untouched", []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x88, 0xb5}, nil, nil},
	}
	for _, hook := range decapHooks(d) {
		for _, c := range cases {
			t.Run(hook.name+"/"+c.name, func(t *testing.T) {
				before, _ := d.Counters()
				out, err := hook.run(c.pkt)
				if err != nil {
					t.Fatal(err)
				}
				want := c.pkt
				if c.want != nil {
					want = hook.decapsulated(c.pkt, c.want)
				}
				if !bytes.Equal(hook.comparable(out), hook.comparable(want)) {
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
}

// decapHook runs a packet through one of the decapsulation's two entry points.
type decapHook struct {
	name string
	// run returns the packet as the program left it, failing unless it let it through
	// (TC_ACT_OK, XDP_PASS)
	run func(pkt []byte) ([]byte, error)
	// decapsulated is what the hook makes of the frame in, whose inner packet (with
	// the client's Ethernet header) is inner
	decapsulated func(in, inner []byte) []byte
	// comparable is the part of a frame the hook is held to
	comparable func(frame []byte) []byte
}

func decapHooks(d *datapath.Decap) []decapHook {
	return []decapHook{{
		name: "tc",
		run: func(pkt []byte) ([]byte, error) {
			verdict, out, err := dptest.RunTC(d.Program(), pkt)
			if err == nil && verdict != dptest.TCActOK {
				err = fmt.Errorf("verdict %d, want TC_ACT_OK", verdict)
			}
			return out, err
		},
		// the MAC header moves as it is: its EtherType is the outer's, which is the
		// inner's (the tc program strips no other)
		decapsulated: func(in, inner []byte) []byte { return append(slices.Clone(in[:12]), inner[12:]...) },
		// the skb may come back with Ethernet padding
		comparable: withoutPadding,
	}, {
		name: "xdp",
		run: func(pkt []byte) ([]byte, error) {
			verdict, out, err := dptest.RunXDP(d.XDPProgram(), 0, pkt)
			if err == nil && verdict != dptest.XDPPass {
				err = fmt.Errorf("verdict %d, want XDP_PASS", verdict)
			}
			return out, err
		},
		// the Ethernet header as received (its EtherType the inner packet's, which is of
		// the outer's family), the inner packet (without
		// the padding of a short frame: the outer frame has none after it)
		decapsulated: func(in, inner []byte) []byte { return append(slices.Clone(in[:12]), withoutPadding(inner)[12:]...) },
		// byte for byte: nothing but the program touches an XDP frame
		comparable: func(frame []byte) []byte { return frame },
	}}
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

// TestDecapSharedSlot: VIPs whose addresses share a slot of the VIP filter are each
// decapsulated, at both hooks, an address sharing their slot that is no VIP is not, and
// removing one leaves the other decapsulated and the slot's address free.
func TestDecapSharedSlot(t *testing.T) {
	for _, vips := range [][3]netip.Addr{
		// .10, .26 and .42, ::10, ::20 and ::30 differ only in bits the slot folds away
		{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("198.51.100.26"), netip.MustParseAddr("198.51.100.42")},
		{netip.MustParseAddr("2001:db8:100::10"), netip.MustParseAddr("2001:db8:100::20"), netip.MustParseAddr("2001:db8:100::30")},
	} {
		a, b, other := vips[0], vips[1], vips[2]
		d := loadDecap(t, a, b)
		if d.DecapVIPSlot(a) != d.DecapVIPSlot(b) || d.DecapVIPSlot(a) != d.DecapVIPSlot(other) {
			t.Fatalf("%s, %s and %s do not share a slot: the test needs new addresses", a, b, other)
		}
		encap := func(dst netip.Addr) ([]byte, []byte) {
			client, node, backend := dptest.Client4, dptest.NodeAddr4, dptest.Backend4(1)
			if dst.Is6() {
				client, node, backend = dptest.Client6, dptest.NodeAddr6, dptest.Backend6(1)
			}
			in := dptest.Packet{Src: client, Dst: dst, SPort: 40000, DPort: 80, Flags: dptest.ACK}
			return dptest.IPIP(in, node, backend), in.Bytes()
		}
		check := func(dst netip.Addr, stripped bool) {
			t.Helper()
			pkt, inner := encap(dst)
			for _, hook := range decapHooks(d) {
				out, err := hook.run(pkt)
				if err != nil {
					t.Fatal(err)
				}
				want := pkt
				if stripped {
					want = hook.decapsulated(pkt, inner)
				}
				if !bytes.Equal(hook.comparable(out), hook.comparable(want)) {
					t.Errorf("%s: %s: stripped %v, want %v", hook.name, dst, !bytes.Equal(out, pkt), stripped)
				}
			}
		}
		check(a, true)
		check(b, true)
		check(other, false)
		if err := d.RemoveVIP(a); err != nil {
			t.Fatal(err)
		}
		check(a, false)
		check(b, true)
		if err := d.RemoveVIP(b); err != nil {
			t.Fatal(err)
		}
		check(b, false)
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

// TestDecapAttachXDP: the XDP program attaches natively to a veth and is gone once
// closed; an interface without native XDP is refused with the reason, and so is one
// that already has an XDP program, generic or native, which stays in place.
func TestDecapAttachXDP(t *testing.T) {
	requireRoot(t)
	n, err := dptest.NewNet()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	load := func() *datapath.Decap {
		d, err := datapath.LoadDecap(6080)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	xdpProg := func(name string) uint32 {
		t.Helper()
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return x.ProgId
		}
		return 0
	}
	err = n.Do(func() error {
		port := n.Port0.Name
		d := load()
		defer d.Close()
		// lo has no driver XDP (and the namespace's lo is ours)
		err := d.AttachXDP("lo")
		if err == nil || !strings.Contains(err.Error(), "native XDP on lo refused") {
			t.Errorf("native XDP on lo: %v, want refused", err)
		}
		t.Log(err)

		// someone else's program, in generic mode
		other := load()
		l, err := link.AttachXDP(link.XDPOptions{Program: other.XDPProgram(), Interface: n.Port0.Index, Flags: link.XDPGenericMode})
		if err != nil {
			return fmt.Errorf("generic XDP: %w", err)
		}
		id := xdpProg(port)
		err = d.AttachXDP(port)
		if !errors.Is(err, datapath.ErrXDPInUse) || !strings.Contains(err.Error(), "generic mode") {
			t.Errorf("XDP beside a generic program: %v, want %v naming its mode", err, datapath.ErrXDPInUse)
		}
		t.Log(err)
		if got := xdpProg(port); got != id {
			t.Errorf("the other program (id %d) was replaced: id %d", id, got)
		}
		l.Close()
		other.Close()

		if err := d.AttachXDP(port); err != nil {
			return err
		}
		ours := xdpProg(port)
		if ours == 0 {
			t.Fatal("no XDP program after AttachXDP")
		}
		second := load()
		if err := second.AttachXDP(port); !errors.Is(err, datapath.ErrXDPInUse) || !strings.Contains(err.Error(), "native mode") {
			t.Errorf("a second native XDP program: %v, want %v naming its mode", err, datapath.ErrXDPInUse)
		}
		second.Close()
		if got := xdpProg(port); got != ours {
			t.Errorf("our program (id %d) was replaced: id %d", ours, got)
		}
		if err := d.Close(); err != nil {
			return err
		}
		if got := xdpProg(port); got != 0 {
			t.Errorf("XDP program id %d after Close, want none", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
