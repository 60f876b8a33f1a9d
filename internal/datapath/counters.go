package datapath

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
)

// Counters are packets, bytes and new flows (flows whose backend the ring chose, on this
// node) summed over CPUs.
type Counters struct {
	Packets  uint64
	Bytes    uint64
	NewFlows uint64
}

func (c *Counters) add(o Counters) {
	c.Packets += o.Packets
	c.Bytes += o.Bytes
	c.NewFlows += o.NewFlows
}

// BackendCounters are the packets and bytes sent to backend slot id.
func (lb *LB) BackendCounters(id uint32) (Counters, error) {
	var per []lbLbBackendCpuState
	counterReads.Add(1)
	if err := lb.objs.LbBackendCpu.Lookup(id, &per); err != nil {
		return Counters{}, fmt.Errorf("lb_backend_cpu %d: %w", id, err)
	}
	var c Counters
	for _, p := range per {
		c.add(Counters{Packets: p.Stats.Packets, Bytes: p.Stats.Bytes, NewFlows: p.Stats.NewFlows})
	}
	return c, nil
}

// ServiceCounters are the packets and bytes forwarded for service id: the sum of its
// backends' counters, and of those its deleted backends had. The program counts per
// backend only, so that a packet pays one counter lookup, not two.
func (lb *LB) ServiceCounters(id uint32) (Counters, error) {
	backends, c := lb.tally.of(id)
	for _, b := range backends {
		bc, err := lb.BackendCounters(b)
		if err != nil {
			return Counters{}, err
		}
		c.add(bc)
	}
	return c, nil
}

// counterReads counts the bpf() calls that read lb_backend_cpu, for the tests: a pass
// over every service's counters costs a few, not one per backend.
var counterReads atomic.Uint64

// counterBatch is the backend slots one bpf() call of ReadCounters reads: at 2 CPUs
// and 48 bytes a slot and CPU, 400 KiB of buffer.
const counterBatch = 4096

// CounterSnapshot is every service's and backend's counters read at once
// (ReadCounters): what the rate meter, the status and the status page's history share
// rather than each reading the map again, slot by slot.
type CounterSnapshot struct {
	backends []Counters // by backend id
	services []Counters // by service id
}

// Backend is backend slot id's counters (zero for a slot not in use).
func (s *CounterSnapshot) Backend(id uint32) Counters {
	if s == nil || int(id) >= len(s.backends) {
		return Counters{}
	}
	return s.backends[id]
}

// Service is service id's counters, as ServiceCounters sums them.
func (s *CounterSnapshot) Service(id uint32) Counters {
	if s == nil || int(id) >= len(s.services) {
		return Counters{}
	}
	return s.services[id]
}

// ReadCounters reads every backend slot in use, counterBatch slots a bpf() call (a
// per-CPU array reads in batches since Linux 5.6), and sums them by service: one pass
// costs the node tens of system calls at 100 000 services where a lookup per slot cost
// 300 000.
func (lb *LB) ReadCounters() (*CounterSnapshot, error) {
	top := lb.tally.top()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	snap := &CounterSnapshot{backends: make([]Counters, top+1)}
	keys := make([]uint32, min(counterBatch, top+1))
	values := make([]lbLbBackendCpuState, len(keys)*ncpu)
	var cursor ebpf.MapBatchCursor
	for next := uint32(0); next <= top; {
		counterReads.Add(1)
		n, err := lb.objs.LbBackendCpu.BatchLookup(&cursor, keys, values, nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("lb_backend_cpu: batch lookup: %w", err)
		}
		for i := range n {
			if id := keys[i]; id <= top {
				var c Counters
				for _, p := range values[i*ncpu : (i+1)*ncpu] {
					c.add(Counters{Packets: p.Stats.Packets, Bytes: p.Stats.Bytes, NewFlows: p.Stats.NewFlows})
				}
				snap.backends[id] = c
			}
		}
		if n == 0 || err != nil { // the end of the map
			break
		}
		next = keys[n-1] + 1
	}
	snap.services = lb.tally.sum(snap.backends)
	return snap, nil
}

// serviceTally is what ServiceCounters needs besides the backends' counters: which
// backend ids are a service's, and what the service's deleted backends had counted.
// The reconciler writes it, the API and the rate meter read it.
type serviceTally struct {
	mu       sync.Mutex
	service  map[uint32]uint32              // backend id → its service id
	backends map[uint32]map[uint32]struct{} // service id → its backend ids
	carried  map[uint32]Counters            // service id → its deleted backends' counts
}

func newServiceTally() *serviceTally {
	return &serviceTally{service: map[uint32]uint32{}, backends: map[uint32]map[uint32]struct{}{}, carried: map[uint32]Counters{}}
}

// of returns service id's backend ids and its carried counts.
func (t *serviceTally) of(id uint32) ([]uint32, Counters) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]uint32, 0, len(t.backends[id]))
	for b := range t.backends[id] {
		ids = append(ids, b)
	}
	return ids, t.carried[id]
}

