package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Counters are packets, bytes and new flows (flows whose backend the ring chose, on this
// node) summed over CPUs.
type Counters struct {
	Packets  uint64
	Bytes    uint64
	NewFlows uint64
}

func sumCounters(m *ebpf.Map, id uint32) (Counters, error) {
	var per []lbLbCounters
	if err := m.Lookup(id, &per); err != nil {
		return Counters{}, err
	}
	var c Counters
	for _, p := range per {
		c.Packets += p.Packets
		c.Bytes += p.Bytes
		c.NewFlows += p.NewFlows
	}
	return c, nil
}

// BackendCounters are the packets and bytes sent to backend slot id.
func (lb *LB) BackendCounters(id uint32) (Counters, error) {
	c, err := sumCounters(lb.objs.LbBackendStats, id)
	if err != nil {
		return c, fmt.Errorf("lb_backend_stats %d: %w", id, err)
	}
	return c, nil
}

// ServiceCounters are the packets and bytes forwarded for service id.
func (lb *LB) ServiceCounters(id uint32) (Counters, error) {
	c, err := sumCounters(lb.objs.LbServiceStats, id)
	if err != nil {
		return c, fmt.Errorf("lb_service_stats %d: %w", id, err)
	}
	return c, nil
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
	lbLbEventLB_EV_FLOW_NOT_INSERTED: "flow_not_inserted",
	lbLbEventLB_EV_ICMP_ECHO_REPLY:   "icmp_echo_reply",
	lbLbEventLB_EV_ICMP_TO_BACKEND:   "icmp_to_backend",
	lbLbEventLB_EV_ICMP_TOO_BIG_SENT: "icmp_too_big_sent",
	lbLbEventLB_EV_TRANSIT_FORWARDED: "transit_forwarded",
	lbLbEventLB_EV_NAT_REPLY:         "nat_reply",
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
