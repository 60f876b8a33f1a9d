package kubesource

import (
	"cmp"
	"maps"
	"reflect"
	"slices"

	"github.com/manifoldlb/manifold/internal/config"
)

// planned is the cluster as the node's source last planned it: each Service's plan
// (of those that make a service or a skip), and how many of them claim each
// VIP:port/protocol. A change of one Service replans that Service alone and costs in
// proportion to it, while no address it has or had is claimed twice: then which
// Service serves it may move, and every plan is combined again (combine), as a change
// that may touch any Service (a Node's) replans them all.
type planned struct {
	plans  map[string]servicePlan
	claims map[vipKey]int
}

func newPlanned() *planned {
	return &planned{plans: map[string]servicePlan{}, claims: map[vipKey]int{}}
}

// replanned is what a replan makes: the services served, sorted by name; those added
// or changed and the names of those gone since the services served before; and what
// was skipped or refused, in the Services' order.
type replanned struct {
	served    []config.Service
	changed   []config.Service
	gone      []string
	skipped   []string
	outOfPool []Refusal
}

// replan takes the new plans of some Services (of every Service, whole), each passed
// through servable first; before is the services served before, sorted by name.
func (pl *planned) replan(plans []servicePlan, servable func(*servicePlan), before []config.Service, whole bool) replanned {
	all := whole
	was := make([]servicePlan, len(plans))
	for i := range plans {
		servable(&plans[i])
		was[i] = pl.plans[plans[i].key]
		all = all || pl.contested(was[i])
		pl.set(plans[i])
		all = all || pl.contested(plans[i])
	}
	var r replanned
	if all {
		p := combine(slices.Collect(maps.Values(pl.plans)))
		r.served, r.skipped, r.outOfPool = p.Services, p.Skipped, p.OutOfPool
		r.changed, r.gone = diff(before, r.served)
		return r
	}
	// no address that two Services claim: each Service's services are served as planned
	now := map[string]bool{}
	for _, sp := range plans {
		for _, svc := range sp.services {
			now[svc.Name] = true
			if i, ok := slices.BinarySearchFunc(before, svc.Name, byName); !ok || !reflect.DeepEqual(before[i], svc) {
				r.changed = append(r.changed, svc)
			}
		}
	}
	for _, sp := range was {
		for _, svc := range sp.services {
			if !now[svc.Name] {
				r.gone = append(r.gone, svc.Name)
			}
		}
	}
	slices.SortFunc(r.changed, func(a, b config.Service) int { return cmp.Compare(a.Name, b.Name) })
	slices.Sort(r.gone)
	r.served = merged(before, r.changed, r.gone)
	r.skipped, r.outOfPool = pl.problems()
	return r
}

// set makes sp the plan of its Service (an empty one: it has none).
func (pl *planned) set(sp servicePlan) {
	for _, k := range pl.plans[sp.key].keys() {
		if pl.claims[k]--; pl.claims[k] == 0 {
			delete(pl.claims, k)
		}
	}
	delete(pl.plans, sp.key)
	if sp.empty() {
		return
	}
	pl.plans[sp.key] = sp
	for _, k := range sp.keys() {
		pl.claims[k]++
	}
}

// contested tells whether another Service claims an address of sp's services.
func (pl *planned) contested(sp servicePlan) bool {
	return slices.ContainsFunc(sp.keys(), func(k vipKey) bool { return pl.claims[k] > 1 })
}

// problems is what the plans skipped and refused, in the Services' order.
func (pl *planned) problems() (skipped []string, outOfPool []Refusal) {
	var keys []string
	for key, sp := range pl.plans {
		if len(sp.skipped) > 0 {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, compareKeys)
	for _, key := range keys {
		skipped = append(skipped, pl.plans[key].skipped...)
		outOfPool = append(outOfPool, pl.plans[key].outOfPool...)
	}
	return skipped, outOfPool
}

func byName(s config.Service, name string) int { return cmp.Compare(s.Name, name) }

// diff is what changed from before to after (both sorted by name): the services added
// or changed, and the names of those gone.
func diff(before, after []config.Service) (changed []config.Service, gone []string) {
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || i < len(before) && before[i].Name < after[j].Name:
			gone = append(gone, before[i].Name)
			i++
		case i == len(before) || after[j].Name < before[i].Name:
			changed = append(changed, after[j])
			j++
		default:
			if !reflect.DeepEqual(before[i], after[j]) {
				changed = append(changed, after[j])
			}
			i++
			j++
		}
	}
	return changed, gone
}

// merged is served (sorted by name) with changed put in and gone taken out (both
// sorted by name): a new slice, as the State shares the old one.
func merged(served, changed []config.Service, gone []string) []config.Service {
	out := make([]config.Service, 0, len(served)+len(changed))
	i, j, g := 0, 0, 0
	for i < len(served) || j < len(changed) {
		switch {
		case j == len(changed) || i < len(served) && served[i].Name < changed[j].Name:
			for g < len(gone) && gone[g] < served[i].Name {
				g++
			}
			if g == len(gone) || gone[g] != served[i].Name {
				out = append(out, served[i])
			}
			i++
		case i == len(served) || changed[j].Name < served[i].Name:
			out = append(out, changed[j])
			j++
		default:
			out = append(out, changed[j])
			i++
			j++
		}
	}
	return out
}
