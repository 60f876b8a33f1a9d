// Command linkbench measures a site-to-site link's throughput in the lab (as root,
// after `make build`):
//
//	go run ./test/lab/linkbench -manifold bin/manifold -json bench/results/parts/link.json
//
// Two sites' gateways meet on the lab's router (the WAN); a host behind each runs
// iperf3 (-P 8: eight TCP streams, from site A to site B). Each round measures, side
// by side: `manifold link` with 1, 2 and 4 tunnels, and the same path forwarded by
// the kernel unencrypted (static routes on the gateways), the ceiling. Reported per
// configuration: Gbit/s, and CPU seconds per GByte carried by each gateway's link
// process (wireguard-go's crypto and its TUN and UDP system calls) and by the whole
// machine. The ratio N tunnels ÷ 1 tunnel is the scaling figure. Numbers, never
// pass/fail.
//
// With -part linkpaths (make bench's part of that name, paths.go) the gateways are
// joined instead by four paths capped at 200 Mbit/s under a layer-3+4 multipath
// route, where the paths, not the cores, are the limit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	results "github.com/manifoldlb/manifold/bench"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

// prefix names the lab's namespaces; MANIFOLD_LAB_PREFIX overrides it, as for the lab tests.
var prefix = func() string {
	if p := os.Getenv("MANIFOLD_LAB_PREFIX"); p != "" {
		return p
	}
	return "mflb"
}()

var (
	siteA = netip.MustParsePrefix("10.1.0.0/16")
	siteB = netip.MustParsePrefix("10.2.0.0/16")
)

// tunnelCounts are the link configurations measured; "kernel" is the ceiling.
var tunnelCounts = []int{1, 2, 4}

func main() {
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary (make build)")
	jsonPath := flag.String("json", "", "also write the results to this file as JSON")
	rounds := flag.Int("rounds", 3, "rounds; each measures every configuration once")
	seconds := flag.Int("seconds", 5, "length of each iperf3 run")
	pathMbits := flag.Int("path-mbits", defaultPathMbits, "linkpaths: each path's cap, Mbit/s each way")
	part := flag.String("part", "link", "link: the tunnels on one path, bound by the CPU; linkpaths: on four capped paths (paths.go)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *part, *manifold, *jsonPath, *rounds, *seconds, *pathMbits)
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the lab has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\nlinkbench failed: %v\n", err)
		os.Exit(1)
	}
}

type bench struct {
	manifold               string
	seconds                int
	parallel               int // iperf3's streams (-P)
	pathMbits              int // linkpaths: each path's cap
	l                      *lab.Lab
	gwA, gwB, hostA, hostB *lab.Host
	keyA, keyB             lab.WireGuardKey
}

// sample is one iperf3 run through one configuration.
type sample struct {
	gbps                 float64
	gbytes               float64
	cpuA, cpuB, cpuTotal float64 // seconds
	wireGbps             float64 // linkpaths: the frames gateway A sent over the paths, per second of the run
}

