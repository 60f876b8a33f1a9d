package link

// The remote prefixes are routed over the tunnels that are up. Two ways, tried in
// this order:
//
//   - a resilient next-hop group (kernel ≥ 5.13): one next-hop object per tunnel, one
//     group of the tunnels that are up, a route per prefix pointing at the group. The
//     group hashes each flow to one of its buckets; when a tunnel leaves, only its
//     buckets move to the others, so no flow of a healthy tunnel changes tunnel. When
//     it comes back it takes over buckets only as they fall idle (idleTimer).
//   - a multipath route (RTA_MULTIPATH) per prefix. The kernel picks a next hop by
//     hash-threshold: the hash space is cut in N equal ranges, so when one of N
//     leaves, the boundaries of the ranges after it shift and some flows of the
//     others change tunnel too (4 → 3: a ninth to a third of them, depending on which
//     one leaves; TestRoutersMoveFlows measures it). They are not broken: every
//     tunnel ends at the same two gateways, so a moved flow only risks a reordering
//     at the moment it moves.
//
// The vishvananda/netlink package has no next-hop objects, so resilient groups are
// written as raw RTM_NEWNEXTHOP messages.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// router routes the remote prefixes over a set of tunnels.
type router interface {
	// route points the prefixes at these tunnels (at least one).
	route(up []*tunnel) error
	// remove deletes everything it installed.
	remove()
	kind() string
}

// Constants of linux/nexthop.h and rtnetlink.h that golang.org/x/sys lacks.
const (
	nhaResGroup           = 12
	nhaResGroupBuckets    = 1
	nhaResGroupIdleTimer  = 2
	nhaResGroupUnbalanced = 3
	nexthopGrpTypeRes     = 1
	rtaNHID               = 30
	userHZ                = 100 // clock_t ticks per second in the timers above
	resilientBuckets      = 512 // per group: the finest share a tunnel can get is 1/512
	// A restored tunnel takes over buckets that carried nothing for this long. Short,
	// because moving a flow between two tunnels of one link does not break it (the
	// same gateways at both ends); the group only avoids moving busy flows.
	resilientIdleTimerSecs = 1
)

// resilient is the next-hop-group router.
type resilient struct {
	base     uint32 // this link's 256 ids: v4 group base, v4 tunnel i base+1+i; v6 +128
	tunnels  []*tunnel
	prefixes []netip.Prefix
	families []int // of the prefixes
	routed   []netip.Prefix
	made     []uint32 // next-hop ids created, to delete
}

func nexthopBase(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return 0x4d4c0000 | (h.Sum32()&0xff)<<8 // "ML" and a byte of the link's name
}

func (r *resilient) groupID(family int) uint32 {
	if family == unix.AF_INET6 {
		return r.base + 128
	}
	return r.base
}

func (r *resilient) memberID(family int, t *tunnel) uint32 {
	return r.groupID(family) + 1 + uint32(t.index)
}

// newResilient creates a next hop per tunnel and family and a group of those up, and
// routes the prefixes over it. On error it removes what it made.
func newResilient(name string, tunnels, up []*tunnel, prefixes []netip.Prefix) (_ *resilient, err error) {
	r := &resilient{base: nexthopBase(name), tunnels: tunnels, prefixes: prefixes}
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		for _, p := range prefixes {
			if family(p) == fam {
				r.families = append(r.families, fam)
				break
			}
		}
	}
	defer func() {
		if err != nil {
			r.remove()
		}
	}()
	for _, fam := range r.families {
		for _, t := range tunnels {
			id := r.memberID(fam, t)
			req := nexthopRequest(unix.RTM_NEWNEXTHOP, unix.NLM_F_CREATE|unix.NLM_F_EXCL, fam, id)
			req.AddData(nl.NewRtAttr(unix.NHA_OIF, nl.Uint32Attr(uint32(t.ifindex))))
			if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
				if errors.Is(err, unix.EEXIST) {
					err = fmt.Errorf("%w: the ids %#x… are taken, by another link on this host whose name hashes alike (rename one)", err, r.base)
				}
				return nil, fmt.Errorf("next hop %d on %s: %w", id, t.name, err)
			}
			r.made = append(r.made, id)
		}
		if err := r.group(fam, up, unix.NLM_F_CREATE|unix.NLM_F_EXCL); err != nil {
			return nil, err
		}
		r.made = append(r.made, r.groupID(fam))
	}
	for _, p := range prefixes {
		if err := r.addRoute(p); err != nil {
			return nil, err
		}
		r.routed = append(r.routed, p)
	}
	return r, nil
}

func (r *resilient) kind() string { return "resilient" }

func (r *resilient) route(up []*tunnel) error {
	for _, fam := range r.families {
		if err := r.group(fam, up, unix.NLM_F_REPLACE); err != nil {
			return err
		}
	}
	return nil
}

