package fleet

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// A node's record is written every second, and etcd refuses a request over 1.5 MiB: a
// record of every service's load (3.6 MB at 10 000 services) was never written at
// all. So a record counts everything (wire.RecordTotals) and lists only what the fleet
// reads one by one, and whatever it lists is cut to wire.MaxRecordBytes before it is
// written (wire.RecordTruncation says what was cut):
//
//	the node's status ─► RecordServices: totals; the steered services, then the
//	                     services not as desired
//	                 ─► Source.fill: the source's state (revision, refusals)
//	                 ─► encodeRecord: JSON within MaxRecordBytes ─► P/nodes/<name>

// RecordServices is what a node's record says of its services: the totals, and the
// services the fleet reads one by one, in the order a record cut to its bound keeps
// them. First every service with origins, whose loads, health and RTTs are the
// steering controller's input, one entry per origin (originLoads); then every service not as desired: a backend down or
// failing its check, or the VIP not announced for another reason than the node having
// no BGP. An operator's draining is as desired. rtt gives a backend's smoothed RTT in
// milliseconds (0: none yet); origins the tunnelled origins of each tunnel service, as
// the node's tunnel edge sees them (nil without an edge).
func RecordServices(services []wire.ServiceStatus, rtt func(service, backend string) float64, origins map[string][]wire.OriginLoad) ([]wire.ServiceLoad, wire.RecordTotals) {
	var totals wire.RecordTotals
	var steered, exceptions []wire.ServiceLoad
	for i := range services {
		s := &services[i] // a status is large (its spec): not copied
		totals.Services++
		if s.Announced {
			totals.Announced++
		}
		for j := range s.Backends {
			b := &s.Backends[j]
			totals.Backends++
			switch {
			case b.State == wire.BackendDown || !b.Health.Up:
				totals.BackendsDown++
			case b.State == wire.BackendUp:
				totals.BackendsUp++
			}
		}
		if !Listed(s) {
			continue
		}
		l := wire.ServiceLoad{Name: s.Name, Announced: s.Announced, NewFlowsPerSecond: s.NewFlowsPerSecond,
			PacketsPerSecond: s.PacketsPerSecond, BytesPerSecond: s.BytesPerSecond}
		if len(s.Spec.Origins) > 0 {
			l.Origins = originLoads(s, rtt, origins[s.Name])
			steered = append(steered, l)
			continue
		}
		l.Backends = make([]wire.BackendLoad, 0, len(s.Backends))
		for _, b := range s.Backends {
			l.Backends = append(l.Backends, wire.BackendLoad{Address: b.Address, State: b.State, Healthy: b.Health.Up,
				NewFlowsPerSecond: b.NewFlowsPerSecond, PacketsPerSecond: b.PacketsPerSecond, BytesPerSecond: b.BytesPerSecond,
				RTTMilliseconds: rtt(s.Name, b.Address)})
		}
		exceptions = append(exceptions, l)
	}
	listed := make([]wire.ServiceLoad, 0, len(steered)+len(exceptions)) // [] rather than null when none
	return append(append(listed, steered...), exceptions...), totals
}

// Listed reports whether a record lists service s (RecordServices): it has origins, or
// it is not as desired. Of s it reads the spec's origins, the announcement and each
// backend's state and health's Up only: a node builds the rest of the status of the
// services listed alone.
func Listed(s *wire.ServiceStatus) bool {
	if len(s.Spec.Origins) > 0 || !s.Announced && s.Reason != reconcile.ReasonNoBGP {
		return true
	}
	for j := range s.Backends {
		if b := &s.Backends[j]; b.State == wire.BackendDown || !b.Health.Up {
			return true
		}
	}
	return false
}

// originLoads is a steered service's load as the record carries it: one entry per
// origin, in the service's order, folding the node's backends of the origin and its
// tunnel edge's view of it (tunnelled) as the steering controller folds them
// (originTally): the controller observes the same from it as from one entry per
// backend, and reads a hundredth of it at 100 backends a service. An origin the node
// sees nothing of (no backend, no connector) is left out, as its backends were.
func originLoads(s *wire.ServiceStatus, rtt func(service, backend string) float64, tunnelled []wire.OriginLoad) []wire.OriginLoad {
	o := newOriginIndex(s.Spec)
	var t originTally
	t.reset(len(s.Spec.Origins))
	for i := range s.Backends {
		b := &s.Backends[i]
		if j, ok := o.ofBackend(b.Address); ok {
			t.add(j, b.NewFlowsPerSecond, b.Health.Up, rtt(s.Name, b.Address))
		}
	}
	for k, ol := range tunnelled {
		if j, ok := o.ofName(ol.Name, k); ok {
			t.add(j, ol.NewFlowsPerSecond, ol.Healthy, ol.RTTMilliseconds)
		}
	}
	out := make([]wire.OriginLoad, 0, len(s.Spec.Origins))
	for j, spec := range s.Spec.Origins {
		if t.seen[j] {
			out = append(out, wire.OriginLoad{Name: spec.Name, Healthy: t.healthy[j], NewFlowsPerSecond: t.load[j], RTTMilliseconds: t.rtt(j)})
		}
	}
	return out
}

