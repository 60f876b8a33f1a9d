package bgp

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"

	"github.com/manifoldlb/manifold/internal/config"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// Attributes are what a VIP's route carries besides its next hop: the node's and its
// services' communities, a MED, and how often the node's AS is prepended.
type Attributes struct {
	Communities      []config.Community
	LargeCommunities []config.LargeCommunity
	MED              *uint32 // nil: no MED attribute
	Prepend          uint8   // extra copies of the node's AS, on eBGP sessions only
}

// normal sorts the communities and drops repeats, so that equal sets compare equal.
func (a Attributes) normal() Attributes {
	a.Communities = slices.Compact(slices.Sorted(slices.Values(a.Communities)))
	large := slices.Clone(a.LargeCommunities)
	slices.SortFunc(large, func(x, y config.LargeCommunity) int {
		return cmp.Or(cmp.Compare(x.Global, y.Global), cmp.Compare(x.Local1, y.Local1), cmp.Compare(x.Local2, y.Local2))
	})
	a.LargeCommunities = slices.Compact(large)
	return a
}

// Equal compares two normal Attributes.
func (a Attributes) Equal(b Attributes) bool {
	sameMED := (a.MED == nil) == (b.MED == nil) && (a.MED == nil || *a.MED == *b.MED)
	return sameMED && a.Prepend == b.Prepend && slices.Equal(a.Communities, b.Communities) &&
		slices.Equal(a.LargeCommunities, b.LargeCommunities)
}

// Prepending is done on the way out, by export policy, because only eBGP sessions may
// carry it: an iBGP router drops a route whose AS path holds its own AS. The route
// carries a marker, the large community ASN:prependMarker:N; the export policy
// prepends N times towards every peer not in the set of iBGP peers, and removes the
// marker towards every peer, so no router ever sees it. (GoBGP has per-peer export
// policies for route-server clients only, hence one global policy and a neighbour set.)
const prependMarker = math.MaxUint32

const (
	exportPolicy = "manifold-export"
	ibgpPeers    = "manifold-ibgp-peers"
)

func prependSet(n int) string { return fmt.Sprintf("manifold-prepend-%d", n) }

// addExportPolicy defines the marker sets, the (empty) set of iBGP peers and the
// global export policy.
func addExportPolicy(ctx context.Context, srv *server.BgpServer, asn uint32) error {
	sets := []*api.DefinedSet{{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: ibgpPeers}}
	var statements []*api.Statement
	for n := 1; n <= config.MaxPrepend; n++ {
		set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_LARGE_COMMUNITY, Name: prependSet(n),
			List: []string{fmt.Sprintf("^%d:%d:%d$", asn, uint32(prependMarker), n)}}
		sets = append(sets, set)
		statements = append(statements, &api.Statement{Name: set.Name,
			Conditions: &api.Conditions{
				LargeCommunitySet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: set.Name},
				// an empty set matches every peer, inverted or not: right, as all are eBGP
				NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_INVERT, Name: ibgpPeers},
			},
			Actions: &api.Actions{AsPrepend: &api.AsPrependAction{Asn: asn, Repeat: uint32(n)}}})
	}
	statements = append(statements, &api.Statement{Name: "manifold-strip-prepend-marker", Actions: &api.Actions{
		LargeCommunity: &api.CommunityAction{Type: api.CommunityAction_TYPE_REMOVE,
			Communities: []string{fmt.Sprintf("^%d:%d:[0-9]+$", asn, uint32(prependMarker))}},
	}})
	for _, set := range sets {
		if err := srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set}); err != nil {
			return fmt.Errorf("bgp: export policy: %s: %w", set.Name, err)
		}
	}
	if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: exportPolicy, Statements: statements}}); err != nil {
		return fmt.Errorf("bgp: export policy: %w", err)
	}
	if err := srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name:          "global",
		Direction:     api.PolicyDirection_POLICY_DIRECTION_EXPORT,
		Policies:      []*api.Policy{{Name: exportPolicy}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT,
	}}); err != nil {
		return fmt.Errorf("bgp: export policy: %w", err)
	}
	return nil
}

// ibgpSet is the neighbour set holding one iBGP peer.
func ibgpSet(p config.Peer) *api.DefinedSet {
	return &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: ibgpPeers,
		List: []string{netip.PrefixFrom(p.Address, p.Address.BitLen()).String()}}
}

// pathAttributes are the BGP attributes of a normal Attributes.
func (s *GoBGP) pathAttributes(a Attributes) []bgp.PathAttributeInterface {
	var out []bgp.PathAttributeInterface
	if a.MED != nil {
		out = append(out, bgp.NewPathAttributeMultiExitDisc(*a.MED))
	}
	if len(a.Communities) > 0 {
		values := make([]uint32, len(a.Communities))
		for i, c := range a.Communities {
			values[i] = uint32(c)
		}
		out = append(out, bgp.NewPathAttributeCommunities(values))
	}
	large := make([]*bgp.LargeCommunity, 0, len(a.LargeCommunities)+1)
	for _, c := range a.LargeCommunities {
		large = append(large, bgp.NewLargeCommunity(c.Global, c.Local1, c.Local2))
	}
	if a.Prepend > 0 {
		large = append(large, bgp.NewLargeCommunity(s.cfg.ASN, prependMarker, uint32(a.Prepend)))
	}
	if len(large) > 0 {
		out = append(out, bgp.NewPathAttributeLargeCommunities(large))
	}
	return out
}
