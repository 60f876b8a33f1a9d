package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// Packet rate through one node: a generator, the node (the device under test) and a
// sink in a line of network namespaces (pktrate_lab.go), 64-byte UDP frames of one
// flow or many, and five ways for the node to forward them (pktrate_paths.go).
//
//	for each round:                      (paths interleaved: run i of every path is paired)
//	    for each path: set up
//	        for each flow count: start generator, warm up, snapshot, wait, snapshot, halt
//	        undo the path
//	figures: Mpps at the sink and the device core's ns/packet, min/median/max over
//	the rounds, with manifold's run-by-run ratios to the references
//
// The device core's busy time per packet is the steadier figure: the packet rate swings
// with whatever else the machine does, while the work per packet does not.

// PktrateSection is the results section of the packet-rate figures.
const PktrateSection = "packet_rate"

// Metrics of the packet-rate figures.
const (
	MetricMpps            = "Mpps"
	MetricNsPerPacket     = "ns/packet"
	MetricNAPINsPerPacket = "NAPI thread ns/packet"
	MetricGeneratorMpps   = "generator Mpps"
)

// pktrateMetrics are the figures of every path and flow count, in the order they are
// listed, with the direction a comparison reads ("" for none) and which of a
// reference's targets applies.
var pktrateMetrics = []struct {
	name   string
	value  func(RateRun) float64
	op     string
	target func(ref pktrateRef) float64
}{
	{MetricMpps, RateRun.Mpps, ">=", func(c pktrateRef) float64 { return c.ppsTarget }},
	{MetricNsPerPacket, RateRun.NsPerPacket, "<=", func(c pktrateRef) float64 { return c.nsTarget }},
	// the cross-check of ns/packet on a shared machine: ratios, no target
	{MetricNAPINsPerPacket, RateRun.NAPINsPerPacket, "<=", func(pktrateRef) float64 { return 0 }},
	{MetricGeneratorMpps, RateRun.GeneratorMpps, "", nil},
}

// PktrateOptions say what to measure. Zero values take the defaults below.
type PktrateOptions struct {
	// Prefix names the lab's namespaces: <Prefix>-gen, -dut, -sink.
	Prefix string
	// Rounds of every path and flow count.
	Rounds int
	// Measure is each run's measured window; Warmup the traffic before it.
	Measure, Warmup time.Duration
	// Flows are the flow counts each path is measured with.
	Flows []int
	// Paths, when set, are the only paths measured (their names as in the tables):
	// a quick A/B of manifold against its references.
	Paths []string
}

// Defaults of PktrateOptions.
const (
	DefaultPktratePrefix  = "mfr"
	DefaultPktrateRounds  = 3
	DefaultPktrateMeasure = 2 * time.Second
	// A warm-up of one second lets manifold's flow table take in 10 000 new flows
	// within the default node's new-flow bound (16 384/s, per CPU half of it).
	DefaultPktrateWarmup = time.Second
)

// DefaultPktrateFlows: one flow, and as many as a busy service has.
var DefaultPktrateFlows = []int{1, 10000}

func (o *PktrateOptions) fill() {
	if o.Prefix == "" {
		o.Prefix = DefaultPktratePrefix
	}
	if o.Rounds <= 0 {
		o.Rounds = DefaultPktrateRounds
	}
	if o.Measure <= 0 {
		o.Measure = DefaultPktrateMeasure
	}
	if o.Warmup <= 0 {
		o.Warmup = DefaultPktrateWarmup
	}
	if len(o.Flows) == 0 {
		o.Flows = DefaultPktrateFlows
	}
}

// rateRig is the lab with the benchmark's programs loaded into it.
type rateRig struct {
	lab  *rateLab
	objs pktrateObjects
	gen  *generator
	// deviceNAPI are the pids of the NAPI threads of the device's ingress veth, as
	// the current path's attachment made them.
	deviceNAPI []int
}

