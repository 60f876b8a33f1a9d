package bench

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/vishvananda/netlink"
)

// The ways the device under test forwards, each set up before its runs and undone
// after. Every one leaves an XDP program on the device's ingress veth: a veth receives
// frames another device sends with XDP (the generator's) only while it has one.

// Path names, as the figures carry them.
const (
	PathManifold        = "manifold"
	PathMinimalIPIP     = "minimal XDP IPIP forwarder"
	PathMinimalRedirect = "minimal XDP redirect"
	PathKernel          = "kernel forwarding"
	PathNftables        = "nftables DNAT"
)

// pktratePaths in the order every round measures them.
var pktratePaths = []ratePath{
	{PathManifold, (*rateRig).setupManifold},
	{PathMinimalIPIP, func(r *rateRig) (func() error, error) { return r.attachDevice(r.objs.PktrateIpip) }},
	{PathMinimalRedirect, func(r *rateRig) (func() error, error) { return r.attachDevice(r.objs.PktrateRedirect) }},
	{PathKernel, (*rateRig).setupKernel},
	{PathNftables, (*rateRig).setupNftables},
}

type ratePath struct {
	name string
	// setup makes the device forward this way and returns what undoes it.
	setup func(*rateRig) (func() error, error)
}

// pktrateBackends is the service's backend count, on the manifold and nftables paths.
const pktrateBackends = 10

// pktrateConfig is the service both load balancers serve: UDP to the VIP, 10 backends
// behind the sink, on a node with the default flow table and new-flow bound.
func pktrateConfig() *config.Config {
	svc := config.Service{Name: "udp4", VIP: benchVIP4, Port: genDport, Protocol: config.UDP,
		Forwarding: config.IPIP, Scheduler: config.Maglev, TableSize: 65537}
	for i := 1; i <= pktrateBackends; i++ {
		svc.Backends = append(svc.Backends, config.Backend{Address: labBackend(i), Weight: 1})
	}
	return &config.Config{
		Node:     config.Node{FlowTableSize: config.DefaultFlowTableSize, NewFlowRate: config.DefaultNewFlowRate},
		Services: []config.Service{svc},
	}
}

// attachDevice puts prog on the device's ingress veth and its NAPI thread on the device
// core.
func (r *rateRig) attachDevice(prog *ebpf.Program) (func() error, error) {
	l, err := attachXDP(r.lab.dut, r.lab.inLink, prog)
	if err != nil {
		return nil, err
	}
	if r.deviceNAPI, err = r.lab.dut.threadedNAPI(r.lab.inLink.Name, deviceCPU); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l.Close, nil
}

// setupManifold loads manifold's data plane as `manifold run` does (the program, then
// the services, then the attachment), fresh for every round: the LB has no detach but
// Close, and a fresh flow table makes every round start alike.
func (r *rateRig) setupManifold() (func() error, error) {
	cfg := pktrateConfig()
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: labOutAddr, FlowTableSize: cfg.Node.FlowTableSize})
	if err != nil {
		return nil, err
	}
	return r.attachLB(lb, reconcile.New(lb).Apply(cfg, reconcile.AlwaysUp))
}

// attachLB attaches a loaded data plane to the device's ingress veth, with redirects
// to its egress and its NAPI thread on the device core, unless setup (the error of
// programming it) failed; it returns what undoes it, and closes lb on any error.
func (r *rateRig) attachLB(lb *datapath.LB, setup error) (func() error, error) {
	err := setup
	if err == nil {
		// in the device's namespace: the interface name and the tx port's ifindex are
		// looked up in the namespace of the calling thread
		err = r.lab.dut.do(func() error {
			if _, err := lb.Attach(r.lab.inLink.Name, datapath.ModeNative); err != nil {
				return err
			}
			return lb.PutTxPort(r.lab.outLink.Index)
		})
	}
	if err == nil {
		r.deviceNAPI, err = r.lab.dut.threadedNAPI(r.lab.inLink.Name, deviceCPU)
	}
	if err != nil {
		return nil, errors.Join(err, lb.Close())
	}
	return lb.Close, nil
}

// setupKernel routes the VIP through the sink. Only this path has the route: on the
// nftables path a packet that missed the DNAT finds none and never reaches the sink.
func (r *rateRig) setupKernel() (func() error, error) {
	detach, err := r.attachDevice(r.objs.PktratePass)
	if err != nil {
		return nil, err
	}
	vip := netip.PrefixFrom(benchVIP4, 32)
	if err := r.lab.routeViaSink(vip); err != nil {
		return nil, errors.Join(err, detach())
	}
	return func() error {
		err := r.lab.dut.nl.RouteDel(r.lab.sinkRoute(vip))
		if err != nil {
			err = fmt.Errorf("%s: delete route %s: %w", r.lab.dut.name, vip, err)
		}
		return errors.Join(err, detach())
	}, nil
}

// nftTable is the nftables table of the DNAT path.
const nftTable = "manifold_pktrate"

// nftRuleset is DNAT of the VIP to its backends shaped as kube-proxy's nftables mode
// writes a service: a verdict map from address, protocol and port to the service's
// chain, which picks an endpoint chain with numgen random, which DNATs. Conntrack
// keeps the choice for the rest of the flow.
func nftRuleset() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s {\n", nftTable)
	fmt.Fprintf(&b, "\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n")
	fmt.Fprintf(&b, "\t\telements = { %s . udp . %d : goto service-udp4 }\n\t}\n", benchVIP4, genDport)
	fmt.Fprintf(&b, "\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
	fmt.Fprintf(&b, "\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t}\n")
	fmt.Fprintf(&b, "\tchain service-udp4 {\n\t\tnumgen random mod %d vmap {", pktrateBackends)
	for i := 1; i <= pktrateBackends; i++ {
		sep := ","
		if i == pktrateBackends {
			sep = ""
		}
		fmt.Fprintf(&b, " %d : goto endpoint-%d%s", i-1, i, sep)
	}
	fmt.Fprintf(&b, " }\n\t}\n")
	for i := 1; i <= pktrateBackends; i++ {
		fmt.Fprintf(&b, "\tchain endpoint-%d {\n\t\tmeta l4proto udp dnat to %s:%d\n\t}\n", i, labBackend(i), genDport)
	}
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

// setupNftables is the kernel's forwarding with the DNAT table. The connection table
// is emptied first, so that every round creates its flows anew.
func (r *rateRig) setupNftables() (func() error, error) {
	detach, err := r.attachDevice(r.objs.PktratePass)
	if err != nil {
		return nil, err
	}
	undo := func() error {
		err := r.lab.dut.exec("", hostprog.Nft, "delete", "table", "ip", nftTable)
		return errors.Join(err, r.flushConntrack(), detach())
	}
	if err := r.flushConntrack(); err != nil {
		return nil, errors.Join(err, detach())
	}
	if err := r.lab.dut.exec(nftRuleset(), hostprog.Nft, "-f", "-"); err != nil {
		return nil, errors.Join(err, detach())
	}
	return undo, nil
}

func (r *rateRig) flushConntrack() error {
	if err := r.lab.dut.nl.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		return fmt.Errorf("%s: flush conntrack: %w", r.lab.dut.name, err)
	}
	return nil
}
