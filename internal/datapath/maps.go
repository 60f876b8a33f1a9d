package datapath

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// Capacities compiled into the program (enum lb_shared, bpf/lib/consts.h).
const (
	MaxServices = uint32(lbLbSharedLB_MAX_SERVICES)
	MaxBackends = uint32(lbLbSharedLB_MAX_BACKENDS) // ids 1..MaxBackends-1; 0 means "no backend"
)

// ServiceKey is what the program matches a packet against: VIP, port (0 = any), protocol.
type ServiceKey struct {
	VIP   netip.Addr
	Port  uint16
	Proto uint8
}

// Service is a service's entry in lb_vips. Its ring's place and size are the LB's to
// fill in: the ring last put for the service's id (PutRings).
type Service struct {
	ID         uint32
	SourceHash bool // maglev-source
}

// BackendState is the state the program honours on every packet.
type BackendState uint32

const (
	BackendUnused   = BackendState(lbLbBackendStateLB_BACKEND_UNUSED)
	BackendUp       = BackendState(lbLbBackendStateLB_BACKEND_UP)
	BackendDraining = BackendState(lbLbBackendStateLB_BACKEND_DRAINING)
	BackendDown     = BackendState(lbLbBackendStateLB_BACKEND_DOWN)
)

func (s BackendState) String() string {
	switch s {
	case BackendUp:
		return "up"
	case BackendDraining:
		return "draining"
	case BackendDown:
		return "down"
	}
	return "unused"
}

// Backend is one (service, backend) slot of lb_backends. How packets reach the backend
// (its service's forwarding) is kept here, not with the service: an established flow
// reaches its backend without the service lookup.
type Backend struct {
	Addr      netip.Addr
	ServiceID uint32
	State     BackendState
	GUE       bool   // GUE instead of IPIP
	GUEPort   uint16 // UDP destination port of GUE packets
	NAT       bool   // full NAT instead of encapsulation (bpf/lib/nat.h)
	NATPort   uint16 // NAT: the backend's port; 0 keeps the client's destination port
	// Local is the node's own stack (Addr: the service's VIP): the share of a service's
	// flows that its tunnelled origins take passes up to the tunnel edge (XDP_PASS).
	Local bool
}

// serviceEntry is a service's lb_vips entry as last written, kept so that a new ring
// is swapped in by rewriting the entry.
type serviceEntry struct {
	key   ServiceKey
	value lbLbVip
}

func vipKey(k ServiceKey) lbLbVipKey {
	return lbLbVipKey{Addr: addrWords(k.VIP), Port: be16(k.Port), Proto: k.Proto, Family: familyOf(k.VIP)}
}

// withRing is v naming ring p (none for the zero place).
func withRing(v lbLbVip, p ringPlace) lbLbVip {
	v.RingBlock, v.RingOffset, v.TableSize = p.block, p.offset, p.size
	return v
}

// PutService adds or replaces a service's lb_vips entry, with the ring of its id if
// one was put.
func (lb *LB) PutService(k ServiceKey, s Service) error {
	_, err := lb.PutServices([]ServiceKey{k}, []Service{s})
	return err
}

// PutServices writes the lb_vips entries keys[i] = services[i], each with the ring of
// its id if one was put, with one batch update. It returns how many it wrote, in
// order: on error, fewer.
func (lb *LB) PutServices(keys []ServiceKey, services []Service) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	vkeys := make([]lbLbVipKey, len(keys))
	values := make([]lbLbVip, len(keys))
	for i, s := range services {
		v := lbLbVip{ServiceId: s.ID}
		if s.SourceHash {
			v.Flags |= lbLbVipFlagsLB_VIP_F_SOURCE_HASH
		}
		vkeys[i], values[i] = vipKey(keys[i]), withRing(v, lb.rings[s.ID])
	}
	n, err := lb.objs.LbVips.BatchUpdate(vkeys, values, nil)
	for i, k := range keys[:n] {
		id := services[i].ID
		if old, ok := lb.keyIDs[k]; ok && old != id {
			delete(lb.entries, old)
		}
		lb.keyIDs[k] = id
		lb.entries[id] = serviceEntry{key: k, value: values[i]}
	}
	if err != nil {
		if len(keys) == 1 {
			return n, fmt.Errorf("lb_vips put %v: %w", keys[0], err)
		}
		return n, fmt.Errorf("lb_vips: put %d services: %w", len(keys), err)
	}
	return n, nil
}

