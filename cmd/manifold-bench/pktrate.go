package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/bench"
)

// pktrate: packets/s through one node in a namespace lab, manifold next to the
// kernel's forwarding, nftables DNAT and minimal XDP forwarders.
func pktrate(args []string, w io.Writer) error {
	return rateLab(args, "pktrate", "rounds; each measures every path and flow count once", func(ctx context.Context, opts bench.PktrateOptions) (bench.Part, error) {
		fmt.Fprintf(w, "Packet rate through one node: generator → device under test → sink, 64-byte UDP, %d rounds of %.1f s runs.\n\n", opts.Rounds, opts.Measure.Seconds())
		part, _, err := bench.Pktrate(ctx, w, opts)
		return part, err
	})
}

// rateLab parses the flags of a benchmark in the packet-rate lab, runs it until it ends
// or Ctrl-C (the lab is removed before the command returns), and writes its part.
func rateLab(args []string, name, roundsDoc string, run func(context.Context, bench.PktrateOptions) (bench.Part, error)) error {
	fs := flag.NewFlagSet("manifold-bench "+name, flag.ContinueOnError)
	rounds := fs.Int("rounds", bench.DefaultPktrateRounds, roundsDoc)
	seconds := fs.Float64("seconds", bench.DefaultPktrateMeasure.Seconds(), "measured seconds of each run (after a warm-up)")
	out := fs.String("json", "", "also write the results part as JSON to this file")
	paths := fs.String("paths", "", "comma-separated paths to measure, by their names in the table (default: all; pktrate only)")
	flows := fs.String("flows", "", "comma-separated flow counts to measure each path with (default: 1,10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 || *seconds <= 0 {
		return errors.New("--rounds must be ≥ 1 and --seconds > 0")
	}
	var flowCounts []int
	for _, item := range splitList(*flows) {
		n, err := strconv.Atoi(item)
		if err != nil {
			return fmt.Errorf("--flows: %q is not a number", item)
		}
		flowCounts = append(flowCounts, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	part, err := run(ctx, bench.PktrateOptions{
		Prefix:  os.Getenv("MANIFOLD_LAB_PREFIX"),
		Rounds:  *rounds,
		Measure: time.Duration(*seconds * float64(time.Second)),
		Paths:   splitList(*paths),
		Flows:   flowCounts,
	})
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted (the lab is removed)")
	}
	if err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	return bench.WritePart(*out, part)
}

// transit: packets/s of transit traffic through one node, routed in XDP
// (node.forward_transit) or by the kernel, with few routes and with a full table.
func transit(args []string, w io.Writer) error {
	return rateLab(args, "transit", "rounds per route count; each measures both paths once", func(ctx context.Context, opts bench.PktrateOptions) (bench.Part, error) {
		fmt.Fprintf(w, "Transit forwarding through one node: XDP (node.forward_transit) and the kernel, 64-byte UDP, %d rounds of %.1f s runs per route count.\n\n", opts.Rounds, opts.Measure.Seconds())
		return bench.Transit(ctx, w, bench.TransitOptions{PktrateOptions: opts})
	})
}

// splitList splits a comma-separated flag value, leaving out empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
