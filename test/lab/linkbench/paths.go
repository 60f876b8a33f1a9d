package main

// The part linkpaths: the link on the write-ups' network, where the paths, not the
// cores, are the limit. The two gateways are joined by four parallel paths, each
// capped at 200 Mbit/s each way by htb, under a layer-3+4 multipath route (a bond
// hashing by layer 3+4); a tunnel is one UDP flow, so it gets one path, and N tunnels
// get N paths only if their ports hash onto distinct ones (link.source_ports:
// spread chooses such ports; fixed leaves it to the hash of port+i).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	results "github.com/manifoldlb/manifold/bench"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

const (
	pathCount        = 4
	defaultPathMbits = 200 // -path-mbits
	pathStreams      = 32  // iperf3 -P: each of 4 tunnels gets some (a miss: 4·(3/4)^32 ≈ 4·10^-4)
	cutSeconds       = 6   // the iperf3 run during a cut; the cut comes a third in
	cutPath          = 1
	pingEvery        = "0.005" // s between the pings that time a cut tunnel's outage
	// cutStreamRate paces each iperf3 stream during the cuts: 32 × 4 Mbit/s fill
	// 4 paths of 200 Mbit/s to 16 % (of 100, 32 %), so the streams are live through
	// the cut while the paths' queues stay short and a ping's gap is the cut's, not
	// a full queue's drops
	cutStreamRate = "4M"
)

// pathConfig is a link measured on the paths.
type pathConfig struct {
	name        string
	tunnels     int
	sourcePorts string
}

var pathConfigs = []pathConfig{
	{"manifold link, 1 tunnel", 1, ""},
	{"manifold link, 2 tunnels", 2, ""},
	{"manifold link, 4 tunnels", 4, ""},
	{"manifold link, 4 tunnels, source_ports: fixed", 4, "fixed"},
	{"manifold link, 8 tunnels, source_ports: fixed", 8, "fixed"},
}

// cutRun is what one round's cuts measured, on the link of 4 tunnels.
type cutRun struct {
	outage, others float64 // s: the longest gap in the cut tunnel's pings, and in the others'
	dropped        float64 // s: from a silent drop to the tunnel out of both routes
	broken         int     // iperf3 runs (of the two cuts) whose streams broke
}

func (b *bench) paths(ctx context.Context, jsonPath string, rounds int) error {
	p, err := b.l.AddPaths(b.gwA, b.gwB, pathCount, b.pathMbits)
	if err != nil {
		return err
	}
	pathServer := netip.MustParseAddr("10.254.0.2") // gateway B's end of path 0
	srv, err := b.l.Start(b.gwB, "iperf3-path", hostprog.Iperf3, "-s", "--forceflush", "-B", pathServer.String())
	if err != nil {
		return err
	}
	if _, err := srv.WaitLog(10*time.Second, func(line string) bool { return strings.Contains(line, "listening") }); err != nil {
		return err
	}
	b.parallel = pathStreams
	fmt.Printf("link on %d paths of %d Mbit/s (layer-3+4 multipath): iperf3 -P %d from site A to site B, %d s per run, %d rounds\n",
		pathCount, b.pathMbits, pathStreams, b.seconds, rounds)

	var load []float64 // the machine's 1-minute load average at the start of each round
	plain := make([]sample, 0, rounds)
	samples := make([][]sample, len(pathConfigs))
	var cuts []cutRun
	for round := range rounds {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		load = append(load, loadAverage())
		s, err := retryBusy(func() (sample, error) { return b.iperfFrom(b.gwA, pathServer, 1, b.seconds, 0, 0) })
		if err != nil {
			return fmt.Errorf("one path, plain TCP: %w", err)
		}
		fmt.Printf("  round %d  %-48s %6.3f Gbit/s\n", round+1, "one path, plain TCP (kernel, unencrypted)", s.gbps)
		plain = append(plain, s)
		for i, c := range pathConfigs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s, cut, err := b.pathLink(p, fmt.Sprintf("r%d-c%d", round, i), c, c.tunnels == pathCount && c.sourcePorts == "")
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			fmt.Printf("  round %d  %-48s %6.3f Gbit/s  CPU s/GB: gateway A %5.2f, gateway B %5.2f, machine %5.2f\n",
				round+1, c.name, s.gbps, s.cpuA/s.gbytes, s.cpuB/s.gbytes, s.cpuTotal/s.gbytes)
			samples[i] = append(samples[i], s)
			if cut != nil {
				fmt.Printf("  round %d  path %d cut: its tunnel's pings stopped %.0f ms (the others' longest gap %.0f ms); dropping silently: out of both routes after %.0f ms; iperf3 runs broken %d of 2\n",
					round+1, cutPath, 1000*cut.outage, 1000*cut.others, 1000*cut.dropped, cut.broken)
				cuts = append(cuts, *cut)
			}
		}
	}
	if jsonPath != "" {
		if err := results.WritePart(jsonPath, results.Part{Name: "linkpaths", Method: pathsMethod(b.pathMbits), Figures: pathFigures(b.pathMbits, plain, samples, cuts, load)}); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", jsonPath)
	}
	return nil
}

