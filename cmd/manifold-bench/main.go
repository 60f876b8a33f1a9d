// Command manifold-bench runs manifold's benchmarks (`make bench` runs them all):
//
//	manifold-bench dataplane      per-packet cost of the data plane (BPF_PROG_TEST_RUN)
//	manifold-bench pktrate        packets/s through one node in a namespace lab
//	manifold-bench transit        transit packets/s routed in XDP or by the kernel, 10 and 800 000 routes
//	manifold-bench controlplane   Maglev builds and programming services into the kernel
//	manifold-bench apiwrite       an API weight change among 1 000 to 100 000 services in the config file, answered and programmed
//	manifold-bench kubewrite      one Service changed among 1 000 and 10 000 on the real kube-apiserver, programmed on the node
//	manifold-bench steerscale     a steering round at 1 000 sites × 100 origins × 10 services, simulated and live on etcd
//	manifold-bench sizes          the shipped binaries' sizes, per binary and target
//	manifold-bench report         merge the parts' JSON into latest.json and latest.md
//	manifold-bench profile        a perf profile's samples inside a loaded program, by source line
//
// It is a binary of its own so that bin/manifold, the binary operators run, does not
// carry the test rig the benchmarks are built on (gopacket, the namespace helpers).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/bench"
)

const usage = `manifold-bench — manifold's benchmarks (dataplane, pktrate and controlplane need root)

Usage:
  manifold-bench dataplane [--calls N] [--runs N] [--flood N] [--json FILE]
  manifold-bench pktrate [--rounds N] [--seconds S] [--paths P1,P2] [--json FILE]
  manifold-bench transit [--rounds N] [--seconds S] [--json FILE]
  manifold-bench controlplane [--runs N] [--json FILE]
  manifold-bench apiwrite [--runs N] [--services 1000,10000,100000] [--json FILE]
  manifold-bench kubewrite [--runs N] [--services 1000,10000] [--root DIR] [--json FILE]
  manifold-bench steerscale [--runs N] [--live-runs N] [--scenario FILE] [--json FILE]
  manifold-bench sizes [--repo DIR] [--json FILE]
  manifold-bench report [--out DIR] [--commit REV] PART.json...
  perf script -F ip,sym | manifold-bench profile [--prog NAME] [--top N]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "dataplane":
		err = dataplane(args, os.Stdout)
	case "pktrate":
		err = pktrate(args, os.Stdout)
	case "transit":
		err = transit(args, os.Stdout)
	case "controlplane":
		err = controlplane(args, os.Stdout)
	case "apiwrite":
		err = apiwrite(args, os.Stdout)
	case "kubewrite":
		err = kubewrite(args, os.Stdout)
	case "steerscale":
		err = steerscale(args, os.Stdout)
	case "sizes":
		err = sizes(args, os.Stdout)
	case "report":
		err = report(args, os.Stdout)
	case "profile":
		err = profile(args, os.Stdin, os.Stdout)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "manifold-bench: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifold-bench %s: %s\n", cmd, err)
		os.Exit(1)
	}
}

func dataplane(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench dataplane", flag.ContinueOnError)
	calls := fs.Int("calls", 100000, "program runs per case and run (each with repeat = 1)")
	runs := fs.Int("runs", 5, "runs; figures are min/median/max over them")
	flood := fs.Int("flood", 1000000, "spoofed packets of each flood-resistance run, SYNs then ACKs (0: skip them)")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	skip := fs.String("skip", "", "comma-separated parts to leave out: decap, flow_scale (for a quick A/B of the per-packet rows)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *calls < 1 || *runs < 1 {
		return errors.New("--calls and --runs must be at least 1")
	}
	skipped := map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		switch s {
		case "":
		case "decap", "flow_scale":
			skipped[s] = true
		default:
			return fmt.Errorf("--skip: unknown part %q (decap, flow_scale)", s)
		}
	}
	fmt.Fprintf(w, "Data plane per-packet cost: BPF_PROG_TEST_RUN, repeat = 1 per call, median of %d calls per case and run, %d runs.\n\n", *calls, *runs)
	part, err := bench.Dataplane(w, *calls, *runs)
	if err != nil {
		return err
	}
	for _, more := range []struct {
		name    string
		title   string
		measure func(io.Writer, int, int) ([]bench.Figure, error)
		method  string
	}{
		{"decap", "The backend's decapsulation, tc and XDP, each against a program of its hook that only lets packets through", bench.Decap, bench.DecapMethod},
		{"flow_scale", "Established flows against the flow table's size (random flows of a full table)", bench.FlowScale, bench.FlowScaleMethod},
	} {
		if skipped[more.name] {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n\n", more.title)
		figures, err := more.measure(w, *calls, *runs)
		if err != nil {
			return err
		}
		part.Figures = append(part.Figures, figures...)
		part.Method += " " + more.method
	}
	if *flood > 0 {
		fmt.Fprintf(w, "\nEstablished flows (idle during the flood, their backends drained) that keep their backend through %d spoofed SYNs, then as many spoofed ACKs of flows never seen:\n\n", *flood)
		flood, err := bench.Flood(w, 10000, *flood)
		if err != nil {
			return err
		}
		part.Figures = append(part.Figures, bench.FloodFigures(flood)...)
	}
	if *out == "" {
		return nil
	}
	return bench.WritePart(*out, part)
}

func controlplane(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench controlplane", flag.ContinueOnError)
	runs := fs.Int("runs", 3, "runs; figures are min/median/max over them")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 {
		return errors.New("--runs must be at least 1")
	}
	fmt.Fprintf(w, "Control plane: Maglev table builds and programming services into the kernel, %d runs.\n\n", *runs)
	part, err := bench.Controlplane(w, *runs)
	if err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	return bench.WritePart(*out, part)
}

// apiwrite measures an API weight change among many services in the config file.
func apiwrite(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench apiwrite", flag.ContinueOnError)
	runs := fs.Int("runs", 10, "weight changes measured per count and mode")
	counts := fs.String("services", "1000,10000,100000", "the numbers of services in the file, comma-separated")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns, err := positiveList(*counts)
	if err != nil {
		return fmt.Errorf("--services: %w", err)
	}
	if *runs < 1 {
		return errors.New("--runs must be at least 1")
	}
	fmt.Fprintf(w, "API write: one weight change among many services in the config file, %d runs.\n\n", *runs)
	part, err := bench.APIWrite(w, *runs, ns)
	if err != nil || *out == "" {
		return err
	}
	return bench.WritePart(*out, part)
}

// kubewrite measures one Service change among many on the real kube-apiserver.
func kubewrite(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench kubewrite", flag.ContinueOnError)
	runs := fs.Int("runs", 10, "changes measured per count and mode")
	counts := fs.String("services", "1000,10000", "the numbers of Services in the cluster, comma-separated, ascending")
	root := fs.String("root", ".", "the repository: bin/kube-apiserver, deploy/kubernetes")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns, err := positiveList(*counts)
	if err != nil {
		return fmt.Errorf("--services: %w", err)
	}
	if *runs < 1 {
		return errors.New("--runs must be at least 1")
	}
	fmt.Fprintf(w, "Kubernetes: one Service changed among many, programmed on the node, %d runs.\n\n", *runs)
	part, err := bench.KubeWrite(w, *runs, ns, *root)
	if err != nil || *out == "" {
		return err
	}
	return bench.WritePart(*out, part)
}

// positiveList parses "1000,10000".
func positiveList(list string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// steerscale measures a steering round at internet scale.
func steerscale(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench steerscale", flag.ContinueOnError)
	runs := fs.Int("runs", 5, "simulated rounds measured per size")
	liveRuns := fs.Int("live-runs", 1, "live rounds measured with nothing changed, and changes measured (each but the last waits until the shares settle, about 10 rounds of 120 s)")
	scenario := fs.String("scenario", "bench/steer/scale/world1000.yaml", "the scale scenario, simulated with both controllers")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || *liveRuns < 1 {
		return errors.New("--runs and --live-runs must be at least 1")
	}
	part, err := bench.SteerScale(w, *runs, *liveRuns, *scenario)
	if err != nil || *out == "" {
		return err
	}
	return bench.WritePart(*out, part)
}

// sizes builds the shipped binaries as they are shipped and reports their sizes.
func sizes(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench sizes", flag.ContinueOnError)
	repo := fs.String("repo", ".", "the repository's root")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	part, err := bench.Sizes(w, *repo)
	if err != nil || *out == "" {
		return err
	}
	return bench.WritePart(*out, part)
}

// report merges the parts written by the benchmarks into latest.json and latest.md.
func report(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench report", flag.ContinueOnError)
	out := fs.String("out", "bench/results", "directory of latest.json and latest.md")
	commit := fs.String("commit", "", "revision the figures were measured at")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("name the part files to merge")
	}
	r := bench.Report{Generated: time.Now(), Machine: bench.ThisMachine(*commit)}
	for _, path := range fs.Args() {
		p, err := bench.ReadPart(path)
		if err != nil {
			return err
		}
		r.Parts = append(r.Parts, p)
	}
	if err := bench.WriteReport(*out, r); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s and %s\n", filepath.Join(*out, "latest.json"), filepath.Join(*out, "latest.md"))
	return nil
}
