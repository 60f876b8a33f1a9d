package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"

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
