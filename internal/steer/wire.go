package steer

import "github.com/manifoldlb/manifold/internal/api/wire"

// The edge of steer toward the API and the fleet store: a Decision as the wire
// carries it (wire.SteeringDecision). The wire types are steer's own, field for field;
// a field added to Decision or SiteDecision here is carried there by hand
// (TestWireDecision fails until it is), one added to OriginDecision or ShareDecision
// fails to compile until it is.

// WireDecision is d as the steering controller writes it and the API serves it, with
// its reasons.
func WireDecision(d Decision) wire.SteeringDecision {
	d = d.Explain()
	out := wire.SteeringDecision{Note: d.Note, Origins: convert(d.Origins, func(o OriginDecision) wire.SteeringOrigin { return wire.SteeringOrigin(o) })}
	out.Sites = convert(d.Sites, func(s SiteDecision) wire.SteeringSite {
		return wire.SteeringSite{Site: s.Site, Demand: s.Demand, Shares: convert(s.Shares, func(sh ShareDecision) wire.SteeringShare { return wire.SteeringShare(sh) })}
	})
	return out
}

// convert maps in to its wire form; nil stays nil (null in JSON, as before).
func convert[T, W any](in []T, f func(T) W) []W {
	if in == nil {
		return nil
	}
	out := make([]W, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
