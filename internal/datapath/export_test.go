package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
)

// VIPSlot exposes the VIP address filter's slot function to the tests.
func VIPSlot(a netip.Addr) uint32 { return vipSlot(a, vipSlots) }

// WithKernelHZ runs f with LoadLB seeing hz as the kernel's HZ (0: unknown).
func WithKernelHZ(hz uint32, f func()) {
	old := kernelHZ
	kernelHZ = func() uint32 { return hz }
	defer func() { kernelHZ = old }()
	f()
}

// NATTableSizes are the entries lb_nats and lb_nat_flows were created with.
func (lb *LB) NATTableSizes() (nats, flows uint32) {
	return lb.objs.LbNats.MaxEntries(), lb.objs.LbNatFlows.MaxEntries()
}

// CounterReads is the bpf() calls made so far that read backend counters.
func CounterReads() uint64 { return counterReads.Load() }

// ConfigHZ exposes the kernel config parser to the tests.
var ConfigHZ = configHZ

// findFlow is where f's entry is, found by its key as the program finds it: its
// bucket's index and contents and the way (-1 when neither bucket holds the key).
func (lb *LB) findFlow(f Flow) (idx uint32, b lbLbFlowBucket, way int, err error) {
	k := f.key()
	h := flowKeyHash(k, lb.flowSeed)
	for _, second := range []bool{false, true} {
		idx = flowBucketIndex(h, second, lb.objs.LbFlows.MaxEntries())
		if err := lb.objs.LbFlows.Lookup(idx, &b); err != nil {
			return 0, b, -1, err
		}
		for w := range b.Way {
			if b.Way[w].Key == k && b.Way[w].Used != 0 {
				return idx, b, w, nil
			}
		}
	}
	return 0, b, -1, nil
}

// flowEntry is f's entry in the flow table as the program takes it: nil when neither
// bucket holds it, or when its check word fails (torn).
func (lb *LB) flowEntry(f Flow) (*lbLbFlowEntry, error) {
	_, b, w, err := lb.findFlow(f)
	if err != nil || w < 0 {
		return nil, err
	}
	e := b.Way[w]
	if e.Check != flowCheck(flowKeyHash(e.Key, lb.flowSeed), e.Flow) {
		return nil, nil
	}
	return &e, nil
}

// FlowBackend returns the backend id the flow table holds for f, 0 when none.
func (lb *LB) FlowBackend(f Flow) (uint32, error) {
	e, err := lb.flowEntry(f)
	if err != nil || e == nil {
		return 0, err
	}
	return e.Flow.BackendId, nil
}

// AgeFlow makes f's entry look last used d earlier than it was, as if its flow had
// been idle that long.
func (lb *LB) AgeFlow(f Flow, d time.Duration) error {
	return lb.rewriteFlow(f, func(e *lbLbFlowEntry) {
		if lb.hz != 0 {
			e.Used -= uint32(d.Nanoseconds() * int64(lb.hz) / int64(time.Second))
		} else {
			e.Used -= uint32(d.Nanoseconds() >> 20)
		}
	})
}

// TearFlow gives f's entry backend id without a check word for it, as two CPUs writing
// the entry at once may leave it.
func (lb *LB) TearFlow(f Flow, id uint32) error {
	return lb.rewriteFlow(f, func(e *lbLbFlowEntry) { e.Flow.BackendId = id })
}

// RepinFlow gives f's entry backend id, its check word rewritten with it (a whole write).
func (lb *LB) RepinFlow(f Flow, id uint32) error {
	h := flowKeyHash(f.key(), lb.flowSeed)
	return lb.rewriteFlow(f, func(e *lbLbFlowEntry) {
		e.Flow.BackendId = id
		e.Check = flowCheck(h, e.Flow)
	})
}