func pathsMethod(mbits int) string {
	return fmt.Sprintf("Site-to-site link on the write-ups' network (test/lab AddPaths): the two gateways joined by %d veth pairs, "+
		"each capped at %d Mbit/s each way by htb, under a layer-3+4 multipath route between their outer addresses "+
		"(fib_multipath_hash_policy 1; a path whose carrier is lost leaves the route: ignore_routes_with_linkdown), as "+
		"bond members hashed by layer 3+4. iperf3 -P %d (5 s) from site A's host to site B's through `manifold link` with 1, 2 "+
		"and 4 tunnels (link.source_ports: spread, the default: each tunnel sends from a port the gateway's route hashes onto a "+
		"path of its own), and with 4 and 8 tunnels on ports port+i (source_ports: fixed: where this boot's hash puts them); "+
		"references in the same round: the cap, and one plain TCP stream over one path (kernel, unencrypted). Cuts, on the "+
		"link of 4 tunnels during a %d s iperf3 run (32 streams paced at 4 Mbit/s each, so that the paths' queues stay short): path %d taken down at gateway A (B's end loses its carrier), timed by "+
		"pings every %s s through each tunnel to its far end (the cut tunnel's longest gap between answers, the other "+
		"tunnels' beside it as the noise of the same run); then path %d dropping every packet with its carrier up (pfifo "+
		"limit 0), timed from the drop until both gateways' routes leave the tunnel (status polled every 5 ms). The "+
		"machine's 2 cores are shared with other work running at the same time.",
		pathCount, mbits, pathStreams, cutSeconds, cutPath, pingEvery, cutPath)
}

// pathLink measures one link configuration on the paths, and with cut, the cuts.
func (b *bench) pathLink(p *lab.Paths, name string, c pathConfig, cut bool) (sample, *cutRun, error) {
	pa, pb, err := b.startLink(name, c.tunnels, linkOptions{local: p.AddrA, remote: p.AddrB, sourcePorts: c.sourcePorts})
	if err != nil {
		return sample{}, nil, err
	}
	defer pa.Stop()
	defer pb.Stop()
	before, err := p.TxBytes()
	if err != nil {
		return sample{}, nil, err
	}
	s, err := b.iperf(pa.Pid(), pb.Pid())
	if err != nil {
		return s, nil, err
	}
	after, err := p.TxBytes()
	s.wireGbps = float64(after-before) * 8 / float64(b.seconds) / 1e9
	if err != nil || !cut {
		return s, nil, err
	}
	var r cutRun
	if r.outage, r.others, err = b.cutCarrier(p, pa); err != nil {
		if !isBroken(err) {
			return s, nil, err
		}
		fmt.Printf("    path %d cut (carrier): %v\n", cutPath, err)
		r.broken++
	}
	if err := b.waitRoutes(pa, pb, pathCount); err != nil {
		return s, nil, fmt.Errorf("after path %d came back: %w", cutPath, err)
	}
	if r.dropped, err = b.cutSilent(p, pa); err != nil {
		if !isBroken(err) {
			return s, nil, err
		}
		fmt.Printf("    path %d dropping: %v\n", cutPath, err)
		r.broken++
	}
	if err := b.waitRoutes(pa, pb, pathCount); err != nil {
		return s, nil, fmt.Errorf("after path %d passed again: %w", cutPath, err)
	}
	return s, &r, nil
}

// errBroken marks an iperf3 run that ended in error during a cut: a stream broke.
var errBroken = errors.New("iperf3 failed during the cut")

func isBroken(err error) bool { return errors.Is(err, errBroken) }