// Pktrate builds the lab, measures every path and flow count in interleaved rounds,
// writes progress and a table to w, and removes the lab, also when ctx is cancelled.
// It returns the results section and every run.
func Pktrate(ctx context.Context, w io.Writer, opts PktrateOptions) (part Part, runs []RateRun, err error) {
	opts.fill()
	for _, f := range opts.Flows {
		if f < 1 || f > 65536-genSportBase {
			return Part{}, nil, fmt.Errorf("flow count %d: want 1 to %d", f, 65536-genSportBase)
		}
	}
	for _, name := range opts.Paths {
		if !slices.ContainsFunc(pktratePaths, func(p ratePath) bool { return p.name == name }) {
			return Part{}, nil, fmt.Errorf("no packet-rate path %q", name)
		}
	}
	// This process's own threads stay off the device core for the whole benchmark.
	unpin, err := pinProcess(generatorCPU)
	if err != nil {
		return Part{}, nil, err
	}
	defer unpin()
	rig, err := newRateRig(opts.Prefix)
	if err != nil {
		return Part{}, nil, err
	}
	defer func() { err = errors.Join(err, rig.Close()) }()

	for round := range opts.Rounds {
		for _, p := range pktratePaths {
			if len(opts.Paths) > 0 && !slices.Contains(opts.Paths, p.name) {
				continue
			}
			rs, err := rig.measurePath(ctx, p, round, opts)
			runs = append(runs, rs...)
			for _, r := range rs {
				fmt.Fprintf(w, "round %d/%d  %-28s %-12s %5.2f Mpps %6.0f ns/packet (NAPI thread %5.0f)  offered %5.2f Mpps, device core %3.0f%% busy, NAPI thread %3.0f%%\n",
					round+1, opts.Rounds, r.Path, flowsName(r.Flows), r.Mpps(), r.NsPerPacket(), r.NAPINsPerPacket(), r.GeneratorMpps(), 100*r.DeviceBusy(), 100*r.NAPIBusy())
			}
			if err != nil {
				return Part{}, runs, err
			}
		}
	}
	part = PktratePart(runs, opts)
	fmt.Fprintln(w)
	WritePktrateTable(w, part)
	return part, runs, nil
}

// newRateRig builds the lab and loads the generator, the sink and the reference
// forwarders with the lab's addresses.
func newRateRig(prefix string) (r *rateRig, err error) {
	lab, err := newRateLab(prefix)
	if err != nil {
		return nil, fmt.Errorf("packet-rate lab (needs root): %w", err)
	}
	r = &rateRig{lab: lab}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
			r = nil
		}
	}()
	spec, err := loadPktrate()
	if err != nil {
		return r, err
	}
	frame := genFrame(lab.inLink.HardwareAddr, lab.genLink.HardwareAddr, labGenAddr, benchVIP4, genSportBase, genDport)
	for name, v := range map[string]any{
		pktrateVarGenHeader:    genHeaderWords(frame),
		pktrateVarGenSportBase: uint16(genSportBase),
		pktrateVarFwdMacs:      macWords(lab.sinkLink.HardwareAddr, lab.outLink.HardwareAddr),
		pktrateVarFwdOuterSrc:  labOutAddr.As4(),
		pktrateVarFwdOuterDst:  labBackend(1).As4(),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return r, fmt.Errorf("set %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return r, fmt.Errorf("load pktrate programs: %+v", verr)
		}
		return r, fmt.Errorf("load pktrate programs: %w", err)
	}
	// a devmap takes the ifindex in the namespace of the thread that writes it
	err = lab.dut.do(func() error { return r.objs.FwdPort.Put(uint32(0), uint32(lab.outLink.Index)) })
	if err != nil {
		return r, fmt.Errorf("fwd_port: %w", err)
	}
	if err := lab.attachSink(r.objs.PktrateSink); err != nil {
		return r, err
	}
	r.gen = &generator{prog: r.objs.PktrateGen, flows: r.objs.GenFlows, ns: lab.gen, ifindex: lab.genLink.Index, frame: frame}
	return r, nil
}

// Close removes the lab, then releases the programs.
func (r *rateRig) Close() error {
	return errors.Join(r.lab.Close(), r.objs.Close())
}

