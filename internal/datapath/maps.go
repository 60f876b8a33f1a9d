package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Capacities compiled into the program (bpf/lib/consts.h).
const (
	MaxServices = 16384
	MaxBackends = 65536 // ids 1..MaxBackends-1; 0 means "no backend"
)

// ServiceKey is what the program matches a packet against: VIP, port (0 = any), protocol.
type ServiceKey struct {
	VIP   netip.Addr
	Port  uint16
	Proto uint8
}

// Service is a service's entry in lb_vips.
type Service struct {
	ID         uint32
	TableSize  uint32
	SourceHash bool // maglev-source
}

// Flags of lb_vip (bpf/lib/types.h LB_VIP_F_*).
const vipFlagSourceHash = 1 << 0

// Encapsulations of lb_backend (bpf/lib/types.h enum lb_encap).
const (
	encapIPIP = 0
	encapGUE  = 1
)

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
}

func vipKey(k ServiceKey) lbLbVipKey {
	return lbLbVipKey{Addr: addrWords(k.VIP), Port: be16(k.Port), Proto: k.Proto, Family: familyOf(k.VIP)}
}

// PutService adds or replaces a service's lb_vips entry.
func (lb *LB) PutService(k ServiceKey, s Service) error {
	v := lbLbVip{ServiceId: s.ID, TableSize: s.TableSize}
	if s.SourceHash {
		v.Flags |= vipFlagSourceHash
	}
	if err := lb.objs.LbVips.Put(vipKey(k), v); err != nil {
		return fmt.Errorf("lb_vips put %v: %w", k, err)
	}
	return nil
}

func (lb *LB) DeleteService(k ServiceKey) error {
	if err := lb.objs.LbVips.Delete(vipKey(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("lb_vips delete %v: %w", k, err)
	}
	return nil
}

// vipAddrsMap returns the address filter of addr's family and addr as its key (the
// bytes on the wire).
func (lb *LB) vipAddrsMap(addr netip.Addr) (*ebpf.Map, any) {
	if addr.Is4() {
		return lb.objs.Lb4VipAddrs, addr.As4()
	}
	return lb.objs.Lb6VipAddrs, addr.As16()
}

// PutVIPAddr marks addr as carrying `services` services (> 0).
func (lb *LB) PutVIPAddr(addr netip.Addr, services uint32) error {
	m, key := lb.vipAddrsMap(addr)
	if err := m.Put(key, services); err != nil {
		return fmt.Errorf("lb_vip_addrs put %s: %w", addr, err)
	}
	return nil
}

func (lb *LB) DeleteVIPAddr(addr netip.Addr) error {
	m, key := lb.vipAddrsMap(addr)
	if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("lb_vip_addrs delete %s: %w", addr, err)
	}
	return nil
}

// PutRing builds a new Maglev ring aside and swaps it in with one update, so packets see
// either the old ring or the new one, never a mix.
func (lb *LB) PutRing(serviceID uint32, ring []uint32) error {
	spec := lb.ringSpec.Copy()
	spec.MaxEntries = uint32(len(ring))
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("create ring of service %d (%d slots): %w", serviceID, len(ring), err)
	}
	defer m.Close() // lb_maglev holds its own reference once the ring is in
	keys := make([]uint32, len(ring))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := m.BatchUpdate(keys, ring, nil); err != nil {
		return fmt.Errorf("fill ring of service %d: %w", serviceID, err)
	}
	if err := lb.objs.LbMaglev.Put(serviceID, m); err != nil {
		return fmt.Errorf("lb_maglev put %d: %w", serviceID, err)
	}
	return nil
}

func (lb *LB) DeleteRing(serviceID uint32) error {
	if err := lb.objs.LbMaglev.Delete(serviceID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("lb_maglev delete %d: %w", serviceID, err)
	}
	return nil
}

// PutBackend writes backend slot id.
func (lb *LB) PutBackend(id uint32, b Backend) error {
	v := lbLbBackend{Addr: addrWords(b.Addr), ServiceId: b.ServiceID, State: lbLbBackendState(b.State), Family: familyOf(b.Addr), Encap: encapIPIP}
	if b.GUE {
		v.Encap = encapGUE
		v.GuePort = be16(b.GUEPort)
	}
	if err := lb.objs.LbBackends.Put(id, v); err != nil {
		return fmt.Errorf("lb_backends put %d (%s): %w", id, b.Addr, err)
	}
	return nil
}

// DeleteBackend frees slot id: flows still pointing at it are re-hashed, and its
// counters and cached next hop start afresh for whoever gets the slot next.
func (lb *LB) DeleteBackend(id uint32) error {
	if err := lb.objs.LbBackends.Put(id, lbLbBackend{}); err != nil {
		return fmt.Errorf("lb_backends clear %d: %w", id, err)
	}
	zero := make([]lbLbCounters, ebpf.MustPossibleCPU())
	if err := lb.objs.LbBackendStats.Put(id, zero); err != nil {
		return fmt.Errorf("lb_backend_stats clear %d: %w", id, err)
	}
	// the next holder of this id may live elsewhere: forget where this one was
	if err := lb.objs.LbFibCache.Put(id, make([]lbLbNexthop, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("lb_fib_cache clear %d: %w", id, err)
	}
	return nil
}

// ResetServiceCounters zeroes a service id's counters before the id is (re)used.
func (lb *LB) ResetServiceCounters(id uint32) error {
	zero := make([]lbLbCounters, ebpf.MustPossibleCPU())
	if err := lb.objs.LbServiceStats.Put(id, zero); err != nil {
		return fmt.Errorf("lb_service_stats clear %d: %w", id, err)
	}
	return nil
}
