package steer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The target must not depend on the solver: on random fleets (unhealthy origins,
// unreachable pairs, idle sites, demand above capacity, sites whose reachable origins
// are full while others have room), the fast solver gives the reference's shares and
// loads. RTTs are drawn to the nanosecond, so the optimum is unique and any difference
// is a bug; with RTTs in whole milliseconds ties are common and several assignments are
// optimal: then the flow-weighted RTT and the load of every origin at its limit agree.
func TestTargetMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 2000 {
		coarse := round%2 == 1
		obs := randomFleet(rng, coarse)
		got, want := SolveTarget(obs), referenceTarget(obs)
		if got.Note != want.Note || got.Overcommit != want.Overcommit {
			t.Fatalf("round %d: note %q overcommit %v, reference %q %v", round, got.Note, got.Overcommit, want.Note, want.Overcommit)
		}
		if coarse {
			gotFlow, gotCost, wantFlow, wantCost := placed(obs, want.Limit)
			if math.Abs(gotFlow-wantFlow) > 1e-6*(1+wantFlow) || math.Abs(gotCost-wantCost) > 1e-6*(1+wantCost) {
				t.Fatalf("round %d: placed %v at a flow-weighted RTT of %v, reference %v at %v\nobs %+v", round, gotFlow, gotCost, wantFlow, wantCost, obs)
			}
			continue
		}
		for site, ws := range want.Shares {
			gs, ok := got.Shares[site]
			if !ok {
				t.Fatalf("round %d: site %s has no target, the reference's is %v", round, site, ws)
			}
			for o, w := range ws {
				if math.Abs(gs[o]-w) > 1e-9 {
					t.Fatalf("round %d: %s → %s %v, reference %v\nobs %+v\ngot %v\nwant %v", round, site, o, gs[o], w, obs, got.Shares, want.Shares)
				}
			}
		}
		if len(got.Shares) != len(want.Shares) {
			t.Fatalf("round %d: %d sites with a target, reference %d", round, len(got.Shares), len(want.Shares))
		}
		for o, w := range want.Load {
			if math.Abs(got.Load[o]-w) > 1e-9*(1+w) {
				t.Fatalf("round %d: %s's load %v, reference %v", round, o, got.Load[o], w)
			}
		}
	}
}

// randomFleet is up to 8 sites and 6 origins, some unhealthy, some pairs unreachable,
// some sites idle, total demand from a fifth to twice the capacity.
func randomFleet(rng *rand.Rand, coarse bool) Observation {
	var obs Observation
	nO, nS := 1+rng.IntN(6), 1+rng.IntN(8)
	for j := range nO {
		obs.Origins = append(obs.Origins, Origin{Name: fmt.Sprintf("o%d", j), Capacity: float64(rng.IntN(400)), Healthy: rng.IntN(6) > 0})
	}
	for i := range nS {
		s := Site{Name: fmt.Sprintf("s%d", i), RTT: map[string]time.Duration{}}
		if rng.IntN(6) > 0 {
			s.Demand = rng.Float64() * 300
		}
		for _, o := range obs.Origins {
			if rng.IntN(5) == 0 {
				continue // unreachable
			}
			if coarse {
				s.RTT[o.Name] = time.Duration(rng.IntN(5)*10) * time.Millisecond
			} else {
				s.RTT[o.Name] = time.Duration(rng.Int64N(int64(200 * time.Millisecond)))
			}
		}
		obs.Sites = append(obs.Sites, s)
	}
	return obs
}

