package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Neighbours keeps the link-layer address of every backend's next hop resolved.
//
// XDP rewrites MAC addresses from the kernel's neighbour table (bpf_fib_lookup), but
// forwarded XDP traffic never makes the kernel resolve or refresh an entry. A next hop
// with no valid entry would drop every packet (counted as no_neigh). So the node asks
// the kernel to manage those entries (NTF_EXT_MANAGED, Linux 5.16+: resolved at once
// and kept fresh) and removes the ones it created when it stops.
type Neighbours struct {
	log     *slog.Logger
	created map[neighKey]bool
}

type neighKey struct {
	ip      netip.Addr
	ifindex int
}

func NewNeighbours(log *slog.Logger) *Neighbours {
	return &Neighbours{log: log, created: map[neighKey]bool{}}
}

// Ensure resolves the next hops towards every address in backends. Each address is
// looked up once: backends has one entry per service's backend, and 10 000 services on
// the same few backends made 20 000 route lookups (3–4 s) of every apply.
func (n *Neighbours) Ensure(backends []netip.Addr) {
	seen := map[neighKey]bool{}
	asked := make(map[netip.Addr]bool, len(backends))
	for _, b := range backends {
		if asked[b] {
			continue
		}
		asked[b] = true
		hop, err := nextHop(b)
		if err != nil {
			n.log.Warn("no route to backend", "backend", b, "err", err)
			continue
		}
		if seen[hop] {
			continue
		}
		seen[hop] = true
		if err := n.ensureOne(hop); err != nil {
			n.log.Warn("cannot manage neighbour entry", "next_hop", hop.ip, "ifindex", hop.ifindex, "err", err)
		}
	}
}

func nextHop(dst netip.Addr) (neighKey, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil {
		return neighKey{}, err
	}
	if len(routes) == 0 {
		return neighKey{}, fmt.Errorf("no route")
	}
	r := routes[0]
	hop := dst
	if r.Gw != nil {
		hop, _ = netip.AddrFromSlice(r.Gw)
	}
	return neighKey{ip: hop.Unmap(), ifindex: r.LinkIndex}, nil
}

func (n *Neighbours) ensureOne(k neighKey) error {
	family := netlink.FAMILY_V4
	if k.ip.Is6() {
		family = netlink.FAMILY_V6
	}
	list, err := netlink.NeighList(k.ifindex, family)
	if err != nil {
		return err
	}
	for _, e := range list {
		ip, _ := netip.AddrFromSlice(e.IP)
		if ip.Unmap() == k.ip && (e.State&netlink.NUD_PERMANENT != 0 || e.FlagsExt&netlink.NTF_EXT_MANAGED != 0) {
			return nil // someone keeps it (the operator, or we did already)
		}
	}
	err = netlink.NeighAdd(&netlink.Neigh{
		LinkIndex: k.ifindex,
		Family:    family,
		IP:        k.ip.AsSlice(),
		State:     netlink.NUD_NONE,
		FlagsExt:  netlink.NTF_EXT_MANAGED,
	})
	if errors.Is(err, unix.EEXIST) {
		// a plain (unmanaged) entry exists: turn it into a managed one
		err = netlink.NeighSet(&netlink.Neigh{LinkIndex: k.ifindex, Family: family, IP: k.ip.AsSlice(),
			State: netlink.NUD_NONE, FlagsExt: netlink.NTF_EXT_MANAGED})
	}
	if err != nil {
		return err
	}
	n.created[k] = true
	n.log.Info("managing neighbour entry of next hop", "next_hop", k.ip, "ifindex", k.ifindex)
	return nil
}

// Release deletes the managed entries the node created.
func (n *Neighbours) Release() {
	for k := range n.created {
		family := netlink.FAMILY_V4
		if k.ip.Is6() {
			family = netlink.FAMILY_V6
		}
		netlink.NeighDel(&netlink.Neigh{LinkIndex: k.ifindex, Family: family, IP: k.ip.AsSlice()})
	}
	n.created = map[neighKey]bool{}
}