// measurePath sets a path up, runs it once per flow count and undoes it.
func (r *rateRig) measurePath(ctx context.Context, p ratePath, round int, opts PktrateOptions) (runs []RateRun, err error) {
	undo, err := p.setup(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	defer func() {
		if uerr := undo(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: undo: %w", p.name, uerr))
		}
	}()
	for _, flows := range opts.Flows {
		run, err := r.measure(ctx, flows, opts.Warmup, opts.Measure)
		if err != nil {
			return runs, fmt.Errorf("%s, %s: %w", p.name, flowsName(flows), err)
		}
		run.Path, run.Flows, run.Round = p.name, flows, round
		runs = append(runs, run)
	}
	return runs, nil
}

// measure runs the generator for warmup + window and counts over the window.
func (r *rateRig) measure(ctx context.Context, flows int, warmup, window time.Duration) (RateRun, error) {
	if err := r.gen.start(flows); err != nil {
		return RateRun{}, err
	}
	run, err := r.window(ctx, warmup, window)
	return run, errors.Join(err, r.gen.halt())
}

func (r *rateRig) window(ctx context.Context, warmup, window time.Duration) (RateRun, error) {
	if err := SleepContext(ctx, warmup); err != nil {
		return RateRun{}, err
	}
	a, err := r.snapshot()
	if err != nil {
		return RateRun{}, err
	}
	if err := SleepContext(ctx, window); err != nil {
		return RateRun{}, err
	}
	b, err := r.snapshot()
	if err != nil {
		return RateRun{}, err
	}
	return between(a, b)
}

// SleepContext waits d, or until ctx ends (its error then).
func SleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func flowsName(n int) string {
	if n == 1 {
		return "1 flow"
	}
	return fmt.Sprintf("%d flows", n)
}

// pktrateRefs are the comparisons of the packet-rate figures: figure path → reference
// path, with manifold's targets (per packet: at most a quarter of nftables' cost and
// within 1.25× of the minimal IPIP forwarder's; in packets/s the same targets
// inverted). The references carry their ratio to the kernel's forwarding, no target.
type pktrateRef struct {
	path, ref string
	nsTarget  float64 // "<=" on ns/packet
	ppsTarget float64 // ">=" on Mpps
}

var pktrateRefs = []pktrateRef{
	{PathManifold, PathNftables, 0.25, 4},
	{PathManifold, PathMinimalIPIP, 1.25, 0.8},
	{PathManifold, PathKernel, 0, 0},
	{PathMinimalIPIP, PathKernel, 0, 0},
	{PathMinimalRedirect, PathKernel, 0, 0},
	{PathNftables, PathKernel, 0, 0},
}

// PktratePart turns the runs into figures: for every path and flow count each of
// pktrateMetrics, runs in round order, with their comparisons.
func PktratePart(runs []RateRun, opts PktrateOptions) Part {
	opts.fill()
	part := Part{Name: "pktrate", Method: pktrateMethod(opts)}
	type key struct {
		path  string
		flows int
	}
	figs := map[key][]Figure{}
	for _, p := range pktratePaths {
		for _, flows := range opts.Flows {
			var rs []RateRun
			for _, r := range runs {
				if r.Path == p.name && r.Flows == flows {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				continue
			}
			slices.SortStableFunc(rs, func(a, b RateRun) int { return a.Round - b.Round })
			note := runsNote(p.name, rs)
			for _, m := range pktrateMetrics {
				vals := make([]float64, len(rs))
				for i, r := range rs {
					vals[i] = m.value(r)
				}
				f := NewFigure(PktrateSection, p.name+", "+flowsName(flows), m.name, vals)
				f.Note = note
				figs[key{p.name, flows}] = append(figs[key{p.name, flows}], f)
			}
		}
	}
	for _, p := range pktratePaths {
		for _, flows := range opts.Flows {
			fs, ok := figs[key{p.name, flows}]
			if !ok {
				continue
			}
			for _, c := range pktrateRefs {
				ref, ok := figs[key{c.ref, flows}]
				if c.path != p.name || !ok {
					continue
				}
				for i, m := range pktrateMetrics {
					if m.op != "" {
						fs[i].Compare(ref[i], m.op, m.target(c))
					}
				}
			}
			part.Figures = append(part.Figures, fs...)
		}
	}
	return part
}

// runsNote says what a reader needs to trust a path's figures: how busy the device core
// was, whether the generator rather than the device was the limit, and for the
// encapsulating paths whether what reached the sink was encapsulated.
func runsNote(path string, rs []RateRun) string {
	var (
		busy, napi              []float64
		limited, shared, silent int
		got, ipip               uint64
	)
	for _, r := range rs {
		busy = append(busy, 100*r.DeviceBusy())
		napi = append(napi, 100*r.NAPIBusy())
		if r.GeneratorLimited() {
			limited++
		}
		if r.CoreShared() {
			shared++
		}
		if r.Received == 0 {
			silent++
		}
		got, ipip = got+r.Received, ipip+r.IPIP
	}
	var notes []string
	if limited > 0 {
		notes = append(notes, fmt.Sprintf("generator-limited in %d of %d runs: device core %s busy", limited, len(rs), percentRange(Summary(busy))))
	} else {
		notes = append(notes, fmt.Sprintf("device core %s busy", percentRange(Summary(busy))))
	}
	if shared > 0 {
		notes = append(notes, fmt.Sprintf("device core shared with other work in %d of %d runs: the device's NAPI thread ran %s of the time, "+
			"so ns/packet counts others' work too (NAPI thread ns/packet does not)", shared, len(rs), percentRange(Summary(napi))))
	}
	if (path == PathManifold || path == PathMinimalIPIP) && got > 0 && ipip < got {
		notes = append(notes, fmt.Sprintf("only %.1f %% of the packets at the sink were IPIP", 100*float64(ipip)/float64(got)))
	}
	if silent > 0 {
		notes = append(notes, "no packets reached the sink in some runs")
	}
	return strings.Join(notes, "; ")
}

func percentRange(s Stat) string {
	if fmt.Sprintf("%.0f", s.Min) == fmt.Sprintf("%.0f", s.Max) {
		return fmt.Sprintf("%.0f %%", s.Min)
	}
	return fmt.Sprintf("%.0f–%.0f %%", s.Min, s.Max)
}

func pktrateMethod(o PktrateOptions) string {
	flows := make([]string, len(o.Flows))
	for i, f := range o.Flows {
		flows[i] = flowsName(f)
	}
	return fmt.Sprintf("Three network namespaces in a line, generator → device under test → sink, joined by veth pairs. "+
		"The generator is an XDP program run by BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES from a thread in the generator's "+
		"namespace pinned to CPU %[1]d, one call per run (each call waits for RCU grace periods, so short calls would leave gaps) "+
		"ended by a signal, in batches of %[9]d frames: it writes a 64-byte frame (Ethernet, IPv4 with its checksum, UDP with "+
		"checksum 0 to the VIP, FCS not counted) and returns XDP_TX, which sends it out of the generator's veth; with many flows "+
		"the UDP source port cycles through the flows, one per frame. The device's ingress veth has threaded NAPI with its kernel "+
		"thread pinned to CPU %[2]d, which does nothing else (this process and the sink's NAPI thread are pinned to CPU %[1]d; "+
		"the sink's thread runs at nice %[10]d so that it keeps up while sharing its CPU with the generator). "+
		"The sink's veth runs an XDP program that counts (IPIP frames apart) and drops, so its stack is never the limit. "+
		"Paths: manifold's data plane as a node loads it (default flow table and new-flow bound), one UDP service with %[3]d backends "+
		"behind the sink, IPIP, native XDP, bpf_fib_lookup to a permanent neighbour entry, devmap redirect to the egress veth; "+
		"a minimal XDP IPIP forwarder (bpf_xdp_adjust_head, outer IPv4 header with checksum to one fixed backend, MACs, devmap redirect); "+
		"a minimal XDP redirect (MACs, devmap redirect); the kernel's IPv4 forwarding; and nftables DNAT of the VIP shaped as "+
		"kube-proxy's nftables mode writes a service (verdict map → numgen random mod %[3]d → endpoint chain dnat, with conntrack, "+
		"emptied before each round) on top of the kernel's forwarding. The device routes the backends through the sink, and the VIP only "+
		"on the kernel-forwarding path, so that on the nftables path only DNAT'd packets reach the sink. A veth receives XDP-sent frames only while it has an XDP program, "+
		"so on the two kernel paths an XDP program that returns XDP_PASS sits on the ingress veth (its cost is in their figures). "+
		"Each run: %[4]s of traffic to warm up, then %[5]s measured. Mpps is the packets counted at the sink over the window; "+
		"ns/packet the device core's busy time from /proc/stat (user, nice, system, irq, softirq, steal) over the packets at the sink; "+
		"NAPI thread ns/packet the CPU time of the device's NAPI kernel thread (/proc/PID/schedstat), where all of its forwarding runs, "+
		"over the same packets: on a machine that runs other work on the device core it leaves that work out, which the core's busy time cannot; "+
		"generator Mpps the frames the generator made, of which those the device's ring cannot hold are dropped at its ingress. "+
		"A run with the device core under %[6]d %% busy was limited by the generator's CPU (which also runs the sink), not by the device, "+
		"and its figure's note says so. "+
		"Flow counts: %[7]s. %[8]d rounds; each round measures every path and flow count once, so run i of every figure is paired "+
		"with run i of its reference and ratios are taken run by run.",
		generatorCPU, deviceCPU, pktrateBackends, o.Warmup, o.Measure, int(100*saturatedBusy), strings.Join(flows, " and "), o.Rounds,
		genBatchSize, sinkNice)
}

// WritePktrateTable prints the figures and their comparisons as an aligned table.
func WritePktrateTable(w io.Writer, p Part) {
	fmt.Fprintf(w, "%-40s %-21s %8s %8s %8s\n", "figure", "metric", "min", "median", "max")
	last := ""
	for _, f := range p.Figures {
		if f.Name != last && last != "" {
			fmt.Fprintln(w)
		}
		last = f.Name
		fmt.Fprintf(w, "%-40s %-21s %8s %8s %8s\n", f.Name, f.Metric, tableNum(f.Value.Min), tableNum(f.Value.Median), tableNum(f.Value.Max))
		for _, c := range f.Compared {
			fmt.Fprintf(w, "  %-60s %7.2f× %7.2f× %7.2f×  %s\n", "ratio to "+c.Reference, c.Ratio.Min, c.Ratio.Median, c.Ratio.Max, c.TargetText())
		}
		if f.Note != "" && f.Metric == MetricGeneratorMpps {
			fmt.Fprintf(w, "  note: %s\n", f.Note)
		}
	}
}

func tableNum(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
