package datapath_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// sameSlot returns n addresses other than a that fall in a's slot of the VIP address
// filter: the last word with the same bits flipped in its first and third byte.
func sameSlot(t *testing.T, a netip.Addr, n int) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for m := 1; m <= n; m++ {
		b := a.AsSlice()
		b[len(b)-4] ^= byte(m)
		b[len(b)-2] ^= byte(m)
		c, _ := netip.AddrFromSlice(b)
		if datapath.VIPSlot(c) != datapath.VIPSlot(a) {
			t.Fatalf("%s is not in the slot of %s", c, a)
		}
		out = append(out, c)
	}
	return out
}

// TestVIPFilterSharedSlot: addresses that share a slot of the filter's array with a VIP
// are told apart by the hash map, whichever of them are VIPs and in whatever order they
// come and go. A fragment tells the filter's answer: dropped when the destination is a
// VIP address, passed when not.
func TestVIPFilterSharedSlot(t *testing.T) {
	b := newBench(t)
	fragment := func(dst netip.Addr) []byte {
		if dst.Is6() {
			return ipv6Ext(dptest.Packet{Src: dptest.Client6, Dst: dst, SPort: 1, DPort: 80, Flags: dptest.SYN}, 44)
		}
		return tamper(dptest.Packet{Src: dptest.Client4, Dst: dst, SPort: 1, DPort: 80, Flags: dptest.SYN}, true,
			func(ls []gopacket.SerializableLayer) { ls[1].(*layers.IPv4).Flags = layers.IPv4MoreFragments })
	}
	for _, vip := range []netip.Addr{vipWeb, vip6} {
		t.Run(vip.String(), func(t *testing.T) {
			others := sameSlot(t, vip, 2)
			x, y := others[0], others[1] // x becomes a VIP address, y never does
			isVIP := func(want map[netip.Addr]bool) {
				t.Helper()
				for _, a := range []netip.Addr{vip, x, y} {
					v, _ := b.run(t, fragment(a))
					if got := v == dptest.XDPDrop; got != want[a] {
						t.Errorf("%s taken for a VIP address: %v, want %v (verdict %d)", a, got, want[a], v)
					}
				}
			}
			isVIP(map[netip.Addr]bool{vip: true})
			if err := b.lb.PutVIPAddr(x, 1); err != nil {
				t.Fatal(err)
			}
			isVIP(map[netip.Addr]bool{vip: true, x: true})
			if err := b.lb.PutVIPAddr(x, 2); err != nil { // a second service: same address
				t.Fatal(err)
			}
			if err := b.lb.DeleteVIPAddr(vip); err != nil {
				t.Fatal(err)
			}
			isVIP(map[netip.Addr]bool{x: true})
			if err := b.lb.DeleteVIPAddr(x); err != nil {
				t.Fatal(err)
			}
			isVIP(map[netip.Addr]bool{})
			if err := b.lb.PutVIPAddr(vip, 1); err != nil {
				t.Fatal(err)
			}
			isVIP(map[netip.Addr]bool{vip: true})
		})
	}
}

// TestUnknownKernelHZ: without a kernel config to read HZ from, the program keeps its
// timeouts in ns and forwards as usual.
func TestUnknownKernelHZ(t *testing.T) {
	var b *bench
	datapath.WithKernelHZ(0, func() { b = newBench(t) })
	for i, p := range []dptest.Packet{
		{Src: dptest.Client4, Dst: vipWeb, SPort: 40000, DPort: 80, Flags: dptest.SYN},
		{Src: dptest.Client4, Dst: vipWeb, SPort: 40000, DPort: 80, Flags: dptest.ACK},
		{Src: dptest.Client6, Dst: vip6, SPort: 40000, DPort: 80, Flags: dptest.ACK},
	} {
		if v, _ := b.run(t, p.Bytes()); v != dptest.XDPTX {
			t.Errorf("packet %d: verdict %d, want XDP_TX", i, v)
		}
	}
}

func TestConfigHZ(t *testing.T) {
	for cfg, want := range map[string]uint32{
		"# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n": 250,
		"CONFIG_HZ=1000":         1000,
		"CONFIG_HZ_PERIODIC=y\n": 0,
		"CONFIG_HZ=y\n":          0,
		"":                       0,
	} {
		if got := datapath.ConfigHZ(strings.NewReader(cfg)); got != want {
			t.Errorf("%q: HZ %d, want %d", cfg, got, want)
		}
	}
}
