package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"syscall"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
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

// Service is a service's entry in lb_vips.
type Service struct {
	ID         uint32
	TableSize  uint32
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
}

func vipKey(k ServiceKey) lbLbVipKey {
	return lbLbVipKey{Addr: addrWords(k.VIP), Port: be16(k.Port), Proto: k.Proto, Family: familyOf(k.VIP)}
}

// PutService adds or replaces a service's lb_vips entry.
func (lb *LB) PutService(k ServiceKey, s Service) error {
	v := lbLbVip{ServiceId: s.ID, TableSize: s.TableSize}
	if s.SourceHash {
		v.Flags |= lbLbVipFlagsLB_VIP_F_SOURCE_HASH
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

// PutRing builds a new Maglev ring aside and swaps it in with one update, so packets see
// either the old ring or the new one, never a mix.
func (lb *LB) PutRing(serviceID uint32, ring []uint32) error {
	return lb.PutRings(map[uint32][]uint32{serviceID: ring})
}

// PutRings swaps in the rings of many services (service id → ring) with few batch
// updates of lb_maglev. Every update of a map of maps makes the kernel wait for an RCU
// grace period (milliseconds on a busy machine) before it returns; one batch waits
// once, where one update per service would wait once per service. Each ring is built
// aside and filled through a memory mapping (BPF_F_MMAPABLE): a plain copy, where
// element-by-element updates cost a system call's worth of work per slot. Each service
// sees its old ring or its new one, never a mix; on error some services may already
// have their new ring.
func (lb *LB) PutRings(rings map[uint32][]uint32) error {
	ids := slices.Sorted(maps.Keys(rings))
	for batch := range slices.Chunk(ids, ringBatch()) {
		if err := lb.putRingBatch(batch, rings); err != nil {
			return err
		}
	}
	return nil
}

// ringBatch is how many rings one batch update swaps in. Each batch costs a grace
// period (100 ms and more on a loaded machine: half the time of programming 10 000
// services in batches of 512), and each ring is a file descriptor held open until the
// update: half of what the process may open, a Go process's hard limit.
func ringBatch() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return minRingBatch
	}
	return max(minRingBatch, int(min(rl.Cur/2, math.MaxInt32)))
}

// minRingBatch is the batch size below any likely limit (Linux starts at 1024).
const minRingBatch = 256

func (lb *LB) putRingBatch(ids []uint32, rings map[uint32][]uint32) error {
	fds := make([]uint32, 0, len(ids))
	for _, id := range ids {
		m, err := lb.newRing(id, rings[id])
		if err != nil {
			return err
		}
		defer m.Close() // lb_maglev holds its own reference once the ring is in
		fds = append(fds, uint32(m.FD()))
	}
	if _, err := lb.objs.LbMaglev.BatchUpdate(ids, fds, nil); err != nil {
		return fmt.Errorf("lb_maglev: put the rings of %d services: %w", len(ids), err)
	}
	return nil
}

// newRing is a ring map of the service holding ring.
func (lb *LB) newRing(serviceID uint32, ring []uint32) (*ebpf.Map, error) {
	spec := lb.ringSpec.Copy()
	spec.MaxEntries = uint32(len(ring))
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("create ring of service %d (%d slots): %w", serviceID, len(ring), err)
	}
	if err := fillRing(m, ring); err != nil {
		m.Close()
		return nil, fmt.Errorf("fill ring of service %d: %w", serviceID, err)
	}
	return m, nil
}

// fillRing writes ring into m through a mapping it unmaps at once. (ebpf.Map.Memory
// keeps its mapping until the garbage collector finds it unreachable: with tens of
// thousands of rings in one apply, the process reached the kernel's limit on
// mappings, vm.max_map_count, and even the Go heap could no longer grow.)
func fillRing(m *ebpf.Map, ring []uint32) error {
	// an array map keeps each value in round_up(value_size, 8) bytes, and the mapping
	// shows that layout: the __u32 the program reads, then 4 bytes of padding, which
	// a new map holds as zeroes
	mem, err := unix.Mmap(m.FD(), 0, 8*len(ring), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the ring: %w", err)
	}
	for i, id := range ring {
		binary.NativeEndian.PutUint32(mem[8*i:], id)
	}
	return unix.Munmap(mem)
}

func (lb *LB) DeleteRing(serviceID uint32) error {
	if err := lb.objs.LbMaglev.Delete(serviceID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("lb_maglev delete %d: %w", serviceID, err)
	}
	return nil
}

// PutBackend writes backend slot id.
func (lb *LB) PutBackend(id uint32, b Backend) error {
	v := lbLbBackend{Addr: addrWords(b.Addr), ServiceId: b.ServiceID, State: lbLbBackendState(b.State), Family: familyOf(b.Addr), Encap: lbLbEncapLB_ENCAP_IPIP}
	switch {
	case b.GUE && b.NAT:
		return fmt.Errorf("lb_backends put %d (%s): GUE and NAT at once", id, b.Addr)
	case b.GUE:
		v.Encap = lbLbEncapLB_ENCAP_GUE
		v.GuePort = be16(b.GUEPort)
	case b.NAT:
		v.Encap = lbLbEncapLB_ENCAP_NAT
		v.NatPort = be16(b.NATPort)
	}
	if err := lb.objs.LbBackends.Put(id, v); err != nil {
		return fmt.Errorf("lb_backends put %d (%s): %w", id, b.Addr, err)
	}
	lb.tally.put(id, b.ServiceID)
	return nil
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