// placed is the demand both solvers place on origins (before what could not be placed
// is spread) and its flow-weighted RTT. With ties, which sites keep the demand that
// cannot be placed may differ (it is then spread by capacity over what each reaches);
// how much is placed, and at what cost, may not.
func placed(obs Observation, limit map[string]float64) (gotFlow, gotCost, wantFlow, wantCost float64) {
	x := index(obs)
	tg := solve(x)
	var healthy []Origin
	for _, o := range obs.Origins {
		if o.Healthy {
			healthy = append(healthy, o)
		}
	}
	var demand float64
	for _, s := range obs.Sites {
		demand += s.Demand
	}
	if len(healthy) == 0 {
		return
	}
	flows := assign(x, tg, epsilon(demand))
	for i := range obs.Sites {
		for j, f := range flows[i*x.nO : (i+1)*x.nO] {
			gotFlow += f
			gotCost += f * x.rtt[i*x.nO+j]
		}
	}
	for i, m := range refAssign(obs.Sites, healthy, limit) {
		for o, f := range m {
			wantFlow += f
			wantCost += f * ms(obs.Sites[i].RTT[o])
		}
	}
	return
}

// SolveTarget computes the target of obs. An unhealthy origin gets nothing.
func referenceTarget(obs Observation) Target {
	t := Target{Shares: Shares{}, Load: map[string]float64{}, Limit: map[string]float64{}, Overcommit: 1}
	var demand, capacity float64
	var healthy []Origin
	for _, o := range obs.Origins {
		t.Load[o.Name] = 0
		if o.Healthy {
			healthy = append(healthy, o)
			capacity += o.Capacity
		}
	}
	for _, s := range obs.Sites {
		demand += s.Demand
	}
	if len(healthy) == 0 {
		t.Note = "no healthy origin: shares left as they are"
		return t
	}
	for _, o := range healthy {
		t.Limit[o.Name] = o.Capacity
	}
	switch {
	case capacity <= 0:
		// Nothing to be proportional to: the healthy origins share equally.
		for _, o := range healthy {
			t.Limit[o.Name] = demand / float64(len(healthy))
		}
		t.Note = fmt.Sprintf("demand %s/s, healthy capacity 0: spread equally over %d healthy origins", rate(demand), len(healthy))
	case demand > capacity:
		t.Overcommit = demand / capacity
		for _, o := range healthy {
			t.Limit[o.Name] = o.Capacity * t.Overcommit
		}
		t.Note = fmt.Sprintf("demand %s/s exceeds healthy capacity %s/s: every healthy origin takes %s of its capacity",
			rate(demand), rate(capacity), pct(t.Overcommit))
	}

	flows := refAssign(obs.Sites, healthy, t.Limit)
	for si, s := range obs.Sites {
		usable := refUsableOrigins(s, healthy)
		if len(usable) == 0 {
			continue
		}
		m := map[string]float64{}
		for _, o := range obs.Origins {
			m[o.Name] = 0
		}
		var routed float64
		for _, o := range usable {
			routed += flows[si][o.Name]
		}
		switch {
		case s.Demand <= 0:
			m[refMarginalOrigin(s, usable, t.Limit, flows)] = 1
		default:
			// Demand the flow could not place (its reachable origins are full while
			// others have room) is spread over what it reaches, by capacity.
			left := s.Demand - routed
			var usableCap float64
			for _, o := range usable {
				usableCap += t.Limit[o.Name]
			}
			for _, o := range usable {
				f := flows[si][o.Name]
				if left > 0 {
					if usableCap > 0 {
						f += left * t.Limit[o.Name] / usableCap
					} else {
						f += left / float64(len(usable))
					}
				}
				m[o.Name] = f / s.Demand
				t.Load[o.Name] += f
			}
		}
		t.Shares[s.Name] = m
	}
	return t
}

// usableOrigins are the healthy origins that s has an RTT to, in observation order.
func refUsableOrigins(s Site, healthy []Origin) []Origin {
	var out []Origin
	for _, o := range healthy {
		if _, ok := s.RTT[o.Name]; ok {
			out = append(out, o)
		}
	}
	return out
}

