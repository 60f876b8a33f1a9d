package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// VIPSlot exposes the VIP address filter's slot function to the tests.
func VIPSlot(a netip.Addr) uint32 { return vipSlot(a) }

// WithKernelHZ runs f with LoadLB seeing hz as the kernel's HZ (0: unknown).
func WithKernelHZ(hz uint32, f func()) {
	old := kernelHZ
	kernelHZ = func() uint32 { return hz }
	defer func() { kernelHZ = old }()
	f()
}

// ConfigHZ exposes the kernel config parser to the tests.
var ConfigHZ = configHZ

// Program is the tc program, for BPF_PROG_TEST_RUN.
func (d *Decap) Program() *ebpf.Program { return d.objs.ManifoldDecap }

// DecapCounters are the backend's decapsulation counters summed over CPUs.
type DecapCounters struct {
	IPIP4, IPIP6, GUE4, GUE6, NotVIP, Errors uint64
}

func (d *Decap) Counters() (DecapCounters, error) {
	var out DecapCounters
	for c, dst := range map[decapLbDecapCounter]*uint64{
		decapLbDecapCounterLB_DECAP_IPIP4:   &out.IPIP4,
		decapLbDecapCounterLB_DECAP_IPIP6:   &out.IPIP6,
		decapLbDecapCounterLB_DECAP_GUE4:    &out.GUE4,
		decapLbDecapCounterLB_DECAP_GUE6:    &out.GUE6,
		decapLbDecapCounterLB_DECAP_NOT_VIP: &out.NotVIP,
		decapLbDecapCounterLB_DECAP_ERROR:   &out.Errors,
	} {
		var per []uint64
		if err := d.objs.LbDecapStats.Lookup(uint32(c), &per); err != nil {
			return out, fmt.Errorf("lb_decap_stats %d: %w", c, err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return out, nil
}

// FlowBackend returns the backend id the flow table holds for f, 0 when none.
func (lb *LB) FlowBackend(f Flow) (uint32, error) {
	var v lbLbFlow
	if err := lb.objs.LbFlows.Lookup(f.key(), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil
		}
		return 0, err
	}
	return v.BackendId, nil
}

// PutFlow pins flow f to backend id of service serviceID, as if the program had seen it.
func (lb *LB) PutFlow(f Flow, id, serviceID uint32) error {
	return lb.objs.LbFlows.Put(f.key(), lbLbFlow{BackendId: id, ServiceId: serviceID, Hash: FlowHash(f, false)})
}
