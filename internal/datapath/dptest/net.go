// Package dptest is the test bench of the data plane, shared by its tests and by
// `manifold-bench dataplane`: a network namespace whose routing table and neighbours
// bpf_fib_lookup consults, packets built with gopacket, and BPF_PROG_TEST_RUN wrappers.
package dptest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The bench's fixed addressing. Port 0 is the port XDP runs on; backends behind it are
// on the same link (XDP_TX). Port 1 leads to a second link (redirect).
var (
	NodeAddr4 = netip.MustParseAddr("10.0.0.11")
	NodeAddr6 = netip.MustParseAddr("fd00::11")
	Client4   = netip.MustParseAddr("203.0.113.7")
	Client6   = netip.MustParseAddr("2001:db8:ff::7")
)

// Backend4 / Backend6 return the i-th backend address on port 0's link (i in 1..50), and
// Remote4 one on port 1's link; each has a permanent neighbour entry with NeighMAC(i).
func Backend4(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(20 + i)}) }
func Backend6(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(0x20 + i)})
}
func Remote4(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 1, byte(20 + i)}) }

// NeighMAC is the link-layer address the bench gives backend i.
func NeighMAC(i int) net.HardwareAddr { return net.HardwareAddr{0x02, 0xbe, 0, 0, 0, byte(i)} }

const maxBenchBackends = 50

// Transit prefixes the bench's routing table holds (node.forward_transit): TransitTX4/6
// via backend 1 on port 0 (the FIB answers port 0: XDP_TX), TransitRedirect4 via
// Remote4(1) on port 1, TransitNoNeigh4/6 via a gateway on port 0 that has no neighbour
// entry.
var (
	TransitTX4       = netip.MustParsePrefix("100.64.0.0/16")
	TransitRedirect4 = netip.MustParsePrefix("100.65.0.0/16")
	TransitNoNeigh4  = netip.MustParsePrefix("100.66.0.0/16")
	TransitTX6       = netip.MustParsePrefix("2001:db8:64::/48")
	TransitNoNeigh6  = netip.MustParsePrefix("2001:db8:66::/48")
)

// Link-local destinations that the bench's FIB would forward, so that a test can tell
// a router that refuses them from one that never got an answer: 169.254.0.0/16 routed
// via backend 1, and LinkLocal6, a neighbour on port 0 with NeighMAC(1).
var (
	LinkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	LinkLocal6 = netip.MustParseAddr("fe80::21")
)

// ClientRouter is the index of the neighbour (Backend4/Backend6 and NeighMAC of it) the
// bench routes the clients' networks through, for packets the program sends to clients
// after a FIB lookup (NAT replies).
const ClientRouter = 50

// Gateways without a neighbour entry, on port 0's link.
var (
	unresolved4 = netip.MustParseAddr("10.0.0.99")
	unresolved6 = netip.MustParseAddr("fd00::99")
)

// Net is a private network namespace with two veth pairs.
type Net struct {
	ns     netns.NsHandle
	Port0  *net.Interface // where packets arrive
	Port1  *net.Interface // a second port, reached by redirect
	closed bool
}

// NewNet builds the namespace. It needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
func NewNet() (*Net, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	ns, err := netns.New() // also switches this thread into it
	if err != nil {
		return nil, fmt.Errorf("new netns: %w", err)
	}
	n := &Net{ns: ns}
	err = n.setup()
	if serr := netns.Set(orig); serr != nil {
		panic(fmt.Sprintf("cannot return to the original netns: %v", serr)) // the thread is poisoned
	}
	if err != nil {
		ns.Close()
		return nil, err
	}
	return n, nil
}

func (n *Net) setup() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	ports := []struct {
		name, peer   string
		addr4, addr6 string
		dst          **net.Interface
	}{
		{"port0", "port0p", "10.0.0.11/24", "fd00::11/64", &n.Port0},
		{"port1", "port1p", "10.0.1.11/24", "fd00:1::11/64", &n.Port1},
	}
	for _, p := range ports {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.name}, PeerName: p.peer}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s: %w", p.name, err)
		}
		for _, name := range []string{p.name, p.peer} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		l, _ := netlink.LinkByName(p.name)
		for _, a := range []string{p.addr4, p.addr6} {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = 0x80 // IFA_F_NODAD: the address is usable at once
			if err := netlink.AddrAdd(l, addr); err != nil {
				return fmt.Errorf("add %s to %s: %w", a, p.name, err)
			}
		}
		ifc, err := net.InterfaceByName(p.name)
		if err != nil {
			return err
		}
		*p.dst = ifc
	}
	for i := 1; i <= maxBenchBackends; i++ {
		for _, nb := range []struct {
			ip  netip.Addr
			dev *net.Interface
		}{{Backend4(i), n.Port0}, {Backend6(i), n.Port0}, {Remote4(i), n.Port1}} {
			err := netlink.NeighAdd(&netlink.Neigh{
				LinkIndex:    nb.dev.Index,
				State:        netlink.NUD_PERMANENT,
				IP:           nb.ip.AsSlice(),
				HardwareAddr: NeighMAC(i),
			})
			if err != nil {
				return fmt.Errorf("neighbour %s: %w", nb.ip, err)
			}
		}
	}
	if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: n.Port0.Index, State: netlink.NUD_PERMANENT,
		IP: LinkLocal6.AsSlice(), HardwareAddr: NeighMAC(1)}); err != nil {
		return fmt.Errorf("neighbour %s: %w", LinkLocal6, err)
	}
	for _, r := range []struct {
		dst netip.Prefix
		gw  netip.Addr
		dev *net.Interface
	}{
		{TransitTX4, Backend4(1), n.Port0}, {TransitRedirect4, Remote4(1), n.Port1}, {TransitNoNeigh4, unresolved4, n.Port0},
		{TransitTX6, Backend6(1), n.Port0}, {TransitNoNeigh6, unresolved6, n.Port0}, {LinkLocal4, Backend4(1), n.Port0},
		{netip.PrefixFrom(Client4, 24).Masked(), Backend4(ClientRouter), n.Port0},
		{netip.PrefixFrom(Client6, 48).Masked(), Backend6(ClientRouter), n.Port0},
	} {
		dst := &net.IPNet{IP: r.dst.Addr().AsSlice(), Mask: net.CIDRMask(r.dst.Bits(), r.dst.Addr().BitLen())}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: r.dev.Index, Dst: dst, Gw: r.gw.AsSlice()}); err != nil {
			return fmt.Errorf("route %s via %s: %w", r.dst, r.gw, err)
		}
	}
	// bpf_fib_lookup answers only for interfaces that forward
	for _, f := range []string{
		"/proc/sys/net/ipv4/conf/all/forwarding",
		"/proc/sys/net/ipv4/conf/port0/forwarding",
		"/proc/sys/net/ipv6/conf/all/forwarding",
	} {
		if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Do runs fn on a thread inside the namespace (BPF_PROG_TEST_RUN's FIB lookups use the
// namespace of the calling thread).
func (n *Net) Do(fn func() error) error { return InNamespace(n.ns, fn) }

// InNamespace runs fn on the calling goroutine's OS thread switched into the namespace
// ns: what fn creates, attaches or looks up by ifindex is the namespace's. The thread
// goes back to the Go scheduler only once it is back in its own namespace; if it cannot
// get back (or fn ends the goroutine, as t.Fatal does), it stays locked and ends with
// the goroutine, so no other goroutine ever runs in the wrong namespace.
func InNamespace(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("this thread's namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("leave namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Close removes the namespace (and its veths, which die with it).
func (n *Net) Close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	return n.ns.Close()
}
