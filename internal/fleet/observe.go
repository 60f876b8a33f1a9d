package fleet

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/steer"
)

// What the steering controller observes of a service with origins, from the alive
// nodes' records:
//
//	each node's entries of the service ─► originTally: per origin, the node's load
//	  (one per backend: a record of the      (sum), health (any) and RTT (the mean
//	   release before; one per origin)        over its healthy, measured views)
//	─► per site: demand (sum), RTT (the mean over the site's nodes)
//	─► per origin: load (sum), health (any node)    ─► steer.Observation
//
// A node folds its own backends the same way before it publishes (originLoads), so
// the controller observes the same from a record of either kind, and from a fleet of
// both.

// Observe is what the alive nodes' records say of a service with origins: each
// origin's capacity, load (the new flows/s the nodes sent its backends, or the new
// streams/s their tunnel edges opened to its connectors) and health (a backend of it
// healthy, or a connector of it attached, on some node), and each site's demand (the
// new flows/s of its nodes) and RTT to each origin (see siteRTT). ok is false when no
// alive node carries the service.
func Observe(spec wire.ServiceSpec, records []wire.NodeRecord) (obs steer.Observation, ok bool) {
	o := newObserver(spec)
	for i := range records {
		o.add(&records[i])
	}
	return o.observation()
}

// originIndex finds a service's origin by its name or by the address of one of its
// backends.
type originIndex struct {
	spec      *wire.ServiceSpec
	byName    map[string]int
	byAddress map[netip.Addr]int
}

func newOriginIndex(spec wire.ServiceSpec) originIndex {
	o := originIndex{spec: &spec, byName: make(map[string]int, len(spec.Origins)), byAddress: make(map[netip.Addr]int, len(spec.Backends))}
	for j, origin := range spec.Origins {
		o.byName[origin.Name] = j
	}
	for _, b := range spec.Backends {
		if a, err := netip.ParseAddr(b.Address); err == nil {
			if j, ok := o.byName[b.Origin]; ok {
				o.byAddress[a] = j
			}
		}
	}
	return o
}

// ofName is the index of origin name, which a list in the service's order has at
// position k (looked at first: the usual case, without hashing the name).
func (o originIndex) ofName(name string, k int) (int, bool) {
	if k < len(o.spec.Origins) && o.spec.Origins[k].Name == name {
		return k, true
	}
	j, ok := o.byName[name]
	return j, ok
}

// ofBackend is the index of the origin of the backend at address.
func (o originIndex) ofBackend(address string) (int, bool) {
	a, err := netip.ParseAddr(address)
	if err != nil {
		return 0, false
	}
	j, ok := o.byAddress[a]
	return j, ok
}

// originTally folds what one node sees of each origin of a service (through each of
// its backends, or its tunnel edge): the load summed, healthy if any view is, the RTT
// the mean over the healthy views that measured one.
type originTally struct {
	load    []float64
	healthy []bool
	seen    []bool
	rttSum  []float64
	rttN    []int
}

func (t *originTally) reset(n int) {
	t.load, t.rttSum = resize(t.load, n), resize(t.rttSum, n)
	t.healthy, t.seen, t.rttN = resize(t.healthy, n), resize(t.seen, n), resize(t.rttN, n)
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (t *originTally) add(j int, load float64, healthy bool, rttMs float64) {
	t.seen[j] = true
	t.load[j] += load
	t.healthy[j] = t.healthy[j] || healthy
	if healthy && rttMs > 0 {
		t.rttSum[j] += rttMs
		t.rttN[j]++
	}
}

// rtt is the node's RTT to origin j in milliseconds; 0 when it measured none.
func (t *originTally) rtt(j int) float64 {
	if t.rttN[j] == 0 {
		return 0
	}
	return t.rttSum[j] / float64(t.rttN[j])
}

// observer folds the nodes' records of one service into its observation.
type observer struct {
	index   originIndex
	node    originTally // the node being added, reused
	ok      bool
	load    []float64
	healthy []bool
	sites   map[string]*siteTally
}

// siteTally is a site's part of the observation: its demand, and for each origin the
// sum and count of its nodes' RTTs.
type siteTally struct {
	demand float64
	rttSum []float64
	rttN   []int
}

func newObserver(spec wire.ServiceSpec) *observer {
	n := len(spec.Origins)
	return &observer{index: newOriginIndex(spec), load: make([]float64, n), healthy: make([]bool, n), sites: map[string]*siteTally{}}
}

// add folds in a node's record (the entries of the service, when it lists it).
func (o *observer) add(r *wire.NodeRecord) {
	name := o.index.spec.Name
	for i := range r.Services {
		sl := &r.Services[i]
		if sl.Name != name {
			continue
		}
		o.ok = true
		site := o.sites[r.Site]
		if site == nil {
			site = &siteTally{rttSum: make([]float64, len(o.load)), rttN: make([]int, len(o.load))}
			o.sites[r.Site] = site
		}
		site.demand += sl.NewFlowsPerSecond
		t := &o.node
		t.reset(len(o.load))
		for k := range sl.Backends {
			b := &sl.Backends[k]
			if j, ok := o.index.ofBackend(b.Address); ok {
				t.add(j, b.NewFlowsPerSecond, b.Healthy, b.RTTMilliseconds)
			}
		}
		for k := range sl.Origins {
			ol := &sl.Origins[k]
			if j, ok := o.index.ofName(ol.Name, k); ok {
				t.add(j, ol.NewFlowsPerSecond, ol.Healthy, ol.RTTMilliseconds)
			}
		}
		for j := range o.load {
			o.load[j] += t.load[j]
			o.healthy[j] = o.healthy[j] || t.healthy[j]
			if t.rttN[j] > 0 {
				site.rttSum[j] += t.rtt(j)
				site.rttN[j]++
			}
		}
	}
}

func (o *observer) observation() (obs steer.Observation, ok bool) {
	origins := o.index.spec.Origins
	obs.Origins = make([]steer.Origin, len(origins))
	for j, spec := range origins {
		obs.Origins[j] = steer.Origin{Name: spec.Name, Capacity: float64(spec.Capacity), Load: o.load[j], Healthy: o.healthy[j]}
	}
	names := slices.Sorted(maps.Keys(o.sites))
	obs.Sites = make([]steer.Site, len(names))
	for i, name := range names {
		site := o.sites[name]
		obs.Sites[i] = steer.Site{Name: name, Demand: site.demand, RTT: siteRTT(origins, site)}
	}
	return obs, o.ok
}

// siteRTT is a site's RTT to each origin: the mean over the site's nodes of each
// node's mean RTT to the origin's healthy backends. A site whose nodes measured
// nothing (a health check of kind none, or none succeeded yet) has every origin at 0,
// so that the target breaks the tie in the order of the service's origins. An origin
// that the site's nodes measured nothing of while they measured others has no healthy
// backend from there: it is left out, unreachable from the site.
func siteRTT(origins []wire.OriginSpec, site *siteTally) map[string]time.Duration {
	rtt := make(map[string]time.Duration, len(origins))
	measured := slices.ContainsFunc(site.rttN, func(n int) bool { return n > 0 })
	for j, o := range origins {
		if !measured {
			rtt[o.Name] = 0
		} else if n := site.rttN[j]; n > 0 {
			rtt[o.Name] = time.Duration(site.rttSum[j] / float64(n) * float64(time.Millisecond))
		}
	}
	return rtt
}
