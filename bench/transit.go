package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

// Transit forwarding (node.forward_transit) in the packet-rate lab: the generator's
// frames are for no VIP, and the device routes them to the sink either in XDP
// (manifold's program with no service and router mode on) or in the kernel, with the
// FIB holding few routes or a full table's worth.
//
//	for each route count, ascending: add the routes it has beyond the last (ip -batch)
//	    for each round: for each path: set up, measure every flow count, undo
//	figures: Mpps at the sink and the device core's ns/packet per route count, path and
//	flow count, XDP's run-by-run ratio to the kernel's

// TransitSection is the results section of the transit figures.
const TransitSection = "transit"

// Path names of the transit figures.
const (
	PathTransitXDP    = "XDP transit"
	PathTransitKernel = "kernel forwarding"
)

// DefaultTransitRoutes: a small table, and one the size of the Internet's IPv4 table.
var DefaultTransitRoutes = []int{10, 800000}

// TransitOptions say what to measure: the packet-rate options, and the route counts.
type TransitOptions struct {
	PktrateOptions
	Routes []int
}

var transitPaths = []ratePath{
	{PathTransitXDP, (*rateRig).setupTransitXDP},
	{PathTransitKernel, func(r *rateRig) (func() error, error) { return r.attachDevice(r.objs.PktratePass) }},
}

// setupTransitXDP loads manifold's program with no service and router mode on, as a
// node with node.forward_transit: true and nothing to balance.
func (r *rateRig) setupTransitXDP() (func() error, error) {
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: labOutAddr})
	if err != nil {
		return nil, err
	}
	return r.attachLB(lb, lb.PutSettings(datapath.Settings{ForwardTransit: true}))
}

// transitRoutes is the `ip -batch` input of routes from+1 to n of the benchmark's
// table, all through the sink: the first is the generator's destination's /24, the
// others /24s from 11.0.0.0 on. Route counts grow, so a count adds to the last one's
// routes (removing 800 000 routes takes the kernel longer than adding them).
func transitRoutes(from, n int, dev string) string {
	var b strings.Builder
	for i := from; i < n; i++ {
		p := netip.PrefixFrom(benchVIP4, 24).Masked()
		if i > 0 {
			j := i - 1
			p = netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(11 + j>>16), byte(j >> 8), byte(j), 0}), 24)
		}
		fmt.Fprintf(&b, "route add %s via %s dev %s\n", p, labSinkAddr, dev)
	}
	return b.String()
}

// Transit builds the lab, measures both paths with each route count in interleaved
// rounds, writes progress and a table to w, and removes the lab.
func Transit(ctx context.Context, w io.Writer, opts TransitOptions) (part Part, err error) {
	opts.fill()
	if len(opts.Routes) == 0 {
		opts.Routes = DefaultTransitRoutes
	}
	for i, n := range opts.Routes {
		if n < 1 || n > 16<<16 || (i > 0 && n <= opts.Routes[i-1]) {
			return Part{}, fmt.Errorf("route counts %v: want growing counts from 1 to %d", opts.Routes, 16<<16)
		}
	}
	unpin, err := pinProcess(generatorCPU)
	if err != nil {
		return Part{}, err
	}
	defer unpin()
	rig, err := newRateRig(opts.Prefix)
	if err != nil {
		return Part{}, err
	}
	defer func() { err = errors.Join(err, rig.Close()) }()

	var runs []RateRun
	installed := 0
	for _, n := range opts.Routes {
		start := time.Now()
		if err := rig.lab.dut.exec(transitRoutes(installed, n, rig.lab.outLink.Name), hostprog.IP, "-batch", "-"); err != nil {
			return Part{}, err
		}
		installed = n
		fmt.Fprintf(w, "%d routes installed in %.1f s\n", n, time.Since(start).Seconds())
		for round := range opts.Rounds {
			for _, p := range transitPaths {
				p.name = transitPathName(p.name, n)
				rs, err := rig.measurePath(ctx, p, round, opts.PktrateOptions)
				runs = append(runs, rs...)
				for _, r := range rs {
					fmt.Fprintf(w, "round %d/%d  %-36s %-12s %5.2f Mpps %6.0f ns/packet (NAPI thread %5.0f)  device core %3.0f%% busy\n",
						round+1, opts.Rounds, r.Path, flowsName(r.Flows), r.Mpps(), r.NsPerPacket(), r.NAPINsPerPacket(), 100*r.DeviceBusy())
				}
				if err != nil {
					return Part{}, err
				}
			}
		}
	}
	part = TransitPart(runs, opts)
	fmt.Fprintln(w)
	WritePktrateTable(w, part)
	return part, nil
}

func transitPathName(path string, routes int) string {
	return fmt.Sprintf("%s, %d routes", path, routes)
}

// TransitPart turns the runs into figures: per route count, path and flow count Mpps,
// ns/packet and NAPI thread ns/packet, XDP's compared run by run with the kernel's.
func TransitPart(runs []RateRun, opts TransitOptions) Part {
	part := Part{Name: "transit", Method: transitMethod(opts)}
	figures := func(path string, flows int) []Figure {
		var rs []RateRun
		for _, r := range runs {
			if r.Path == path && r.Flows == flows {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			return nil
		}
		var fs []Figure
		for _, m := range pktrateMetrics[:3] {
			vals := make([]float64, len(rs))
			for i, r := range rs {
				vals[i] = m.value(r)
			}
			f := NewFigure(TransitSection, path+", "+flowsName(flows), m.name, vals)
			f.Note = runsNote(path, rs)
			fs = append(fs, f)
		}
		return fs
	}
	for _, n := range opts.Routes {
		for _, flows := range opts.Flows {
			xdp := figures(transitPathName(PathTransitXDP, n), flows)
			kernel := figures(transitPathName(PathTransitKernel, n), flows)
			if xdp != nil && kernel != nil {
				for i, m := range pktrateMetrics[:3] {
					xdp[i].Compare(kernel[i], m.op, 0)
				}
			}
			part.Figures = append(append(part.Figures, xdp...), kernel...)
		}
	}
	return part
}

func transitMethod(o TransitOptions) string {
	routes := make([]string, len(o.Routes))
	for i, n := range o.Routes {
		routes[i] = fmt.Sprint(n)
	}
	return fmt.Sprintf("The packet-rate lab and generator of the packet_rate section (64-byte UDP frames, device core %d alone), "+
		"but the frames are transit traffic: no VIP on the device, which routes their destination's /24 through the sink. "+
		"XDP transit is manifold's program as a node with node.forward_transit: true and no service loads it (native XDP on the "+
		"ingress veth: bpf_fib_lookup, TTL and checksum, MACs, devmap redirect); kernel forwarding is the kernel's IPv4 forwarding "+
		"behind an XDP program that returns XDP_PASS. The FIB holds %s routes, installed with `ip -batch` (the /24 of the "+
		"destination, the others /24s from 11.0.0.0 on), in the main table. %d rounds per route count; each round measures both "+
		"paths and every flow count, %s warm-up and %s measured per run; XDP's ratios to the kernel are taken run by run.",
		deviceCPU, strings.Join(routes, " and "), o.Rounds, o.Warmup, o.Measure)
}
