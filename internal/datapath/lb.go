package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Options are fixed for the life of a loaded program.
type Options struct {
	NodeAddr4 netip.Addr // outer source of IPv4 encapsulation (may be zero)
	NodeAddr6 netip.Addr // outer source of IPv6 encapsulation (may be zero)
	// FlowTableSize is the entries of lb_flows, and of the NAT tables lb_nats and
	// lb_nat_flows up to their compiled 262 144 (a NAT flow is a flow: it needs no
	// more entries than the flow table); 0 keeps the compiled defaults.
	FlowTableSize uint32
	// Services and (service, backend) slots the maps hold; 0 keeps the compiled
	// MaxServices / MaxBackends. Sized at load because several of those maps are per
	// CPU: 100 000 services cost tens of megabytes per CPU that a small node should not
	// pay.
	MaxServices uint32
	MaxBackends uint32
}

// LB is the loaded XDP load balancer: its program, its maps and its attachments.
type LB struct {
	objs      lbObjects
	ringSpace *ringSpace // the Maglev rings' blocks (ringspace.go)
	// by service id: the ring last put (PutRings), and the lb_vips entry last written
	// (PutService), which a new ring is swapped in by; keyIDs finds the id of a key
	rings    map[uint32]ringPlace
	entries  map[uint32]serviceEntry
	keyIDs   map[ServiceKey]uint32
	services uint32 // capacity in services (ids 1..services-1)
	backends uint32 // capacity in backend slots (ids 1..backends-1)
	links    map[string]link.Link
	vips     *vipFilter    // the VIP address filter (vipaddrs.go)
	flowSeed uint64        // the flow table's hash seed (flowtable.go)
	hz       uint32        // the kernel's HZ as the program was given it (0: it keeps ns)
	flowMem  *ebpf.Memory  // lb_flows, mapped (read-only use: safe from any goroutine)
	tally    *serviceTally // which backends are a service's, for its counters (counters.go)
}

// XDP attach modes as the kernel names them.
const (
	ModeNative  = "native"
	ModeGeneric = "generic"
	ModeAuto    = "auto"
)

// LoadLB loads the program and its maps into the kernel. Nothing is attached yet.
func LoadLB(opts Options) (*LB, error) {
	spec, err := loadLb()
	if err != nil {
		return nil, err
	}
	if opts.NodeAddr4.IsValid() {
		if err := spec.Variables[lbVarNodeAddr4].Set(opts.NodeAddr4.As4()); err != nil {
			return nil, fmt.Errorf("set node_addr4: %w", err)
		}
	}
	if opts.NodeAddr6.IsValid() {
		if err := spec.Variables[lbVarNodeAddr6].Set(opts.NodeAddr6.As16()); err != nil {
			return nil, fmt.Errorf("set node_addr6: %w", err)
		}
	}
	hz := kernelHZ()
	if err := spec.Variables[lbVarKernelHz].Set(hz); err != nil {
		return nil, fmt.Errorf("set kernel_hz: %w", err)
	}
	if opts.FlowTableSize > 0 {
		spec.Maps[lbMapLbFlows].MaxEntries = flowBuckets(opts.FlowTableSize)
		// compiled at 262 144 entries each, 64 MiB together: most of a small node's
		// maps, whether it has NAT services or not. Never more than compiled: an entry
		// costs 4.5 times a flow table's, and a large flow table is not a NAT one.
		for _, m := range []string{lbMapLbNats, lbMapLbNatFlows} {
			spec.Maps[m].MaxEntries = min(spec.Maps[m].MaxEntries, opts.FlowTableSize)
		}
	}
	flowSeed, err := newFlowSeed()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[lbVarFlowBuckets].Set(spec.Maps[lbMapLbFlows].MaxEntries); err != nil {
		return nil, fmt.Errorf("set flow_buckets: %w", err)
	}
	if err := spec.Variables[lbVarFlowSeed].Set(flowSeed); err != nil {
		return nil, fmt.Errorf("set flow_seed: %w", err)
	}
	lb := &LB{links: map[string]link.Link{}, flowSeed: flowSeed, hz: hz, tally: newServiceTally(),
		services: cmp.Or(opts.MaxServices, MaxServices), backends: cmp.Or(opts.MaxBackends, MaxBackends)}
	for _, m := range []string{lbMapLbVips, lbMapLbMaglev} {
		spec.Maps[m].MaxEntries = lb.services
	}
	for _, m := range []string{lbMapLbBackends, lbMapLbBackendCpu} {
		spec.Maps[m].MaxEntries = lb.backends
	}
	// every service may have a VIP address of its own
	for _, m := range []string{lbMapLb4VipAddrs, lbMapLb6VipAddrs} {
		spec.Maps[m].MaxEntries = max(spec.Maps[m].MaxEntries, lb.services)
	}
	blockSpec := spec.Maps[lbMapLbMaglev].InnerMap.Copy()
	// a block without BTF: with it, creating each block loads its key and value types
	// into the kernel as a BTF object of its own, for nothing the program or bpftool
	// needs
	blockSpec.Key, blockSpec.Value = nil, nil
	if err := spec.LoadAndAssign(&lb.objs, nil); err != nil {
		return nil, loadError("XDP program", err)
	}
	lb.ringSpace = &ringSpace{spec: blockSpec, outer: lb.objs.LbMaglev}
	lb.rings, lb.entries, lb.keyIDs = map[uint32]ringPlace{}, map[uint32]serviceEntry{}, map[ServiceKey]uint32{}
	lb.vips = newVIPFilter("lb_vip", lb.objs.Lb4VipAddrs, lb.objs.Lb6VipAddrs, lb.objs.Lb4VipSlots, lb.objs.Lb6VipSlots)
	// mapped once, here: Map.Memory caches its mapping without a lock, and the flow
	// table is read from the status, the metrics and the fleet's goroutines at once
	if lb.flowMem, err = lb.objs.LbFlows.Memory(); err != nil {
		lb.objs.Close()
		return nil, fmt.Errorf("map the flow table: %w", err)
	}
	return lb, nil
}

