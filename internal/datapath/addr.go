package datapath

import (
	"encoding/binary"
	"net/netip"
)

// Addresses travel to the kernel as the bytes they have on the wire. The generated
// structs type them as [4]uint32 (a __be32 array), which bpf2go encodes in host order,
// so the words are built with the host's byte order from network-order bytes.

func addrWords(a netip.Addr) (w [4]uint32) {
	if a.Is4() {
		b := a.As4()
		w[0] = binary.NativeEndian.Uint32(b[:])
		return w
	}
	b := a.As16()
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

// familyOf is the family the programs store with an address (enum lb_family).
func familyOf(a netip.Addr) lbLbFamily {
	if a.Is4() {
		return lbLbFamilyLB_FAMILY_V4
	}
	return lbLbFamilyLB_FAMILY_V6
}

// be16 turns a port into the host-order value whose memory holds it in network order.
func be16(port uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], port)
	return binary.NativeEndian.Uint16(b[:])
}
