package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/bench"
)

// pktrate: packets/s through one node in a namespace lab, manifold next to the
// kernel's forwarding, nftables DNAT and minimal XDP forwarders.
func pktrate(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench pktrate", flag.ContinueOnError)
	rounds := fs.Int("rounds", bench.DefaultPktrateRounds, "rounds; each measures every path and flow count once")
	seconds := fs.Float64("seconds", bench.DefaultPktrateMeasure.Seconds(), "measured seconds of each run (after a warm-up)")
	out := fs.String("json", "", "also write the results part as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 || *seconds <= 0 {
		return errors.New("--rounds must be ≥ 1 and --seconds > 0")
	}
	// Ctrl-C ends the runs, and the lab is removed before the command returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := bench.PktrateOptions{
		Prefix:  os.Getenv("MANIFOLD_LAB_PREFIX"),
		Rounds:  *rounds,
		Measure: time.Duration(*seconds * float64(time.Second)),
	}
	fmt.Fprintf(w, "Packet rate through one node: generator → device under test → sink, 64-byte UDP, %d rounds of %.1f s runs.\n\n", *rounds, *seconds)
	part, _, err := bench.Pktrate(ctx, w, opts)
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