// Strings a record carries from elsewhere are cut to these many bytes: an apply error
// names every problem of a revision, a refusal every problem of its document.
const (
	maxApplyError   = 4 << 10
	maxRefusalError = 512
)

// encodeRecord is rec as written to the store, within wire.MaxRecordBytes: a record
// that would be larger keeps the head of each list (wire.RecordTruncation says how)
// and says what it left out. It costs in proportion to the bound, not to the lists:
// items are sized one by one until the room is full. The error is for a record whose
// fixed part alone is over the bound, which no configuration makes.
func encodeRecord(rec wire.NodeRecord) ([]byte, *wire.RecordTruncation, error) {
	rec.ApplyError = cut(rec.ApplyError, maxApplyError)
	rec.Refused = slices.Clone(rec.Refused)
	for i := range rec.Refused {
		rec.Refused[i].Error = cut(rec.Refused[i].Error, maxRefusalError)
	}
	rec.Truncated = nil
	var tunnelServices []string
	if rec.Tunnels != nil {
		tunnelServices = rec.Tunnels.Services
	}
	// the fixed part: the lists empty, the marker at its largest (every item left out)
	fixed := rec
	fixed.Services, fixed.Refused = []wire.ServiceLoad{}, nil
	fixed.Truncated = &wire.RecordTruncation{Services: len(rec.Services), Refused: len(rec.Refused), TunnelServices: len(tunnelServices)}
	if rec.Tunnels != nil {
		fixed.Tunnels = &wire.TunnelEdgeRecord{Relay: rec.Tunnels.Relay, Services: []string{}}
	}
	base, err := json.Marshal(fixed)
	if err != nil {
		return nil, nil, err
	}
	budget := wire.MaxRecordBytes - len(base) - len(`,"refused":[]`)
	if budget < 0 {
		return nil, nil, fmt.Errorf("the node's record is %d bytes without its lists, over the bound of %d", len(base), wire.MaxRecordBytes)
	}
	// each list first takes up to a third of the budget, so that the operator sees some
	// of each; then what is left goes to them in order
	lists := [3]fitting{fitList(tunnelServices), fitList(rec.Services), fitList(rec.Refused)}
	share := budget / len(lists)
	for i := range lists {
		budget -= lists[i].take(share)
	}
	for i := range lists {
		budget -= lists[i].take(budget)
	}
	if lists[0].n == len(tunnelServices) && lists[1].n == len(rec.Services) && lists[2].n == len(rec.Refused) {
		data, err := json.Marshal(rec) // every item fit: the record is whole
		return data, nil, err
	}
	kept := rec
	if rec.Tunnels != nil {
		kept.Tunnels = &wire.TunnelEdgeRecord{Relay: rec.Tunnels.Relay, Services: tunnelServices[:lists[0].n]}
	}
	kept.Services, kept.Refused = rec.Services[:lists[1].n], rec.Refused[:lists[2].n]
	kept.Truncated = &wire.RecordTruncation{TunnelServices: len(tunnelServices) - lists[0].n,
		Services: len(rec.Services) - lists[1].n, Refused: len(rec.Refused) - lists[2].n}
	data, err := json.Marshal(kept)
	if err == nil && len(data) > wire.MaxRecordBytes {
		// the budget counts every byte the lists add; this would be a bug in it
		err = fmt.Errorf("the node's record cut to %d bytes is still over the bound of %d", len(data), wire.MaxRecordBytes)
	}
	return data, kept.Truncated, err
}

// fitting is a list being cut: how many of its first items it keeps, and the size of
// an item as an element of a JSON array (with the comma before it).
type fitting struct {
	len, n int
	size   func(i int) int
}

func fitList[T any](items []T) fitting {
	return fitting{len: len(items), size: func(i int) int {
		b, _ := json.Marshal(items[i]) // the record's own types: they marshal
		return len(b) + 1
	}}
}

// take keeps the next items that fit in budget bytes, and returns their size.
func (f *fitting) take(budget int) int {
	used := 0
	for f.n < f.len {
		size := f.size(f.n)
		if used+size > budget {
			break
		}
		used += size
		f.n++
	}
	return used
}

// cut shortens s to at most n bytes, saying so.
func cut(s string, n int) string {
	const more = "… (cut)"
	if len(s) <= n {
		return s
	}
	i := n - len(more)
	for i > 0 && s[i]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		i--
	}
	return s[:i] + more
}