// marginalOrigin is where a site without demand would send its first flows: the
// closest origin with room left, else the closest.
func refMarginalOrigin(s Site, usable []Origin, limit map[string]float64, flows []map[string]float64) string {
	used := map[string]float64{}
	for _, f := range flows {
		for o, v := range f {
			used[o] += v
		}
	}
	best, bestRoom := "", ""
	for _, o := range usable {
		if best == "" || s.RTT[o.Name] < s.RTT[best] {
			best = o.Name
		}
		if limit[o.Name]-used[o.Name] > epsilon(limit[o.Name]) && (bestRoom == "" || s.RTT[o.Name] < s.RTT[bestRoom]) {
			bestRoom = o.Name
		}
	}
	if bestRoom != "" {
		return bestRoom
	}
	return best
}

// assign solves the transportation problem by successive shortest paths: each
// augmentation sends flow along the cheapest path of the residual graph, whose reverse
// edges let a later site push an earlier one off an origin when that lowers the total.
// It returns, per site (by index), the flow to each origin.
func refAssign(sites []Site, healthy []Origin, limit map[string]float64) []map[string]float64 {
	nS, nO := len(sites), len(healthy)
	src, sink := 0, 1+nS+nO
	g := refNewFlowGraph(sink + 1)
	var total float64
	type link struct{ site, origin, edge int }
	var links []link
	for si, s := range sites {
		total += s.Demand
		if s.Demand > 0 {
			g.add(src, 1+si, s.Demand, 0)
		}
		for oi, o := range healthy {
			if rtt, ok := s.RTT[o.Name]; ok {
				links = append(links, link{si, oi, g.add(1+si, 1+nS+oi, math.Inf(1), ms(rtt))})
			}
		}
	}
	for oi, o := range healthy {
		g.add(1+nS+oi, sink, limit[o.Name], 0)
	}
	g.minCostFlow(src, sink, epsilon(total))
	out := make([]map[string]float64, nS)
	for i := range out {
		out[i] = map[string]float64{}
	}
	for _, l := range links {
		out[l.site][healthy[l.origin].Name] = g.flow(l.edge)
	}
	return out
}

type refFlowEdge struct {
	to        int
	cap, cost float64
}

type refFlowGraph struct {
	edges []refFlowEdge // edge i's reverse is i^1
	adj   [][]int
}

func refNewFlowGraph(n int) *refFlowGraph { return &refFlowGraph{adj: make([][]int, n)} }

func (g *refFlowGraph) add(u, v int, capacity, cost float64) int {
	g.adj[u] = append(g.adj[u], len(g.edges))
	g.edges = append(g.edges, refFlowEdge{to: v, cap: capacity, cost: cost})
	g.adj[v] = append(g.adj[v], len(g.edges))
	g.edges = append(g.edges, refFlowEdge{to: u, cap: 0, cost: -cost})
	return len(g.edges) - 2
}

func (g *refFlowGraph) flow(e int) float64 { return g.edges[e^1].cap }

// minCostFlow pushes as much flow as fits from src to sink, cheapest paths first.
// Bellman-Ford finds each path (the residual graph has negative edges); the graph has
// a handful of nodes per site and origin.
func (g *refFlowGraph) minCostFlow(src, sink int, eps float64) {
	n := len(g.adj)
	for {
		dist := make([]float64, n)
		via := make([]int, n)
		for i := range dist {
			dist[i], via[i] = math.Inf(1), -1
		}
		dist[src] = 0
		for range n {
			changed := false
			for u := range n {
				if math.IsInf(dist[u], 1) {
					continue
				}
				for _, e := range g.adj[u] {
					ed := g.edges[e]
					if ed.cap > eps && dist[u]+ed.cost < dist[ed.to]-1e-9 {
						dist[ed.to], via[ed.to] = dist[u]+ed.cost, e
						changed = true
					}
				}
			}
			if !changed {
				break
			}
		}
		if via[sink] < 0 {
			return
		}
		push := math.Inf(1)
		for v := sink; v != src; v = g.edges[via[v]^1].to {
			push = min(push, g.edges[via[v]].cap)
		}
		if push <= eps {
			return
		}
		for v := sink; v != src; v = g.edges[via[v]^1].to {
			g.edges[via[v]].cap -= push
			g.edges[via[v]^1].cap += push
		}
	}
}