// loadError wraps a load failure; a verifier rejection is printed with its whole log,
// the only place that says which instruction was refused.
func loadError(what string, err error) error {
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		return fmt.Errorf("load %s: %+v", what, verr)
	}
	return fmt.Errorf("load %s: %w", what, err)
}

// Capacity is the number of service ids and backend ids the maps hold, 0 included
// (it means "none").
func (lb *LB) Capacity() (services, backends uint32) { return lb.services, lb.backends }

// Program is the XDP program, for BPF_PROG_TEST_RUN in tests and benchmarks.
func (lb *LB) Program() *ebpf.Program { return lb.objs.ManifoldLb }

// Attach attaches the program to iface in the given mode and allows redirects to it.
// ModeAuto tries native first; the mode actually used is returned.
func (lb *LB) Attach(iface, mode string) (string, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return "", fmt.Errorf("interface %s: %w", iface, err)
	}
	var l link.Link
	used := mode
	switch mode {
	case ModeNative:
		l, err = link.AttachXDP(link.XDPOptions{Program: lb.objs.ManifoldLb, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			err = fmt.Errorf("native XDP on %s failed (the driver may lack XDP support; xdp_mode: generic works everywhere, slower): %w", iface, err)
		}
	case ModeGeneric:
		l, err = link.AttachXDP(link.XDPOptions{Program: lb.objs.ManifoldLb, Interface: ifc.Index, Flags: link.XDPGenericMode})
	case ModeAuto:
		used = ModeNative
		l, err = link.AttachXDP(link.XDPOptions{Program: lb.objs.ManifoldLb, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			used = ModeGeneric
			l, err = link.AttachXDP(link.XDPOptions{Program: lb.objs.ManifoldLb, Interface: ifc.Index, Flags: link.XDPGenericMode})
		}
	default:
		return "", fmt.Errorf("unknown xdp mode %q", mode)
	}
	if err != nil {
		return "", fmt.Errorf("attach XDP to %s: %w", iface, err)
	}
	if err := lb.PutTxPort(ifc.Index); err != nil {
		l.Close()
		return "", err
	}
	lb.links[iface] = l
	return used, nil
}

// PutTxPort allows the program to redirect packets to ifindex.
func (lb *LB) PutTxPort(ifindex int) error {
	idx := uint32(ifindex)
	if err := lb.objs.LbTxPorts.Put(idx, idx); err != nil {
		return fmt.Errorf("lb_tx_ports put %d: %w", ifindex, err)
	}
	return nil
}

// Close detaches from every interface and releases the program and maps.
func (lb *LB) Close() error {
	var errs []error
	for name, l := range lb.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", name, err))
		}
	}
	lb.links = nil
	errs = append(errs, lb.ringSpace.close(), lb.objs.Close())
	return errors.Join(errs...)
}