func (b *bench) waitRoutes(pa, pb *lab.Process, n int) error {
	for _, side := range []struct {
		p  *lab.Process
		gw *lab.Host
	}{{pa, b.gwA}, {pb, b.gwB}} {
		if err := side.p.WaitReady(30*time.Second, func() error { return b.routes(side.gw, n) }); err != nil {
			return err
		}
	}
	return nil
}

// duringIperf runs iperf3 through the link for cutSeconds, its streams paced at
// cutStreamRate, and calls cut a third in;
// the iperf3 run's error is errBroken.
func (b *bench) duringIperf(pa *lab.Process, cut func() error) error {
	var wg sync.WaitGroup
	var ierr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, ierr = retryBusy(func() (sample, error) {
			return b.iperfFrom(b.hostA, b.hostB.Addr4, pathStreams, cutSeconds, 0, 0, "-b", cutStreamRate)
		})
	}()
	time.Sleep(cutSeconds * time.Second / 3)
	err := cut()
	wg.Wait()
	if ierr != nil {
		return errors.Join(err, fmt.Errorf("%w: %v", errBroken, ierr))
	}
	return err
}

// cutCarrier takes the path down during an iperf3 run, with every tunnel pinged; it
// returns the cut tunnel's outage (the longest gap between answers of any tunnel) and
// the longest gap among the others.
func (b *bench) cutCarrier(p *lab.Paths, pa *lab.Process) (outage, others float64, err error) {
	st, err := lab.LinkStatus(b.gwA)
	if err != nil {
		return 0, 0, err
	}
	gaps := make([]float64, len(st.Tunnels))
	perrs := make([]error, len(st.Tunnels))
	var wg sync.WaitGroup
	for i, tn := range st.Tunnels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := b.gwA.Output(hostprog.Ping, "-n", "-D", "-i", pingEvery, "-w", strconv.Itoa(cutSeconds), tn.RemoteInner)
			gaps[i], perrs[i] = longestGap(out)
			if perrs[i] != nil {
				perrs[i] = errors.Join(perrs[i], err)
			}
		}()
	}
	err = b.duringIperf(pa, func() error { return p.Cut(cutPath) })
	wg.Wait()
	err = errors.Join(err, p.Mend(cutPath))
	for i, g := range gaps {
		if perrs[i] != nil {
			return 0, 0, errors.Join(err, fmt.Errorf("tunnel %d's pings: %w", i, perrs[i]))
		}
		switch {
		case g > outage:
			outage, others = g, max(others, outage)
		default:
			others = max(others, g)
		}
	}
	return outage, others, err
}

// longestGap reads ping -D's output and returns the longest time between two answers.
func longestGap(out string) (float64, error) {
	var last, gap float64
	n := 0
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, "[") || !strings.Contains(line, "bytes from") {
			continue
		}
		ts, _, ok := strings.Cut(line[1:], "]")
		t, err := strconv.ParseFloat(ts, 64)
		if !ok || err != nil {
			return 0, fmt.Errorf("ping: unreadable line %q", line)
		}
		if n > 0 {
			gap = max(gap, t-last)
		}
		last = t
		n++
	}
	if n < 2 {
		return 0, fmt.Errorf("ping: %d answers: %s", n, out)
	}
	return gap, nil
}

