package steer

import (
	"fmt"
	"slices"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// The edge of steer toward the API and the fleet store: a Decision as the wire
// carries it (wire.SteeringDecision). The wire types are steer's own, field for field;
// a field added to Decision or SiteDecision here is carried there by hand
// (TestWireDecision fails until it is), one added to OriginDecision or ShareDecision
// fails to compile until it is.

// MaxWireRows bounds the site × origin rows of a decision as the controller writes it
// (WireDecision): above it, each site keeps only the rows of the origins it has a share
// or a target of, without their reasons (the origins keep theirs). At 1 000 sites ×
// 100 origins the whole decision, with its reasons, is 20 MB a service, over etcd's
// largest request (1.5 MiB), and its 100 000 lines too many to read; a site's other
// origins are, one and all, not needed or unusable. What is kept is about 1 MB: 2 600
// rows of numbers (their reasons would add 0.7 MB).
const MaxWireRows = 10_000

// WireDecision is d as the steering controller writes it and the API serves it, with
// its reasons; a decision of more than MaxWireRows rows keeps those that carry flows,
// and the origins' reasons alone.
func WireDecision(d Decision) wire.SteeringDecision {
	if t, ok := trimmed(d); ok {
		d = t
		d.Origins = d.Explain().Origins
	} else {
		d = d.Explain()
	}
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

// trimmed is d above MaxWireRows: only the rows with a share or a target, the note
// saying how many are left out; ok is false when d fits as it is.
func trimmed(d Decision) (_ Decision, ok bool) {
	rows := 0
	for _, s := range d.Sites {
		rows += len(s.Shares)
	}
	if rows <= MaxWireRows {
		return d, false
	}
	out := d
	out.Sites = make([]SiteDecision, len(d.Sites))
	kept := 0
	for i, s := range d.Sites {
		s.Shares = slices.DeleteFunc(slices.Clone(s.Shares), func(sh ShareDecision) bool { return sh.Share == 0 && sh.Target == 0 })
		kept += len(s.Shares)
		out.Sites[i] = s
	}
	more := fmt.Sprintf("%d of %d site × origin rows shown (above %d): those with a share or a target, without their reasons", kept, rows, MaxWireRows)
	if out.Note == "" {
		out.Note = more
	} else {
		out.Note += "; " + more
	}
	return out, true
}
