package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/manifoldlb/manifold/bench"
)

func benchCmd(args []string, w io.Writer) error {
	if len(args) == 0 || args[0] != "dataplane" {
		return errors.New("usage: manifold bench dataplane [--calls N] [--flood SYNS] [--json FILE]")
	}
	fs := flag.NewFlagSet("bench dataplane", flag.ContinueOnError)
	calls := fs.Int("calls", 100000, "program runs per case (each with repeat = 1)")
	syns := fs.Int("flood", 1000000, "spoofed SYNs of the flood-resistance run (0: skip it)")
	out := fs.String("json", "", "also write the samples as JSON to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	fmt.Fprintf(w, "Data plane per-packet cost: BPF_PROG_TEST_RUN, repeat = 1 per call, %d calls per case, median.\n\n", *calls)
	samples, err := bench.Dataplane(w, *calls)
	if err != nil {
		return err
	}
	results := map[string]any{"dataplane": samples}
	if *syns > 0 {
		fmt.Fprintf(w, "\nEstablished flows (idle during the flood, their backends drained) that keep their backend through %d spoofed SYNs:\n\n", *syns)
		flood, err := bench.Flood(w, 10000, *syns)
		if err != nil {
			return err
		}
		results["flood"] = flood
	}
	if *out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}
