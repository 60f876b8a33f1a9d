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
// uses, not what the control plane meant to write. Ring and Memory find the rings
// through what the map writer keeps (which entry a service id has, which blocks
// exist): call them from the writer's goroutine.

// Ring returns the Maglev ring of a service as the kernel holds it: slot → backend id,
// read from the block and slots its lb_vips entry names.
func (lb *LB) Ring(serviceID uint32) ([]uint32, error) {
	e, ok := lb.entries[serviceID]
	if !ok {
		return nil, fmt.Errorf("ring of service %d: no lb_vips entry", serviceID)
	}
	var v lbLbVip
	if err := lb.objs.LbVips.Lookup(vipKey(e.key), &v); err != nil {
		return nil, fmt.Errorf("lb_vips lookup %v: %w", e.key, err)
	}
	var blockID ebpf.MapID
	if err := lb.objs.LbMaglev.Lookup(v.RingBlock, &blockID); err != nil {
		return nil, fmt.Errorf("ring of service %d: lb_maglev lookup %d: %w", serviceID, v.RingBlock, err)
	}
	block, err := ebpf.NewMapFromID(blockID)
	if err != nil {
		return nil, fmt.Errorf("ring of service %d: %w", serviceID, err)
	}
	defer block.Close()
	ring := make([]uint32, v.TableSize)
	for i := range ring {
		if err := block.Lookup(v.RingOffset+uint32(i), &ring[i]); err != nil {
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
	Rings      uint64 // the blocks the Maglev rings are packed in, free slots included
	RingBlocks int
	Flows      uint64 // lb_flows, sized at load, filled or not
	Other      uint64 // every other map of the program
}

// Memory adds up the memlock figures of the program's maps and of every ring block
// lb_maglev holds now.
func (lb *LB) Memory() (Memory, error) {
	var mem Memory
	seen := map[ebpf.MapID]bool{}
	var innerID ebpf.MapID
	// the blocks lb_maglev holds, as the kernel has them: the ids a block may have
	// are those the space has handed out
	for id := uint32(1); id < uint32(len(lb.ringSpace.blocks)); id++ {
		err := lb.objs.LbMaglev.Lookup(id, &innerID)
		if errors.Is(err, ebpf.ErrKeyNotExist) || seen[innerID] {
			continue
		}
		if err != nil {
			return mem, fmt.Errorf("lb_maglev lookup %d: %w", id, err)
		}
		seen[innerID] = true
		block, err := ebpf.NewMapFromID(innerID)
		if err != nil {
			return mem, fmt.Errorf("ring block %d: %w", id, err)
		}
		n, err := memlock(block)
		block.Close()
		if err != nil {
			return mem, err
		}
		mem.Rings += n
		mem.RingBlocks++
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