// top is the highest backend id in use.
func (t *serviceTally) top() uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var top uint32
	for id := range t.service {
		top = max(top, id)
	}
	return top
}

// sum is the counters of each service (by id) given its backends' (by id): theirs
// summed, and its deleted backends' carried counts.
func (t *serviceTally) sum(backends []Counters) []Counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	var services []Counters
	grow := func(service uint32) {
		if int(service) >= len(services) {
			services = append(services, make([]Counters, int(service)+1-len(services))...)
		}
	}
	for id, service := range t.service {
		grow(service)
		if int(id) < len(backends) {
			services[service].add(backends[id])
		}
	}
	for service, c := range t.carried {
		grow(service)
		services[service].add(c)
	}
	return services
}

// put makes backend id one of service's.
func (t *serviceTally) put(id, service uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.service[id]; ok && old != service {
		delete(t.backends[old], id)
	}
	t.service[id] = service
	if t.backends[service] == nil {
		t.backends[service] = map[uint32]struct{}{}
	}
	t.backends[service][id] = struct{}{}
}

// remove takes backend id out of its service, whose carried counts keep final.
func (t *serviceTally) remove(id uint32, final Counters) {
	t.mu.Lock()
	defer t.mu.Unlock()
	service, ok := t.service[id]
	if !ok {
		return
	}
	delete(t.service, id)
	delete(t.backends[service], id)
	if len(t.backends[service]) == 0 {
		delete(t.backends, service)
	}
	c := t.carried[service]
	c.add(final)
	t.carried[service] = c
}

// reset forgets service id's carried counts, before the id serves another service.
func (t *serviceTally) reset(id uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.carried, id)
}

// dropReasonNames are the metric label values of enum lb_drop_reason; a test fails
// when the program gains a reason without a name here.
var dropReasonNames = map[lbLbDropReason]string{
	lbLbDropReasonLB_DROP_TRUNCATED:  "truncated",
	lbLbDropReasonLB_DROP_MALFORMED:  "malformed",
	lbLbDropReasonLB_DROP_FRAGMENT:   "fragment",
	lbLbDropReasonLB_DROP_IPV6EXT:    "ipv6_ext",
	lbLbDropReasonLB_DROP_NO_BACKEND: "no_backend",
	lbLbDropReasonLB_DROP_NO_ROUTE:   "no_route",
	lbLbDropReasonLB_DROP_NO_NEIGH:   "no_neigh",
	lbLbDropReasonLB_DROP_TOO_BIG:    "too_big",
	lbLbDropReasonLB_DROP_NO_TX_PORT: "no_tx_port",
	lbLbDropReasonLB_DROP_ENCAP:      "encap",
	lbLbDropReasonLB_DROP_NAT_PORTS:  "nat_ports",
}

func dropReasonName(r lbLbDropReason) string {
	if n, ok := dropReasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("reason_%d", r)
}

// Drops returns the drop counters by reason name, every reason present.
func (lb *LB) Drops() (map[string]uint64, error) {
	out := map[string]uint64{}
	for r := lbLbDropReason(1); r < lbLbDropReasonLB_DROP_MAX; r++ {
		var per []uint64
		if err := lb.objs.LbDrops.Lookup(uint32(r), &per); err != nil {
			return nil, fmt.Errorf("lb_drops %d: %w", r, err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		out[dropReasonName(r)] = n
	}
	return out, nil
}

// eventNames are the names of enum lb_event: what the program did besides forwarding
// and dropping.
var eventNames = map[lbLbEvent]string{
	lbLbEventLB_EV_FLOW_NOT_INSERTED:  "flow_not_inserted",
	lbLbEventLB_EV_ICMP_ECHO_REPLY:    "icmp_echo_reply",
	lbLbEventLB_EV_ICMP_TO_BACKEND:    "icmp_to_backend",
	lbLbEventLB_EV_ICMP_TOO_BIG_SENT:  "icmp_too_big_sent",
	lbLbEventLB_EV_TRANSIT_FORWARDED:  "transit_forwarded",
	lbLbEventLB_EV_NAT_REPLY:          "nat_reply",
	lbLbEventLB_EV_NAT_ICMP_TO_CLIENT: "nat_icmp_to_client",
}

func eventName(e lbLbEvent) string {
	if n, ok := eventNames[e]; ok {
		return n
	}
	return fmt.Sprintf("event_%d", e)
}

// Events returns the event counters by name, every event present: new flows forwarded
// but not remembered (node.new_flow_rate), echo replies, ICMP errors sent to backends,
// "fragmentation needed" / "packet too big" sent to clients, and transit packets routed
// in XDP (node.forward_transit).
func (lb *LB) Events() (map[string]uint64, error) {
	out := map[string]uint64{}
	for e := lbLbEvent(0); e < lbLbEventLB_EV_MAX; e++ {
		var per []uint64
		if err := lb.objs.LbEvents.Lookup(uint32(e), &per); err != nil {
			return nil, fmt.Errorf("lb_events %d: %w", e, err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		out[eventName(e)] = n
	}
	return out, nil
}
