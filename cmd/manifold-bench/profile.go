package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/manifoldlb/manifold/bench"
)

// profile: a perf profile of a live path, its samples inside a loaded program by
// source line (docs/performance.md, "Where the time goes"). While the path runs:
//
//	perf record -C 1 -e cpu-clock -o p.data -- sleep 3
//	perf script -i p.data -F ip,sym | manifold-bench profile --prog manifold_lb
//
// The program must still be loaded when profile runs: it reads the JIT line table.
func profile(args []string, in io.Reader, w io.Writer) error {
	fs := flag.NewFlagSet("manifold-bench profile", flag.ContinueOnError)
	prog := fs.String("prog", "manifold_lb", "the loaded program whose samples go by source line (its name as bpftool lists it)")
	top := fs.Int("top", 40, "rows to print")
	if err := fs.Parse(args); err != nil {
		return err
	}
	img, err := bench.LoadedJITImage(*prog)
	if err != nil {
		return err
	}
	rows, share, err := bench.ProfileLines(img, in)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %.1f %% of the samples\n\n", *prog, 100*share)
	for i, r := range rows {
		if i == *top {
			break
		}
		fmt.Fprintf(w, "%6.2f %%  %7d  %s\n", 100*r.Share, r.Samples, r.Place)
	}
	return nil
}
