package datapath

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// Reading back what the kernel holds, for tests and diagnostics: what the program
// uses, not what the control plane meant to write.

// Ring returns the Maglev ring of a service as the kernel holds it: slot → backend id.
func (lb *LB) Ring(serviceID uint32) ([]uint32, error) {
	var innerID ebpf.MapID
	if err := lb.objs.LbMaglev.Lookup(serviceID, &innerID); err != nil {
		return nil, fmt.Errorf("lb_maglev lookup %d: %w", serviceID, err)
	}
	inner, err := ebpf.NewMapFromID(innerID)
	if err != nil {
		return nil, fmt.Errorf("ring of service %d: %w", serviceID, err)
	}
	defer inner.Close()
	ring := make([]uint32, inner.MaxEntries())
	for i := range ring {
		if err := inner.Lookup(uint32(i), &ring[i]); err != nil {
			return nil, fmt.Errorf("ring of service %d, slot %d: %w", serviceID, i, err)
		}
	}
	return ring, nil
}

// BackendAddr returns the address in backend slot id (invalid for a free slot).
func (lb *LB) BackendAddr(id uint32) (netip.Addr, error) {
	var v lbLbBackend
	if err := lb.objs.LbBackends.Lookup(id, &v); err != nil {
		return netip.Addr{}, fmt.Errorf("lb_backends lookup %d: %w", id, err)
	}
	var b [16]byte
	for i, w := range v.Addr {
		binary.NativeEndian.PutUint32(b[4*i:], w)
	}
	switch v.Family {
	case lbLbFamilyLB_FAMILY_V4:
		return netip.AddrFrom4([4]byte(b[:4])), nil
	case lbLbFamilyLB_FAMILY_V6:
		return netip.AddrFrom16(b), nil
	}
	return netip.Addr{}, nil
}

// Memory is what the kernel charges for the program's maps, in bytes: each map's
// memlock figure, the one `bpftool map show` prints.
type Memory struct {
	Rings    uint64 // the Maglev rings, each counted once however many services use it
	RingMaps int
	Flows    uint64 // lb_flows, sized at load, filled or not
	Other    uint64 // every other map of the program
}

// Memory adds up the memlock figures of the program's maps and of every ring
// lb_maglev holds now.
func (lb *LB) Memory() (Memory, error) {
	var mem Memory
	seen := map[ebpf.MapID]bool{}
	var innerID ebpf.MapID
	for id := uint32(1); id < lb.services; id++ {
		err := lb.objs.LbMaglev.Lookup(id, &innerID)
		if errors.Is(err, ebpf.ErrKeyNotExist) || seen[innerID] {
			continue
		}
		if err != nil {
			return mem, fmt.Errorf("lb_maglev lookup %d: %w", id, err)
		}
		seen[innerID] = true
		ring, err := ebpf.NewMapFromID(innerID)
		if err != nil {
			return mem, fmt.Errorf("ring of service %d: %w", id, err)
		}
		n, err := memlock(ring)
		ring.Close()
		if err != nil {
			return mem, err
		}
		mem.Rings += n
		mem.RingMaps++
	}
	maps := reflect.ValueOf(lb.objs.lbMaps)
	for i := range maps.NumField() {
		m, ok := maps.Field(i).Interface().(*ebpf.Map)
		if !ok || m == nil {
			continue
		}
		n, err := memlock(m)
		if err != nil {
			return mem, err
		}
		if m == lb.objs.LbFlows {
			mem.Flows += n
		} else {
			mem.Other += n
		}
	}
	return mem, nil
}

// memlock is the memory the kernel charges for m, from its fdinfo.
func memlock(m *ebpf.Map) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, fmt.Errorf("map memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("map memory: no memlock in the fdinfo of map fd %d", m.FD())
}
