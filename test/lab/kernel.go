package lab

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Reading back what an LB node's XDP program forwards with, from the kernel's maps —
// not what the node says it wrote. The layouts are those of bpf/lib/types.h.

// Ring is a service's Maglev ring as the kernel holds it: slots per backend address.
type Ring map[netip.Addr]int

// KernelServices returns, for every service (VIP and port) in the lb_vips map of the
// XDP program attached to the host's eth0, its ring read from lb_maglev's block and
// lb_backends. A draining or down backend holds no slot.
func (h *Host) KernelServices() (map[netip.AddrPort]Ring, error) {
	id, err := h.XDPProgID(HostLink)
	if err != nil {
		return nil, err
	}
	if id == 0 {
		return nil, fmt.Errorf("%s: no XDP program on %s", h.NS, HostLink)
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return nil, fmt.Errorf("%s: XDP program %d: %w", h.NS, id, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	mapIDs, _ := info.MapIDs()
	named := map[string]*ebpf.Map{}
	for _, mid := range mapIDs {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			return nil, fmt.Errorf("%s: map %d of XDP program %d: %w", h.NS, mid, id, err)
		}
		defer m.Close()
		if mi, err := m.Info(); err == nil {
			named[mi.Name] = m
		}
	}
	vips, maglev, backends := named["lb_vips"], named["lb_maglev"], named["lb_backends"]
	if vips == nil || maglev == nil || backends == nil {
		return nil, fmt.Errorf("%s: XDP program %d uses no lb_vips, lb_maglev or lb_backends map", h.NS, id)
	}

	services := map[netip.AddrPort]Ring{}
	key, val := make([]byte, vips.KeySize()), make([]byte, vips.ValueSize())
	it := vips.Iterate()
	for it.Next(&key, &val) {
		// struct lb_vip_key: __be32 addr[4], __be16 port, __u8 proto, __u8 family
		svc := netip.AddrPortFrom(familyAddr(key[:16], key[19]), binary.BigEndian.Uint16(key[16:18]))
		// struct lb_vip: __u32 service_id, table_size, flags, ring_block, ring_offset
		u32 := func(i int) uint32 { return binary.NativeEndian.Uint32(val[4*i:]) }
		ring, err := kernelRing(maglev, backends, u32(3), u32(4), u32(1))
		if err != nil {
			return nil, fmt.Errorf("%s: service %s: %w", h.NS, svc, err)
		}
		services[svc] = ring
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("%s: lb_vips: %w", h.NS, err)
	}
	return services, nil
}

// kernelRing counts the slots per backend of the ring at [offset, offset+size) of
// ring block block.
func kernelRing(maglev, backends *ebpf.Map, block, offset, size uint32) (Ring, error) {
	slots := map[uint32]int{}
	if block != 0 { // 0: no ring (no backend up)
		var innerID uint32
		if err := maglev.Lookup(block, &innerID); err != nil {
			return nil, fmt.Errorf("lb_maglev[%d]: %w", block, err)
		}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(innerID))
		if err != nil {
			return nil, fmt.Errorf("ring block %d: %w", block, err)
		}
		defer inner.Close()
		var backend uint32
		for slot := offset; slot < offset+size; slot++ {
			if err := inner.Lookup(slot, &backend); err != nil {
				return nil, fmt.Errorf("ring block %d, slot %d: %w", block, slot, err)
			}
			slots[backend]++
		}
	}
	ring := Ring{}
	val := make([]byte, backends.ValueSize())
	for id, n := range slots {
		if err := backends.Lookup(id, &val); err != nil {
			return nil, fmt.Errorf("lb_backends[%d]: %w", id, err)
		}
		// struct lb_backend: __be32 addr[4], __u32 service_id, __u32 state, __u8 family
		if a := familyAddr(val[:16], val[24]); a.IsValid() {
			ring[a] += n
		}
	}
	return ring, nil
}

// familyAddr decodes an address of the maps (network order, family 4 or 6).
func familyAddr(b []byte, family byte) netip.Addr {
	switch family {
	case 4:
		return netip.AddrFrom4([4]byte(b[:4]))
	case 6:
		return netip.AddrFrom16([16]byte(b[:16]))
	}
	return netip.Addr{}
}
