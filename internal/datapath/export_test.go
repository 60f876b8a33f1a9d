package datapath

import (
	"errors"
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
