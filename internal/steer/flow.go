package steer

import "math"

// The transportation problem of the target (target.go), solved exactly by successive
// shortest paths, one site at a time, in the observation's order.
//
// The graph is source → site (the demand) → origin (cost: the RTT) → sink (the limit).
// A path from a site to the sink goes to an origin, and from there, while the origins
// it meets are full, on through exchanges: an origin o passes flow to o' by moving a
// site s' already on o over to o', at the cost RTT(s', o') − RTT(s', o). That is how
// a later site pushes an earlier one off an origin when that lowers the total. The
// sites never need to be nodes of the search: it runs over the origins alone (100,
// not 1 100), and an origin's exchanges are read off the sites it holds.
//
// Exchange costs can be negative, so each origin (and the sink) carries a potential:
// with them every residual edge costs ≥ 0 and Dijkstra applies; after each search the
// potentials grow by the distances found, which keeps that true (Johnson's
// reweighting, as in every successive-shortest-path solver). A search stops as soon
// as the sink is settled: a site whose closest origin has room settles it at once.
//
// Demand that no origin it reaches can take (they are full while others have room) is
// sent to a last origin, "unplaced", of unbounded capacity and a cost above any path's:
// then every site is placed in full, as much demand as fits is placed on real origins,
// and among those placements the cheapest is found — what a min-cost max-flow gives.
// The caller spreads what stayed unplaced.
//
// Ties are broken by order: the first site, and the first origin, among equals.
// Processing sites one at a time gives an optimal assignment as the global algorithm
// does (every search is a shortest path from the site, so the flow stays optimal for
// the demand placed so far); where several assignments are optimal, which one comes
// out may differ from an algorithm that took the globally cheapest path first.
// TestTargetMatchesReference holds the two to the same result on random fleets.

// assign returns the flow of each site × origin (site-major) placed on real origins.
// eps is the flow below which a capacity or a flow counts as none.
func assign(x *indexed, t *target, eps float64) []float64 {
	nS, nO := len(x.obs.Sites), x.nO
	n := nO + 1 // the origins, then "unplaced"
	unplaced := nO

	// cost is site-major over the n origins: the RTT, +Inf where unusable
	cost := make([]float64, nS*n)
	var longest float64
	for i := range nS {
		for j := range nO {
			c := math.Inf(1)
			if t.usable(x, i, j) {
				c = x.rtt[i*nO+j]
				longest = max(longest, c)
			}
			cost[i*n+j] = c
		}
	}
	// above any path of real origins: a path alternates at most n additions and n
	// subtractions of costs within [0, longest]
	big := float64(2*n+4) * (longest + 1)
	for i := range nS {
		cost[i*n+unplaced] = big
	}
	room := make([]float64, n)
	copy(room, t.limit)
	room[unplaced] = math.Inf(1)

	flow := make([]float64, nS*n)
	on := make([][]int32, n) // the sites with flow on each origin
	h := make([]float64, n)  // potentials
	var hSink float64

	// exchanges(u) is the cheapest exchange out of origin u toward each origin, and
	// the site it moves: worked out again only after a path changed u's sites, which
	// most searches do not (they stop at the site's closest origin)
	best := make([]exchange, n)
	exchanges := func(u int) exchange {
		ex := &best[u]
		if ex.fresh {
			return *ex
		}
		if ex.cost == nil {
			ex.cost, ex.site = make([]float64, n), make([]int32, n)
		}
		for j := range ex.cost {
			ex.cost[j] = math.Inf(1)
		}
		ex.fresh = true
		for _, sp := range on[u] {
			ex.add(cost[int(sp)*n:int(sp+1)*n], u, sp)
		}
		return *ex
	}

	label := make([]float64, n)
	done := make([]bool, n)
	viaSite := make([]int32, n)   // the site whose flow enters this origin on the path
	viaOrigin := make([]int32, n) // the origin that flow leaves, -1 for the path's first hop

	for i, s := range x.obs.Sites {
		left := s.Demand
		for left > eps {
			// Dijkstra over the origins, from site i, on reduced costs
			for j := range n {
				label[j] = cost[i*n+j] - h[j] // +Inf stays +Inf
				done[j], viaSite[j], viaOrigin[j] = false, int32(i), -1
			}
			dSink, end := math.Inf(1), -1
			for {
				u := -1
				for j := range n {
					if !done[j] && label[j] < math.Inf(1) && (u < 0 || label[j] < label[u]) {
						u = j
					}
				}
				if u < 0 || label[u] >= dSink {
					break
				}
				done[u] = true
				if room[u] > eps {
					if c := label[u] + h[u] - hSink; c < dSink {
						dSink, end = c, u
					}
				}
				if label[u] >= dSink {
					continue // the sink is settled at this distance: nothing through u is shorter
				}
				ex := exchanges(u)
				base := label[u] + h[u]
				for j, c := range ex.cost {
					if done[j] || math.IsInf(c, 1) {
						continue
					}
					if d := base + c - h[j]; d < label[j]-1e-9 {
						label[j], viaSite[j], viaOrigin[j] = d, ex.site[j], int32(u)
					}
				}
			}
			if end < 0 {
				break // cannot happen: every site reaches "unplaced"
			}
			push := min(left, room[end])
			for j := end; viaOrigin[j] >= 0; j = int(viaOrigin[j]) {
				push = min(push, flow[int(viaSite[j])*n+int(viaOrigin[j])])
			}
			if push <= eps {
				break
			}
			move := func(sp, j int, delta float64) {
				switch addFlow(flow, on, n, sp, j, delta, eps) {
				case joined:
					best[j].add(cost[sp*n:(sp+1)*n], j, int32(sp))
				case departed:
					best[j].fresh = false
				}
			}
			for j := end; ; j = int(viaOrigin[j]) {
				sp := int(viaSite[j])
				move(sp, j, push)
				if viaOrigin[j] < 0 {
					break
				}
				move(sp, int(viaOrigin[j]), -push)
			}
			room[end] -= push
			left -= push
			for j := range n {
				h[j] += min(label[j], dSink)
			}
			hSink += dSink
		}
	}

	out := make([]float64, nS*nO)
	for i := range nS {
		copy(out[i*nO:(i+1)*nO], flow[i*n:i*n+nO])
	}
	return out
}

// exchange is the cheapest way out of an origin toward each other origin: the cost of
// moving a site from it there (+Inf: none of its sites reaches that origin), and the
// site.
type exchange struct {
	cost  []float64
	site  []int32
	fresh bool
}

// add takes site sp, now on origin u, into u's exchanges (row: its costs). The
// cheapest stay; among equals, the site that came first. A site leaving can only be
// undone by working them out again.
func (ex *exchange) add(row []float64, u int, sp int32) {
	if !ex.fresh {
		return
	}
	for j, c := range row {
		if j != u && c-row[u] < ex.cost[j] {
			ex.cost[j], ex.site[j] = c-row[u], sp
		}
	}
}

type membership int

const (
	stayed membership = iota
	joined
	departed
)

// addFlow changes site i's flow on origin j by delta, keeping on[j] the sites with a
// flow above eps there, and says whether i joined or left them.
func addFlow(flow []float64, on [][]int32, n, i, j int, delta, eps float64) membership {
	before := flow[i*n+j]
	after := before + delta
	flow[i*n+j] = after
	switch {
	case before <= eps && after > eps:
		on[j] = append(on[j], int32(i))
		return joined
	case before > eps && after <= eps:
		for k, s := range on[j] {
			if int(s) == i {
				on[j] = append(on[j][:k], on[j][k+1:]...)
				break
			}
		}
		return departed
	}
	return stayed
}