// group writes the family's resilient group with the given members.
func (r *resilient) group(fam int, members []*tunnel, flags int) error {
	id := r.groupID(fam)
	req := nexthopRequest(unix.RTM_NEWNEXTHOP, flags, unix.AF_UNSPEC, id) // a group has no family of its own
	grp := make([]byte, 8*len(members))
	for i, t := range members {
		binary.NativeEndian.PutUint32(grp[8*i:], r.memberID(fam, t)) // struct nexthop_grp; weight 0 means 1
	}
	req.AddData(nl.NewRtAttr(unix.NHA_GROUP, grp))
	req.AddData(nl.NewRtAttr(unix.NHA_GROUP_TYPE, nl.Uint16Attr(nexthopGrpTypeRes)))
	res := nl.NewRtAttr(unix.NLA_F_NESTED|nhaResGroup, nil)
	res.AddRtAttr(nhaResGroupBuckets, nl.Uint16Attr(resilientBuckets))
	res.AddRtAttr(nhaResGroupIdleTimer, nl.Uint32Attr(resilientIdleTimerSecs*userHZ))
	res.AddRtAttr(nhaResGroupUnbalanced, nl.Uint32Attr(0)) // never move a busy flow to rebalance
	req.AddData(res)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("resilient next-hop group %d of %d tunnels: %w", id, len(members), err)
	}
	return nil
}

func (r *resilient) addRoute(p netip.Prefix) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	msg := nl.NewRtMsg()
	msg.Family = uint8(family(p))
	msg.Dst_len = uint8(p.Bits())
	msg.Protocol = unix.RTPROT_STATIC
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.RTA_DST, p.Addr().AsSlice()))
	req.AddData(nl.NewRtAttr(rtaNHID, nl.Uint32Attr(r.groupID(family(p)))))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("route %s via next-hop group %d: %w", p, r.groupID(family(p)), err)
	}
	return nil
}

func (r *resilient) remove() {
	for _, p := range r.routed {
		_ = netlink.RouteDel(&netlink.Route{Dst: prefixNet(p), Protocol: unix.RTPROT_STATIC})
	}
	r.routed = nil
	// the groups first: a member cannot leave while it is a group's last
	for i := len(r.made) - 1; i >= 0; i-- {
		req := nexthopRequest(unix.RTM_DELNEXTHOP, 0, unix.AF_UNSPEC, r.made[i])
		_, _ = req.Execute(unix.NETLINK_ROUTE, 0)
	}
	r.made = nil
}

// nexthopRequest starts an RTM_*NEXTHOP message about next hop id (struct nhmsg).
func nexthopRequest(op, flags, fam int, id uint32) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(op, flags|unix.NLM_F_ACK)
	req.AddData(nhmsg{family: uint8(fam)})
	req.AddData(nl.NewRtAttr(unix.NHA_ID, nl.Uint32Attr(id)))
	return req
}

type nhmsg struct{ family uint8 }

func (m nhmsg) Len() int { return 8 }

func (m nhmsg) Serialize() []byte { return []byte{m.family, 0, 0, 0, 0, 0, 0, 0} }

// multipath is the fallback router: a multipath route per prefix.
type multipath struct {
	prefixes []netip.Prefix
	routed   []netip.Prefix
}

func (m *multipath) kind() string { return "multipath" }

func (m *multipath) route(up []*tunnel) error {
	var hops []*netlink.NexthopInfo
	for _, t := range up {
		hops = append(hops, &netlink.NexthopInfo{LinkIndex: t.ifindex})
	}
	for _, p := range m.prefixes {
		r := &netlink.Route{Dst: prefixNet(p), MultiPath: hops, Protocol: unix.RTPROT_STATIC}
		if len(hops) == 1 {
			r.MultiPath, r.LinkIndex = nil, up[0].ifindex
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s over %d tunnels: %w", p, len(up), err)
		}
		if !containsPrefix(m.routed, p) {
			m.routed = append(m.routed, p)
		}
	}
	return nil
}

func (m *multipath) remove() {
	for _, p := range m.routed {
		_ = netlink.RouteDel(&netlink.Route{Dst: prefixNet(p), Protocol: unix.RTPROT_STATIC})
	}
	m.routed = nil
}

// newRouter routes the prefixes over the tunnels up, with a resilient group where the
// kernel has them. why says why not, when not.
func newRouter(name string, tunnels, up []*tunnel, prefixes []netip.Prefix) (r router, why error, err error) {
	res, rerr := newResilient(name, tunnels, up, prefixes)
	if rerr == nil {
		return res, nil, nil
	}
	if errors.Is(rerr, unix.EEXIST) {
		return nil, nil, rerr
	}
	m := &multipath{prefixes: prefixes}
	if err := m.route(up); err != nil {
		m.remove()
		return nil, nil, err
	}
	return m, rerr, nil
}

func family(p netip.Prefix) int {
	if p.Addr().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func containsPrefix(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}