func run(ctx context.Context, part, manifold, jsonPath string, rounds, seconds, pathMbits int) (err error) {
	if rounds < 1 || seconds < 1 || pathMbits < 1 {
		return fmt.Errorf("-rounds %d, -seconds %d, -path-mbits %d: at least 1 each", rounds, seconds, pathMbits)
	}
	if part != "link" && part != "linkpaths" {
		return fmt.Errorf("-part %q: link or linkpaths", part)
	}
	if err := lab.Preflight("linkbench", &manifold, hostprog.Ethtool, hostprog.IP, hostprog.Iperf3, hostprog.TC, hostprog.Ping); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := lab.New(lab.Spec{Prefix: prefix, Dir: dir, Hosts: []lab.HostSpec{{Role: "gwa", Kind: lab.Gateway}, {Role: "gwb", Kind: lab.Gateway}}})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && ctx.Err() == nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
	}()
	b := &bench{manifold: manifold, seconds: seconds, parallel: 8, pathMbits: pathMbits, l: l, gwA: l.Host("gwa"), gwB: l.Host("gwb")}
	if b.hostA, err = l.AddSiteHost(b.gwA, "hosta", netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), netip.Addr{}, netip.Addr{}); err != nil {
		return err
	}
	if b.hostB, err = l.AddSiteHost(b.gwB, "hostb", netip.MustParseAddr("10.2.0.1"), netip.MustParseAddr("10.2.0.2"), netip.Addr{}, netip.Addr{}); err != nil {
		return err
	}
	if b.keyA, err = lab.NewWireGuardKey(); err != nil {
		return err
	}
	if b.keyB, err = lab.NewWireGuardKey(); err != nil {
		return err
	}
	server, err := l.Start(b.hostB, "iperf3-server", hostprog.Iperf3, "-s", "--forceflush", "-B", b.hostB.Addr4.String())
	if err != nil {
		return err
	}
	if _, err := server.WaitLog(10*time.Second, func(line string) bool { return strings.Contains(line, "listening") }); err != nil {
		return err
	}
	if part == "linkpaths" {
		return b.paths(ctx, jsonPath, rounds)
	}
	fmt.Printf("link benchmark: iperf3 -P 8 from site A to site B, %d s per run, %d rounds, %d cores\n", seconds, rounds, runtime.NumCPU())

	names := []string{"kernel forwarding, unencrypted"}
	for _, n := range tunnelCounts {
		names = append(names, fmt.Sprintf("manifold link, %d tunnel%s", n, plural(n)))
	}
	samples := make([][]sample, len(names))
	for round := range rounds {
		for i := range names {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var s sample
			if i == 0 {
				s, err = b.kernel()
			} else {
				s, err = b.link(fmt.Sprintf("r%d-t%d", round, tunnelCounts[i-1]), tunnelCounts[i-1])
			}
			if err != nil {
				return fmt.Errorf("%s: %w", names[i], err)
			}
			fmt.Printf("  round %d  %-32s %6.2f Gbit/s  CPU s/GB: gateway A %5.2f, gateway B %5.2f, machine %5.2f\n",
				round+1, names[i], s.gbps, s.cpuA/s.gbytes, s.cpuB/s.gbytes, s.cpuTotal/s.gbytes)
			samples[i] = append(samples[i], s)
		}
	}
	figs := figures(names, samples)
	if jsonPath != "" {
		if err := results.WritePart(jsonPath, results.Part{Name: "link", Method: method, Figures: figs}); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", jsonPath)
	}
	return nil
}

const method = "Site-to-site link in the lab (test/lab): two gateways in network namespaces joined by a third (the WAN, " +
	"plain veth forwarding), a host behind each. iperf3 -P 8 (eight TCP streams, 5 s) from site A's host to site B's, " +
	"through `manifold link` with 1, 2 and 4 WireGuard tunnels (wireguard-go on TUN devices, MTU 1420, resilient " +
	"next-hop group, layer-4 hash), and through the same namespaces forwarded by the kernel unencrypted (the ceiling); " +
	"the configurations of a round run one after the other. CPU seconds per GByte carried: of each gateway's link " +
	"process (utime + stime from /proc: wireguard-go's crypto and its TUN and UDP system calls; softirq work done " +
	"outside the process is not counted), and of the whole machine (/proc/stat, all cores, iperf3 and every other " +
	"process included). The machine has 2 cores shared by both gateways, both hosts' iperf3 and the WAN, and by " +
	"other work running at the same time."

