package datapath

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// The numbers the Go side uses must be those of the objects it loads: every enumerator
// of an enum Go takes constants from, and every map bounded by one of them.
func TestConstantsAgreeWithObjects(t *testing.T) {
	lb, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	decap, err := loadDecap()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]uint64{
		"LB_FAMILY_V4": uint64(familyOf(netip.MustParseAddr("192.0.2.1"))),
		"LB_FAMILY_V6": uint64(familyOf(netip.MustParseAddr("2001:db8::1"))),
	}
	for _, c := range []struct {
		spec   *ebpf.CollectionSpec
		enum   string
		values map[string]uint64 // enumerator → the Go side's value
	}{
		{lb, "lb_shared", map[string]uint64{
			"LB_MAX_SERVICES":  uint64(MaxServices),
			"LB_MAX_BACKENDS":  uint64(MaxBackends),
			"LB_VIP_SLOTS":     uint64(vipSlots),
			"LB_HASH_SEED":     uint64(hashSeed),
			"LB_ENTROPY4_BITS": uint64(entropy4Bits),
		}},
		{lb, "lb_family", families},
		{lb, "lb_encap", map[string]uint64{
			"LB_ENCAP_IPIP":  uint64(lbLbEncapLB_ENCAP_IPIP),
			"LB_ENCAP_GUE":   uint64(lbLbEncapLB_ENCAP_GUE),
			"LB_ENCAP_NAT":   uint64(lbLbEncapLB_ENCAP_NAT),
			"LB_ENCAP_LOCAL": uint64(lbLbEncapLB_ENCAP_LOCAL),
		}},
		{lb, "lb_vip_flags", map[string]uint64{
			"LB_VIP_F_SOURCE_HASH": uint64(lbLbVipFlagsLB_VIP_F_SOURCE_HASH),
		}},
		{lb, "lb_backend_state", map[string]uint64{
			"LB_BACKEND_UNUSED":   uint64(BackendUnused),
			"LB_BACKEND_UP":       uint64(BackendUp),
			"LB_BACKEND_DRAINING": uint64(BackendDraining),
			"LB_BACKEND_DOWN":     uint64(BackendDown),
		}},
	} {
		var e *btf.Enum
		if err := c.spec.Types.TypeByName(c.enum, &e); err != nil {
			t.Errorf("enum %s: %v", c.enum, err)
			continue
		}
		seen := map[string]bool{}
		for _, v := range e.Values {
			seen[v.Name] = true
			want, ok := c.values[v.Name]
			switch {
			case !ok:
				t.Errorf("enum %s: %s = %d has no Go counterpart", c.enum, v.Name, v.Value)
			case want != v.Value:
				t.Errorf("enum %s: %s = %d in the object, %d in Go", c.enum, v.Name, v.Value, want)
			}
		}
		for name := range c.values {
			if !seen[name] {
				t.Errorf("enum %s: the object has no %s", c.enum, name)
			}
		}
	}

	for name, want := range map[string]uint32{
		lbMapLbVips:          MaxServices,
		lbMapLbMaglev:        MaxServices,
		lbMapLbBackends:      MaxBackends,
		lbMapLbBackendCpu:    MaxBackends,
		lbMapLb4VipSlots:     vipSlots,
		lbMapLb6VipSlots:     vipSlots,
		lbMapLbDrops:         uint32(lbLbDropReasonLB_DROP_MAX),
		lbMapLbEvents:        uint32(lbLbEventLB_EV_MAX),
		decapMapLbDecapStats: uint32(decapLbDecapCounterLB_DECAP_MAX),
	} {
		spec := lb.Maps[name]
		if spec == nil {
			spec = decap.Maps[name]
		}
		if spec == nil {
			t.Errorf("no map %s", name)
			continue
		}
		if spec.MaxEntries != want {
			t.Errorf("map %s: %d entries, the Go side counts on %d", name, spec.MaxEntries, want)
		}
	}
}
