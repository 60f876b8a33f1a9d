package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/manifoldlb/manifold/bench"
)

const benchUsage = `usage: manifold bench dataplane [--calls N] [--flood SYNS] [--json FILE]
       manifold bench pktrate [--rounds N] [--seconds S] [--json FILE]
       manifold bench controlplane [--runs N] [--json FILE]
       manifold bench report [--out DIR] [--commit REV] PART.json...`

func benchCmd(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New(benchUsage)
	}
	switch args[0] {
	case "dataplane":
		return benchDataplane(args, w)
	case "pktrate":
		return benchPktrate(args, w)
	case "controlplane":
		return benchControlplane(args, w)
	case "report":
		return benchReport(args, w)
	}
	return errors.New(benchUsage)
}

func benchDataplane(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("bench dataplane", flag.ContinueOnError)
	calls := fs.Int("calls", 100000, "program runs per case and run (each with repeat = 1)")
	runs := fs.Int("runs", 5, "runs; figures are min/median/max over them")
	syns := fs.Int("flood", 1000000, "spoofed SYNs of the flood-resistance run (0: skip it)")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *calls < 1 || *runs < 1 {
		return errors.New("bench dataplane: --calls and --runs must be at least 1")
	}
	fmt.Fprintf(w, "Data plane per-packet cost: BPF_PROG_TEST_RUN, repeat = 1 per call, median of %d calls per case and run, %d runs.\n\n", *calls, *runs)
	part, err := bench.Dataplane(w, *calls, *runs)
	if err != nil {
		return err
	}
	if *syns > 0 {
		fmt.Fprintf(w, "\nEstablished flows (idle during the flood, their backends drained) that keep their backend through %d spoofed SYNs:\n\n", *syns)
		flood, err := bench.Flood(w, 10000, *syns)
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

func benchControlplane(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("bench controlplane", flag.ContinueOnError)
	runs := fs.Int("runs", 3, "runs; figures are min/median/max over them")
	out := fs.String("json", "", "also write the figures as JSON to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *runs < 1 {
		return errors.New("bench controlplane: --runs must be at least 1")
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

// benchReport merges the parts written by the benchmarks into latest.json and
// latest.md.
func benchReport(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("bench report", flag.ContinueOnError)
	out := fs.String("out", "bench/results", "directory of latest.json and latest.md")
	commit := fs.String("commit", "", "revision the figures were measured at")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("bench report: name the part files to merge")
	}
	r := bench.Report{Generated: time.Now(), Machine: bench.ThisMachine(*commit)}
	for _, path := range fs.Args() {
		p, err := bench.ReadPart(path)
		if err != nil {
			return fmt.Errorf("bench report: %w", err)
		}
		r.Parts = append(r.Parts, p)
	}
	if err := bench.WriteReport(*out, r); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s and %s\n", filepath.Join(*out, "latest.json"), filepath.Join(*out, "latest.md"))
	return nil
}
