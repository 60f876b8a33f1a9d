package lab

// Parallel paths between two gateways, as the write-ups' bonded uplinks: N veth pairs
// straight from one gateway to the other, each capped by htb at both ends, and a
// layer-3+4 multipath route over them between the gateways' outer addresses (on lo).
// The link's tunnels are N UDP flows to these routes, placed by their ports.

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/vishvananda/netlink"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// Paths is the parallel paths between gateways A and B.
type Paths struct {
	A, B         *Host
	AddrA, AddrB netip.Addr // the outer addresses, on lo, routed over the paths
	N            int
	Mbits        int // each path's cap, each way
}

// PathDev is the name of path i's veth on gateway A (side "a") or B (side "b").
func PathDev(side string, i int) string { return "p" + side + strconv.Itoa(i) }

// AddPaths joins gateways a and b by n veth pairs (10.254.i.0/30), each end's egress
// capped at mbits Mbit/s by htb, and routes a's outer address 10.254.255.1 and b's
// 10.254.255.2 over all n with a layer-3+4 hash; a path whose carrier is lost leaves
// the route at once (ignore_routes_with_linkdown), as a bond member does.
func (l *Lab) AddPaths(a, b *Host, n, mbits int) (*Paths, error) {
	p := &Paths{A: a, B: b, AddrA: netip.MustParseAddr("10.254.255.1"), AddrB: netip.MustParseAddr("10.254.255.2"), N: n, Mbits: mbits}
	addr := func(i, host int) netip.Addr { return netip.AddrFrom4([4]byte{10, 254, byte(i), byte(host)}) }
	for _, h := range []*Host{a, b} {
		if err := h.Sysctl(map[string]string{
			"net.ipv4.fib_multipath_hash_policy":            "1",
			"net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
		}); err != nil {
			return nil, err
		}
	}
	for i := range n {
		if err := l.Veth(a, PathDev("a", i), b, PathDev("b", i)); err != nil {
			return nil, err
		}
		for _, end := range []struct {
			h    *Host
			dev  string
			addr netip.Addr
		}{{a, PathDev("a", i), addr(i, 1)}, {b, PathDev("b", i), addr(i, 2)}} {
			steps := [][]string{
				{"addr", "add", end.addr.String() + "/30", "dev", end.dev},
				{"link", "set", end.dev, "up"},
			}
			for _, args := range steps {
				if err := end.h.Exec(hostprog.IP, args...); err != nil {
					return nil, err
				}
			}
			if err := capDev(end.h, end.dev, mbits); err != nil {
				return nil, err
			}
		}
	}
	for _, side := range []struct {
		h         *Host
		name      string
		self, dst netip.Addr
		peer      int
	}{{a, "a", p.AddrA, p.AddrB, 2}, {b, "b", p.AddrB, p.AddrA, 1}} {
		if err := side.h.AddLoopbackAddr(side.self); err != nil {
			return nil, err
		}
		args := []string{"route", "add", side.dst.String() + "/32", "src", side.self.String()}
		for i := range n {
			args = append(args, "nexthop", "via", addr(i, side.peer).String(), "dev", PathDev(side.name, i))
		}
		if err := side.h.Exec(hostprog.IP, args...); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Veth joins host a's device devA to host b's devB.
func (l *Lab) Veth(a *Host, devA string, b *Host, devB string) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: devA}, PeerName: devB, PeerNamespace: netlink.NsFd(b.nsh)}
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s:%s ↔ %s:%s: %w", a.NS, devA, b.NS, devB, err)
	}
	return nil
}

// Cut takes path i down at gateway A (B's end loses its carrier): both gateways'
// routes leave it at once.
func (p *Paths) Cut(i int) error {
	return p.A.Exec(hostprog.IP, "link", "set", PathDev("a", i), "down")
}

// Drop makes path i drop every packet, both ways, with its carrier up: a failure
// the gateways' kernels do not see, only the link's probes.
func (p *Paths) Drop(i int) error {
	for _, end := range []struct {
		h   *Host
		dev string
	}{{p.A, PathDev("a", i)}, {p.B, PathDev("b", i)}} {
		if err := end.h.Exec(hostprog.TC, "qdisc", "replace", "dev", end.dev, "root", "pfifo", "limit", "0"); err != nil {
			return err
		}
	}
	return nil
}

// Undrop caps path i again, as AddPaths did, ending a Drop.
func (p *Paths) Undrop(i int) error {
	for _, end := range []struct {
		h   *Host
		dev string
	}{{p.A, PathDev("a", i)}, {p.B, PathDev("b", i)}} {
		if err := end.h.Exec(hostprog.TC, "qdisc", "del", "dev", end.dev, "root"); err != nil {
			return err
		}
		if err := capDev(end.h, end.dev, p.Mbits); err != nil {
			return err
		}
	}
	return nil
}

// capDev caps dev's egress at mbits Mbit/s with htb.
func capDev(h *Host, dev string, mbits int) error {
	rate := fmt.Sprintf("%dmbit", mbits)
	for _, args := range [][]string{
		{"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate},
	} {
		if err := h.Exec(hostprog.TC, args...); err != nil {
			return err
		}
	}
	return nil
}

// Mend brings path i back.
func (p *Paths) Mend(i int) error { return p.A.Exec(hostprog.IP, "link", "set", PathDev("a", i), "up") }

// TxBytes is the bytes gateway A has sent over all the paths.
func (p *Paths) TxBytes() (uint64, error) {
	var n uint64
	for i := range p.N {
		s, err := p.A.LinkStats(PathDev("a", i))
		if err != nil {
			return 0, err
		}
		n += s.TxBytes
	}
	return n, nil
}

// TxPackets counts the packets each path has sent, from A's end and from B's.
func (p *Paths) TxPackets() (fromA, fromB []uint64, err error) {
	for i := range p.N {
		sa, err := p.A.LinkStats(PathDev("a", i))
		if err != nil {
			return nil, nil, err
		}
		sb, err := p.B.LinkStats(PathDev("b", i))
		if err != nil {
			return nil, nil, err
		}
		fromA, fromB = append(fromA, sa.TxPackets), append(fromB, sb.TxPackets)
	}
	return fromA, fromB, nil
}