// rewriteFlow changes f's entry in place with change.
func (lb *LB) rewriteFlow(f Flow, change func(*lbLbFlowEntry)) error {
	idx, b, w, err := lb.findFlow(f)
	if err != nil {
		return err
	}
	if w < 0 {
		return fmt.Errorf("flow %+v: no entry", f)
	}
	change(&b.Way[w])
	return lb.objs.LbFlows.Put(idx, b)
}

// PutFlow pins flow f to backend id of service serviceID, as if the program had seen
// it (in the first way of its first bucket).
func (lb *LB) PutFlow(f Flow, id, serviceID uint32) error {
	k := f.key()
	h := flowKeyHash(k, lb.flowSeed)
	i := flowBucketIndex(h, false, lb.objs.LbFlows.MaxEntries())
	var b lbLbFlowBucket
	if err := lb.objs.LbFlows.Lookup(i, &b); err != nil {
		return err
	}
	fl := lbLbFlow{BackendId: id, ServiceId: serviceID, Hash: FlowHash(f, false)}
	b.Way[0] = lbLbFlowEntry{Key: k, Flow: fl, Used: 1, Check: flowCheck(h, fl)}
	return lb.objs.LbFlows.Put(i, b)
}

// NATEntry is the state of the NAT entry a backend's replies to node port nport
// carry: its lb_nat_state, whether the backend answered, and whether it exists.
func (lb *LB) NATEntry(backend netip.Addr, bport, nport uint16, proto uint8) (state uint8, replied, ok bool, err error) {
	var v lbLbNat
	if err := lb.objs.LbNats.Lookup(natKey(backend, bport, nport, proto), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, false, false, nil
		}
		return 0, false, false, err
	}
	return uint8(v.State), v.Replied != 0, true, nil
}

// ExpireNAT ages that entry past its timeout, as if its flow had been idle that long.
func (lb *LB) ExpireNAT(backend netip.Addr, bport, nport uint16, proto uint8) error {
	k := natKey(backend, bport, nport, proto)
	var v lbLbNat
	if err := lb.objs.LbNats.Lookup(k, &v); err != nil {
		return err
	}
	v.Expires = 0
	return lb.objs.LbNats.Put(k, v)
}

func natKey(backend netip.Addr, bport, nport uint16, proto uint8) lbLbNatKey {
	return lbLbNatKey{Backend: addrWords(backend), BackendPort: be16(bport), NodePort: be16(nport), Proto: proto, Family: uint8(familyOf(backend))}
}

// NAT states (enum lb_nat_state).
const (
	NATUDP         = uint8(lbLbNatStateLB_NAT_UDP)
	NATOpening     = uint8(lbLbNatStateLB_NAT_TCP_OPENING)
	NATEstablished = uint8(lbLbNatStateLB_NAT_TCP_ESTABLISHED)
	NATClosing     = uint8(lbLbNatStateLB_NAT_TCP_CLOSING)
	NATClosed      = uint8(lbLbNatStateLB_NAT_TCP_CLOSED)
)

// ForgetNATFlow deletes f's entry of lb_nat_flows, as the LRU would under pressure.
func (lb *LB) ForgetNATFlow(f Flow) error { return lb.objs.LbNatFlows.Delete(f.key()) }

// SYNSlots is the SYN memory's number of slots (bpf/lib/consts.h LB_SYN_SLOTS).
const SYNSlots = 16384

// SYNSlot is f's slot of the SYN memory, as syn_slot() finds it: the flow table's hash
// of its key (seeded by this load) modulo SYNSlots.
func (lb *LB) SYNSlot(f Flow) uint32 { return uint32(flowKeyHash(f.key(), lb.flowSeed)) % SYNSlots }

// DecapVIPSlot exposes the decapsulation's VIP slot function to the tests.
func (d *Decap) DecapVIPSlot(a netip.Addr) uint32 { return d.vips.slotOf(a).slot }

// DeleteTxPort takes ifindex out of the ports the program may redirect to.
func (lb *LB) DeleteTxPort(ifindex int) error { return lb.objs.LbTxPorts.Delete(uint32(ifindex)) }