func (lb *LB) DeleteService(k ServiceKey) error {
	if err := lb.objs.LbVips.Delete(vipKey(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("lb_vips delete %v: %w", k, err)
	}
	if id, ok := lb.keyIDs[k]; ok {
		delete(lb.entries, id)
		delete(lb.keyIDs, k)
	}
	return nil
}

// PutRing puts one service's ring (PutRings).
func (lb *LB) PutRing(serviceID uint32, ring []uint32) error {
	return lb.PutRings(map[uint32][]uint32{serviceID: ring})
}

// PutRings swaps in the rings of many services (service id → ring). Each ring is
// written into free slots of the ring blocks (ringspace.go), the blocks that had to be
// created go into lb_maglev with one update, then the entries of the services that have
// one are switched to their new rings with one batch update of lb_vips: each service
// sees its old ring or its new one, never a mix. On error some services may already
// have their new ring.
func (lb *LB) PutRings(rings map[uint32][]uint32) error {
	ids := slices.Sorted(maps.Keys(rings))
	for _, id := range ids {
		if id == 0 || id >= lb.services {
			return fmt.Errorf("ring of service %d: ids go from 1 to %d (node.max_services)", id, lb.services-1)
		}
		if len(rings[id]) == 0 {
			return fmt.Errorf("ring of service %d: empty (DeleteRing takes a ring away)", id)
		}
	}
	placed := make(map[uint32]ringPlace, len(ids))
	for _, id := range ids {
		p, err := lb.ringSpace.place(rings[id])
		if err != nil {
			for _, p := range placed {
				lb.ringSpace.retire(p) // named by no entry
			}
			return fmt.Errorf("ring of service %d (%d slots): %w", id, len(rings[id]), err)
		}
		placed[id] = p
	}
	if err := lb.ringSpace.publish(); err != nil {
		for _, p := range placed {
			lb.ringSpace.retire(p)
		}
		return err
	}
	var (
		switched []uint32 // ids whose entry names the ring, in the batch's order
		keys     []lbLbVipKey
		values   []lbLbVip
	)
	for _, id := range ids {
		if e, ok := lb.entries[id]; ok {
			switched = append(switched, id)
			keys = append(keys, vipKey(e.key))
			values = append(values, withRing(e.value, placed[id]))
		}
	}
	written := len(keys)
	var err error
	if len(keys) > 0 {
		if written, err = lb.objs.LbVips.BatchUpdate(keys, values, nil); err != nil {
			err = fmt.Errorf("lb_vips: switch %d services to their new rings: %w", len(keys), err)
		}
	}
	// the batch writes in order and stops at its first failure: the entries past it
	// still name the old rings
	for _, id := range switched[written:] {
		lb.ringSpace.retire(placed[id])
		delete(placed, id)
	}
	for i, id := range switched[:written] {
		e := lb.entries[id]
		e.value = values[i]
		lb.entries[id] = e
	}
	for id, p := range placed {
		lb.ringSpace.retire(lb.rings[id])
		lb.rings[id] = p
	}
	return errors.Join(err, lb.ringSpace.tidy())
}

// DeleteRing takes a service's ring away: its entry, if any, names no ring.
func (lb *LB) DeleteRing(serviceID uint32) error {
	p, ok := lb.rings[serviceID]
	if !ok {
		return nil
	}
	if e, ok := lb.entries[serviceID]; ok {
		v := withRing(e.value, ringPlace{})
		if err := lb.objs.LbVips.Put(vipKey(e.key), v); err != nil {
			return fmt.Errorf("lb_vips put %v: %w", e.key, err)
		}
		e.value = v
		lb.entries[serviceID] = e
	}
	delete(lb.rings, serviceID)
	lb.ringSpace.retire(p)
	return lb.ringSpace.tidy()
}

// PutBackend writes backend slot id.
func (lb *LB) PutBackend(id uint32, b Backend) error {
	_, err := lb.PutBackends([]uint32{id}, []Backend{b})
	return err
}

// PutBackends writes backend slots ids[i] = backends[i] with one batch update (one
// system call for the thousands of backends of a node's start, where one each took
// a second for 400 000). It returns how many it wrote, in order: on error, fewer.
func (lb *LB) PutBackends(ids []uint32, backends []Backend) (int, error) {
	values := make([]lbLbBackend, len(backends))
	for i, b := range backends {
		v := lbLbBackend{Addr: addrWords(b.Addr), ServiceId: b.ServiceID, State: lbLbBackendState(b.State), Family: familyOf(b.Addr), Encap: lbLbEncapLB_ENCAP_IPIP}
		switch {
		case b.GUE && b.NAT, b.Local && (b.GUE || b.NAT):
			return 0, fmt.Errorf("lb_backends put %d (%s): more than one of GUE, NAT and local at once", ids[i], b.Addr)
		case b.Local:
			v.Encap = lbLbEncapLB_ENCAP_LOCAL
		case b.GUE:
			v.Encap = lbLbEncapLB_ENCAP_GUE
			v.GuePort = be16(b.GUEPort)
		case b.NAT:
			v.Encap = lbLbEncapLB_ENCAP_NAT
			v.NatPort = be16(b.NATPort)
		}
		values[i] = v
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := lb.objs.LbBackends.BatchUpdate(ids, values, nil)
	for i := range n {
		lb.tally.put(ids[i], backends[i].ServiceID)
	}
	if err != nil {
		if len(ids) == 1 {
			return n, fmt.Errorf("lb_backends put %d (%s): %w", ids[0], backends[0].Addr, err)
		}
		return n, fmt.Errorf("lb_backends: put %d backends: %w", len(ids), err)
	}
	return n, nil
}

// DeleteBackend frees slot id: flows still pointing at it are re-hashed, its counts
// stay in its service's, and its counters and cached next hop start afresh for whoever
// gets the slot next.
func (lb *LB) DeleteBackend(id uint32) error {
	if err := lb.objs.LbBackends.Put(id, lbLbBackend{}); err != nil {
		return fmt.Errorf("lb_backends clear %d: %w", id, err)
	}
	// no packet chooses the slot from here on (the program takes no backend whose
	// entry is empty); one that chose it just before and counts after this read is
	// lost to the service's total, a few packets at most
	final, err := lb.BackendCounters(id)
	if err != nil {
		return err
	}
	lb.tally.remove(id, final)
	// the next holder of this id may live elsewhere: forget where this one was
	if err := lb.objs.LbBackendCpu.Put(id, make([]lbLbBackendCpuState, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("lb_backend_cpu clear %d: %w", id, err)
	}
	return nil
}

// ResetServiceCounters zeroes a service id's counters before the id is (re)used.
func (lb *LB) ResetServiceCounters(id uint32) error {
	lb.tally.reset(id)
	return nil
}