// cutSilent makes the path drop everything during an iperf3 run and returns the time
// until both gateways' routes have left its tunnel.
func (b *bench) cutSilent(p *lab.Paths, pa *lab.Process) (took float64, err error) {
	err = b.duringIperf(pa, func() error {
		start := time.Now()
		if err := p.Drop(cutPath); err != nil {
			return err
		}
		for _, gw := range []*lab.Host{b.gwA, b.gwB} {
			for b.routes(gw, pathCount-1) != nil {
				if time.Since(start) > 10*time.Second {
					return fmt.Errorf("%s: the route still holds %d tunnels 10 s after path %d dropped all", gw.Role, pathCount, cutPath)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		took = time.Since(start).Seconds()
		return nil
	})
	return took, errors.Join(err, p.Undrop(cutPath))
}

func pathFigures(mbits int, plain []sample, samples [][]sample, cuts []cutRun, load []float64) []results.Figure {
	const section = "linkpaths"
	gbps := func(ss []sample) []float64 {
		var out []float64
		for _, s := range ss {
			out = append(out, s.gbps)
		}
		return out
	}
	capRuns := make([]float64, len(plain))
	for i := range capRuns {
		capRuns[i] = float64(mbits) / 1000
	}
	capFig := results.NewFigure(section, fmt.Sprintf("one path's cap (htb, %d Mbit/s)", mbits), "Gbit/s", capRuns)
	plainFig := results.NewFigure(section, "one path, one plain TCP stream (kernel, unencrypted)", "Gbit/s", gbps(plain))
	plainFig.Compare(capFig, ">=", 0)
	plainFig.Note = "the path's own goodput: TCP/IP headers in 1500-byte frames"
	figs := []results.Figure{capFig, plainFig}
	var one results.Figure
	for i, c := range pathConfigs {
		f := results.NewFigure(section, c.name, "Gbit/s", gbps(samples[i]))
		at := len(figs) // f goes first, before any figure of its own
		switch {
		case i == 0:
			f.Compare(capFig, ">=", 0.9)
			f.Compare(plainFig, ">=", 0)
			f.Note = "goal 0.9–1.1× the cap, in iperf3's goodput; each packet carries WireGuard's 60 bytes and the inner TCP/IP's 52 in a 1514-byte frame (MTU 1420), so a tunnel filling its path gives 0.92 of the cap at most"
			one = f
			var wire []float64
			for _, s := range samples[i] {
				wire = append(wire, s.wireGbps)
			}
			w := results.NewFigure(section, c.name+": frames on the paths", "Gbit/s", wire)
			w.Compare(capFig, ">=", 0)
			w.Note = "gateway A's bytes sent over the paths (Ethernet frames, as htb counts them) over the run's 5 s: how full the tunnel keeps its path"
			figs = append(figs, w)
		case c.tunnels == pathCount && c.sourcePorts == "":
			f.Compare(one, ">=", 3.4)
			f.Note = "each tunnel on a path of its own (source ports chosen by the gateway's multipath route)"
		case c.sourcePorts == "fixed":
			f.Compare(one, ">=", 0)
			f.Note = "ports port+i hashed by this boot's multipath hash: two tunnels on one path leave another idle, unless the hash happens to spread them"
		default:
			f.Compare(one, ">=", 0)
		}
		figs = slices.Insert(figs, at, f)
		var cpuA, cpuB, cpu []float64
		for _, s := range samples[i] {
			cpuA, cpuB, cpu = append(cpuA, s.cpuA/s.gbytes), append(cpuB, s.cpuB/s.gbytes), append(cpu, s.cpuTotal/s.gbytes)
		}
		figs = append(figs,
			results.NewFigure(section, c.name+": gateway A's link process", "CPU s/GB", cpuA),
			results.NewFigure(section, c.name+": gateway B's link process", "CPU s/GB", cpuB),
			results.NewFigure(section, c.name+": whole machine, other work included", "CPU s/GB", cpu))
	}
	var outage, others, dropped, broken []float64
	for _, c := range cuts {
		outage, others, dropped, broken = append(outage, 1000*c.outage), append(others, 1000*c.others), append(dropped, 1000*c.dropped), append(broken, float64(c.broken))
	}
	o := results.NewFigure(section, fmt.Sprintf("path cut (carrier lost): the cut tunnel's outage, pinged every %s s", pingEvery), "ms", outage)
	o.SetBound("<=", 1000)
	o.Note = "the gateways' kernels take the path out of the multipath route and the tunnel's UDP flow hashes onto another at once; the outage includes the ping interval"
	ref := results.NewFigure(section, "path cut (carrier lost): the other tunnels' longest gap, same runs", "ms", others)
	ref.Note = "the noise: pings queued behind iperf3's streams in the capped paths' queues"
	d := results.NewFigure(section, "path dropping silently: tunnel out of both gateways' routes", "ms", dropped)
	d.SetBound("<=", 1000)
	d.Note = "health.interval 100 ms × fall 3, plus the probe in flight: the kernel does not see this failure, the link's probes do; the tunnel's inner flows then move to the other tunnels (resilient next-hop group)"
	br := results.NewFigure(section, "iperf3 runs with a broken TCP stream, of the two cuts", "runs", broken)
	br.SetBound("<=", 0)
	l := results.NewFigure(section, "the machine's load average (1 min) at the start of each round", "runnable", load)
	l.Note = "2 cores: above 2, other work competed with the link, iperf3 and the paths for the CPU"
	return append(figs, o, ref, d, br, l)
}

// loadAverage is the machine's 1-minute load average (0 if unreadable).
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
