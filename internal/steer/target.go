package steer

import (
	"fmt"
	"math"
	"time"
)

// Target is where the shares should be for an observation: the assignment of every
// site's demand to origins that minimises the flow-weighted RTT while no origin takes
// more than its capacity — a transportation problem, sites × origins, solved exactly
// as a min-cost flow (source → site: the demand; site → origin: cost the RTT; origin →
// sink: the capacity). Closest first falls out of it; where two sites compete for one
// origin, the one that would lose more RTT elsewhere keeps it.
type Target struct {
	// Shares has a site only when it can reach a healthy origin.
	Shares Shares
	// Load is what each origin takes at the observed demand.
	Load map[string]float64
	// Limit is what each healthy origin was filled up to: its capacity, times
	// Overcommit when the demand exceeds the healthy capacity.
	Limit map[string]float64
	// Overcommit is total demand / total healthy capacity when above 1, else 1: the
	// excess is spread over the healthy origins in proportion to their capacity.
	Overcommit float64
	// Note says so when the demand exceeds the capacity, or nothing is healthy.
	Note string
}

// SolveTarget computes the target of obs. An unhealthy origin gets nothing.
func SolveTarget(obs Observation) Target {
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

	flows := assign(obs.Sites, healthy, t.Limit)
	for si, s := range obs.Sites {
		usable := usableOrigins(s, healthy)
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
			m[marginalOrigin(s, usable, t.Limit, flows)] = 1
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
func usableOrigins(s Site, healthy []Origin) []Origin {
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
func marginalOrigin(s Site, usable []Origin, limit map[string]float64, flows []map[string]float64) string {
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

func epsilon(scale float64) float64 { return 1e-9 * (1 + math.Abs(scale)) }

// assign solves the transportation problem by successive shortest paths: each
// augmentation sends flow along the cheapest path of the residual graph, whose reverse
// edges let a later site push an earlier one off an origin when that lowers the total.
// It returns, per site (by index), the flow to each origin.
func assign(sites []Site, healthy []Origin, limit map[string]float64) []map[string]float64 {
	nS, nO := len(sites), len(healthy)
	src, sink := 0, 1+nS+nO
	g := newFlowGraph(sink + 1)
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

type flowEdge struct {
	to        int
	cap, cost float64
}

type flowGraph struct {
	edges []flowEdge // edge i's reverse is i^1
	adj   [][]int
}

func newFlowGraph(n int) *flowGraph { return &flowGraph{adj: make([][]int, n)} }

func (g *flowGraph) add(u, v int, capacity, cost float64) int {
	g.adj[u] = append(g.adj[u], len(g.edges))
	g.edges = append(g.edges, flowEdge{to: v, cap: capacity, cost: cost})
	g.adj[v] = append(g.adj[v], len(g.edges))
	g.edges = append(g.edges, flowEdge{to: u, cap: 0, cost: -cost})
	return len(g.edges) - 2
}

func (g *flowGraph) flow(e int) float64 { return g.edges[e^1].cap }

// minCostFlow pushes as much flow as fits from src to sink, cheapest paths first.
// Bellman-Ford finds each path (the residual graph has negative edges); the graph has
// a handful of nodes per site and origin.
func (g *flowGraph) minCostFlow(src, sink int, eps float64) {
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
