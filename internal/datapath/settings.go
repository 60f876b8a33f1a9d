package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Settings are the node settings the program reads on every packet (node_settings in
// bpf/lib/node.h). PutSettings may change them while the program runs.
type Settings struct {
	// Entropy4 is a /16 from which IPv4 outer sources are picked by flow hash; the
	// zero Prefix keeps the node address.
	Entropy4 netip.Prefix
	// Entropy6 is the /64 of IPv6 outer sources, likewise.
	Entropy6 netip.Prefix
	// NewFlowRate bounds the new flows the node inserts into the flow table per
	// second; 0: unbounded.
	NewFlowRate uint32
	// ForwardTransit routes packets for neither a VIP nor the node in XDP when the
	// kernel's FIB knows the next hop (bpf/lib/transit.h); otherwise they pass to the
	// kernel.
	ForwardTransit bool
}

// Prefix lengths of the entropy prefixes: the program fills the remaining bits.
const (
	entropy4Bits = int(lbLbSharedLB_ENTROPY4BITS)
	entropy6Bits = 32 * len(lbLbSettings{}.Entropy6) // the program keeps the /64 as two words
)

// PutSettings writes s into the loaded program's node settings. The bound is counted per
// CPU (a shared counter would bounce its cache line between the CPUs on every new
// flow): each CPU may insert its share of NewFlowRate, rounded up.
func (lb *LB) PutSettings(s Settings) error {
	var v lbLbSettings
	if s.Entropy4.IsValid() {
		if !s.Entropy4.Addr().Is4() || s.Entropy4.Bits() != entropy4Bits {
			return fmt.Errorf("entropy prefix %s: want an IPv4 /%d", s.Entropy4, entropy4Bits)
		}
		a := s.Entropy4.Masked().Addr().As4()
		v.Entropy4 = binary.NativeEndian.Uint32(a[:])
	}
	if s.Entropy6.IsValid() {
		if !s.Entropy6.Addr().Is6() || s.Entropy6.Bits() != entropy6Bits {
			return fmt.Errorf("entropy prefix %s: want an IPv6 /%d", s.Entropy6, entropy6Bits)
		}
		w := addrWords(s.Entropy6.Masked().Addr())
		v.Entropy6 = [2]uint32{w[0], w[1]}
	}
	if s.NewFlowRate > 0 {
		cpus := uint32(ebpf.MustPossibleCPU())
		v.NewFlowsPerCpu = (s.NewFlowRate + cpus - 1) / cpus
	}
	if s.ForwardTransit {
		v.ForwardTransit = 1
	}
	if err := lb.objs.NodeSettings.Set(v); err != nil {
		return fmt.Errorf("node_settings: %w", err)
	}
	return nil
}