func figures(names []string, samples [][]sample) []results.Figure {
	var figs []results.Figure
	pick := func(i int, f func(s sample) float64) []float64 {
		var out []float64
		for _, s := range samples[i] {
			out = append(out, f(s))
		}
		return out
	}
	var oneTunnel results.Figure
	for i, name := range names {
		g := results.NewFigure("link", name, "Gbit/s", pick(i, func(s sample) float64 { return s.gbps }))
		switch {
		case i == 0:
			g.Note = "the ceiling: no crypto, no TUN; limited by the 2 shared cores running iperf3 and veth forwarding"
		case tunnelCounts[i-1] == 1:
			g.Compare(results.Figure{Name: names[0], Runs: figs[0].Runs}, ">=", 0)
			oneTunnel = g
			g.Note = "one wireguard-go device already spreads its crypto over every core (a worker per core), so here one tunnel is bound by the machine's 2 shared cores, not by one core"
		default:
			n := tunnelCounts[i-1]
			target := 0.0
			if n == 2 {
				target = 1.5
			}
			g.Compare(oneTunnel, ">=", target)
			g.Compare(results.Figure{Name: names[0], Runs: figs[0].Runs}, ">=", 0)
			g.Note = fmt.Sprintf("%d tunnels on %d cores shared by both gateways and both iperf3 ends: bound by the machine's CPU like one tunnel (its CPU s/GB is the same)", n, runtime.NumCPU())
		}
		figs = append(figs, g)
		if i > 0 {
			figs = append(figs,
				results.NewFigure("link", name+": gateway A's link process", "CPU s/GB", pick(i, func(s sample) float64 { return s.cpuA / s.gbytes })),
				results.NewFigure("link", name+": gateway B's link process", "CPU s/GB", pick(i, func(s sample) float64 { return s.cpuB / s.gbytes })))
		}
		figs = append(figs, results.NewFigure("link", name+": whole machine", "CPU s/GB", pick(i, func(s sample) float64 { return s.cpuTotal / s.gbytes })))
	}
	return figs
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// kernel measures the unencrypted ceiling: static routes between the sites, on the
// gateways and on the WAN.
func (b *bench) kernel() (sample, error) {
	routes := []struct {
		h    *lab.Host
		args []string
	}{
		{b.gwA, []string{"route", "add", siteB.String(), "via", b.gwA.Gateway4.String()}},
		{b.gwB, []string{"route", "add", siteA.String(), "via", b.gwB.Gateway4.String()}},
		{b.l.Router, []string{"route", "add", siteB.String(), "via", b.gwB.Addr4.String()}},
		{b.l.Router, []string{"route", "add", siteA.String(), "via", b.gwA.Addr4.String()}},
	}
	forwarding := func(v string) error {
		return errors.Join(b.gwA.Sysctl(map[string]string{"net.ipv4.conf.all.forwarding": v}), b.gwB.Sysctl(map[string]string{"net.ipv4.conf.all.forwarding": v}))
	}
	if err := forwarding("1"); err != nil {
		return sample{}, err
	}
	var err error
	for _, r := range routes {
		if err = r.h.Exec(hostprog.IP, r.args...); err != nil {
			break
		}
	}
	var s sample
	if err == nil {
		s, err = b.iperf(0, 0)
	}
	for _, r := range routes {
		r.args[1] = "del"
		_ = r.h.Exec(hostprog.IP, r.args...) // those not added fail, and that is all
	}
	return s, errors.Join(err, forwarding("0"))
}

// link measures manifold link with n tunnels, started on both gateways for the run.
func (b *bench) link(name string, n int) (sample, error) {
	pa, pb, err := b.startLink(name, n, linkOptions{local: b.gwA.Addr4, remote: b.gwB.Addr4})
	if err != nil {
		return sample{}, err
	}
	defer pa.Stop()
	defer pb.Stop()
	return b.iperf(pa.Pid(), pb.Pid())
}

// linkOptions are what differs between the bench's links besides the tunnels.
type linkOptions struct {
	local, remote netip.Addr // gateway A's outer address and B's
	sourcePorts   string     // link.source_ports; "": the default
}

// startLink starts manifold link with n tunnels on both gateways and waits until
// both route over all n; the caller stops them.
func (b *bench) startLink(name string, n int, o linkOptions) (pa, pb *lab.Process, err error) {
	cfgA := lab.LinkConfig{Name: "ab", Local: o.local, Remote: o.remote, LocalPrefixes: []netip.Prefix{siteA}, Prefixes: []netip.Prefix{siteB},
		Tunnels: n, Key: b.keyA, PeerPublicKey: b.keyB.Public, SourcePorts: o.sourcePorts}
	cfgB := cfgA
	cfgB.Local, cfgB.Remote, cfgB.LocalPrefixes, cfgB.Prefixes, cfgB.Key, cfgB.PeerPublicKey = cfgA.Remote, cfgA.Local, cfgA.Prefixes, cfgA.LocalPrefixes, b.keyB, b.keyA.Public
	if pa, err = b.l.StartLink(b.manifold, b.gwA, "link-gwa-"+name, cfgA); err != nil {
		return nil, nil, err
	}
	if pb, err = b.l.StartLink(b.manifold, b.gwB, "link-gwb-"+name, cfgB); err != nil {
		pa.Stop()
		return nil, nil, err
	}
	for _, side := range []struct {
		p  *lab.Process
		gw *lab.Host
	}{{pa, b.gwA}, {pb, b.gwB}} {
		if err := side.p.WaitReady(30*time.Second, func() error { return b.routes(side.gw, n) }); err != nil {
			pa.Stop()
			pb.Stop()
			return nil, nil, err
		}
	}
	// tunnels that came up after the first take their share of the flows only once
	// the groups have moved idle buckets to them
	if err := lab.WaitBalanced(pa, b.gwA, b.gwB); err != nil {
		pa.Stop()
		pb.Stop()
		return nil, nil, err
	}
	return pa, pb, nil
}

// routes says whether the link on gw routes over n tunnels.
func (b *bench) routes(gw *lab.Host, n int) error {
	st, err := lab.LinkStatus(gw)
	if err != nil {
		return err
	}
	if got := len(lab.InRoute(st)); got != n {
		return fmt.Errorf("%s: %d of %d tunnels in the route", gw.Role, got, n)
	}
	return nil
}

// iperf runs the client in site A and returns its throughput and the CPU time of the
// two processes given (0: none) and of the machine.
func (b *bench) iperf(pidA, pidB int) (sample, error) {
	// The server takes one test at a time and may still be closing the previous one
	// ("the server is busy running a test"): that refusal ends at once, so ask again,
	// for at most 10 s.
	return retryBusy(func() (sample, error) { return b.iperfOnce(pidA, pidB) })
}

// retryBusy runs an iperf3 client again while its server is still busy with the
// last, or refused the connection before the test began (a server closing the last
// test may reset the next one's control connection); a stream broken in a test is an
// error at once.
func retryBusy(client func() (sample, error)) (sample, error) {
	for try := 0; ; try++ {
		s, err := client()
		refused := err != nil && (strings.Contains(err.Error(), "server is busy") || strings.Contains(err.Error(), "unable to connect to server"))
		if !refused || try == 50 {
			return s, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (b *bench) iperfOnce(pidA, pidB int) (sample, error) {
	return b.iperfFrom(b.hostA, b.hostB.Addr4, b.parallel, b.seconds, pidA, pidB)
}

// iperfFrom runs iperf3's client on from against the server at to, with parallel
// streams for seconds and the extra arguments given; an error if any stream broke.
func (b *bench) iperfFrom(from *lab.Host, to netip.Addr, parallel, seconds, pidA, pidB int, extra ...string) (sample, error) {
	a0, b0, m0 := procCPU(pidA), procCPU(pidB), machineCPU()
	args := append([]string{"-c", to.String(), "-P", strconv.Itoa(parallel), "-t", strconv.Itoa(seconds), "-J"}, extra...)
	out, err := from.Output(hostprog.Iperf3, args...)
	if err != nil {
		return sample{}, err
	}
	s := sample{cpuA: procCPU(pidA) - a0, cpuB: procCPU(pidB) - b0, cpuTotal: machineCPU() - m0}
	var res struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				Bytes         float64 `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return sample{}, fmt.Errorf("iperf3's JSON: %w", err)
	}
	s.gbps = res.End.SumReceived.BitsPerSecond / 1e9
	s.gbytes = res.End.SumReceived.Bytes / 1e9
	if s.gbytes == 0 {
		return sample{}, fmt.Errorf("iperf3 carried nothing: %s", res.Error)
	}
	return s, nil
}

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on every Linux port in use).
const clockTicks = 100

// procCPU is a process's user + system CPU seconds so far (0 for pid 0).
func procCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// fields after the command name, which may hold spaces: state is field 3
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks
}

// machineCPU is the busy CPU seconds of every core so far (all but idle and iowait).
func machineCPU() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var busy float64
	for i, v := range strings.Fields(line)[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest time is already in user
			busy += x
		}
	}
	return busy / clockTicks
}
