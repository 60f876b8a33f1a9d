package datapath

import "net/netip"

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
