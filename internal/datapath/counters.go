package datapath

import (
	"fmt"
	"sync"
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
