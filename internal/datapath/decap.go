package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Decap is the backend agent's loaded decapsulation: one parser (bpf/lib/decap.h) behind
// two entry points sharing its maps, the tc-ingress program and the XDP one, of which the
// agent attaches one (backend.hook). Both strip IPIP and GUE (IPv4 and IPv6 outer, the
// inner packet of the outer's family) when the inner destination is a VIP added with
// AddVIP, and let every other packet through unchanged.
type Decap struct {
	objs   decapObjects
	detach func() error
	vips   *vipFilter // the VIPs decapsulated (vipaddrs.go)
}

// LoadDecap loads the decapsulation programs and their maps; GUE packets are recognised
// by their UDP destination port guePort (0: IPIP only). Nothing is attached yet.
func LoadDecap(guePort uint16) (*Decap, error) {
	spec, err := loadDecap()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[decapVarDecapGuePort].Set(be16(guePort)); err != nil {
		return nil, fmt.Errorf("set decap_gue_port: %w", err)
	}
	d := &Decap{}
	if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
		return nil, loadError("decap program", err)
	}
	d.vips = newVIPFilter("lb_decap", d.objs.LbDecapVips4, d.objs.LbDecapVips6, d.objs.LbDecapSlots4, d.objs.LbDecapSlots6)
	return d, nil
}

// AddVIP lets packets whose inner destination is vip be decapsulated.
func (d *Decap) AddVIP(vip netip.Addr) error { return d.vips.put(vip.Unmap(), 1) }

// RemoveVIP stops decapsulating packets for vip; removing a VIP that is not there is
// not an error (the map is what the caller wants either way).
func (d *Decap) RemoveVIP(vip netip.Addr) error { return d.vips.remove(vip.Unmap()) }

// AttachTC attaches the tc program to iface's ingress: tcx where the kernel has it
// (6.6+), otherwise a clsact qdisc with a direct-action filter, which every kernel since
// 4.5 has. The mode used is returned for the log.
func (d *Decap) AttachTC(iface string) (string, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return "", fmt.Errorf("interface %s: %w", iface, err)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: d.objs.ManifoldDecap, Attach: ebpf.AttachTCXIngress})
	if err == nil {
		d.detach = l.Close
		return "tcx", nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return "", fmt.Errorf("attach tcx ingress on %s: %w", iface, err)
	}
	if err := d.attachClsact(ifc.Index); err != nil {
		return "", fmt.Errorf("attach clsact ingress on %s: %w", iface, err)
	}
	return "clsact", nil
}

func (d *Decap) attachClsact(ifindex int) error {
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	created := true
	if err := netlink.QdiscAdd(qdisc); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
		created = false // someone else's clsact: share it, remove only our filter
	}
	filter := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Handle:    netlink.MakeHandle(0, 1),
			Protocol:  unix.ETH_P_ALL,
			Priority:  1,
		},
		Fd:           d.objs.ManifoldDecap.FD(),
		Name:         "manifold_decap",
		DirectAction: true,
	}
	if err := netlink.FilterAdd(filter); err != nil {
		if created {
			netlink.QdiscDel(qdisc)
		}
		return err
	}
	d.detach = func() error {
		if created {
			return netlink.QdiscDel(qdisc)
		}
		return netlink.FilterDel(filter)
	}
	return nil
}

// ErrXDPInUse: the interface already has an XDP program, which AttachXDP never replaces.
var ErrXDPInUse = errors.New("already has an XDP program")

// AttachXDP attaches the XDP program to iface in native (driver) mode, through a BPF
// link, so that it is detached when the link is closed or the process dies. It refuses
// an interface that already has an XDP program, in any mode (ErrXDPInUse: a manifold
// node on the same host, say), and does not fall back to generic mode: generic XDP runs
// after the kernel has built the skb, which is what the XDP hook is there to save, so
// the tc hook is the better choice wherever native XDP is refused.
func (d *Decap) AttachXDP(iface string) error {
	nlink, err := netlink.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", iface, err)
	}
	if x := nlink.Attrs().Xdp; x != nil && x.Attached {
		return fmt.Errorf("%s %w (id %d, %s mode): detach it, or use backend.hook: tc",
			iface, ErrXDPInUse, x.ProgId, xdpAttachMode(x.AttachMode))
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: d.objs.ManifoldDecapXdp, Interface: nlink.Attrs().Index, Flags: link.XDPDriverMode})
	switch {
	case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST):
		// attached by someone else since the check above
		return fmt.Errorf("%s %w: detach it, or use backend.hook: tc", iface, ErrXDPInUse)
	case err != nil:
		return fmt.Errorf("native XDP on %s refused (the driver may lack XDP support; backend.hook: tc works on every interface): %w", iface, err)
	}
	d.detach = l.Close
	return nil
}

// xdpAttachMode names netlink's IFLA_XDP_ATTACHED value.
func xdpAttachMode(mode uint32) string {
	switch mode {
	case 1: // XDP_ATTACHED_DRV
		return "native"
	case 2: // XDP_ATTACHED_SKB
		return "generic"
	case 3: // XDP_ATTACHED_HW
		return "offload"
	case 4: // XDP_ATTACHED_MULTI
		return "several"
	}
	return fmt.Sprintf("attach mode %d", mode)
}

// Program is the tc program, for BPF_PROG_TEST_RUN in tests and benchmarks.
func (d *Decap) Program() *ebpf.Program { return d.objs.ManifoldDecap }

// XDPProgram is the XDP program, for BPF_PROG_TEST_RUN in tests and benchmarks.
func (d *Decap) XDPProgram() *ebpf.Program { return d.objs.ManifoldDecapXdp }

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

// Close detaches and releases the program.
func (d *Decap) Close() error {
	var errs []error
	if d.detach != nil {
		errs = append(errs, d.detach())
		d.detach = nil
	}
	errs = append(errs, d.objs.Close())
	return errors.Join(errs...)
}
