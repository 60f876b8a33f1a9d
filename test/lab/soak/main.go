// Command soak is the chaos soak (`make soak ROUNDS=1000 SEED=n`), in the lab, as root,
// after `make build`:
//
//	go run ./test/lab/soak -manifold bin/manifold -rounds 1000 [-seed N] -out bench/results
//
// A fleet of three nodes behind FRR (BFD on), three etcd members, three backends with
// agents; 200 long-lived connections and a steady stream of new ones; a fault every
// round, drawn from the seed (printed first, so that a failure can be replayed). It
// writes soak.md and soak.json to -out and exits 1 when a goal is missed: a long-lived
// connection broken whose node and backend survived, an acknowledged write lost, a
// surviving manifold process grown past the bounds (test/lab/soak.go says which).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

// prefix names the soak's namespaces; MANIFOLD_LAB_PREFIX gives a run its own, as it
// does the lab tests', so that two runs on one machine do not tear down each other's.
var prefix = cmp.Or(os.Getenv("MANIFOLD_LAB_PREFIX"), "mfsk")

func main() {
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary (make build)")
	rounds := flag.Int("rounds", 1000, "rounds, one fault each")
	seed := flag.Uint64("seed", 0, "the seed of the faults (0: from the clock)")
	conns := flag.Int("conns", 200, "long-lived connections")
	out := flag.String("out", "bench/results", "where soak.md and soak.json go")
	commit := flag.String("commit", "", "the commit measured, for the report")
	flag.Parse()
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	fmt.Printf("soak: seed %d, %d rounds (replay: make soak SEED=%d ROUNDS=%d)\n", *seed, *rounds, *seed, *rounds)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failures, err := run(ctx, *manifold, *out, *commit, lab.SoakSpec{Rounds: *rounds, Seed: *seed, Conns: *conns})
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the lab has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\nsoak failed to run (seed %d): %v\n", *seed, err)
		os.Exit(1)
	case len(failures) > 0:
		fmt.Fprintf(os.Stderr, "\nsoak missed its goals (seed %d):\n", *seed)
		for _, f := range failures {
			fmt.Fprintln(os.Stderr, "  "+f)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, manifold, out, commit string, spec lab.SoakSpec) (failures []string, err error) {
	if spec.Rounds < 1 || spec.Conns < 2 {
		return nil, fmt.Errorf("-rounds %d, -conns %d: at least 1 round and 2 connections", spec.Rounds, spec.Conns)
	}
	if err := lab.Preflight("soak", &manifold, hostprog.Ethtool, hostprog.IP, hostprog.Etcd, hostprog.Nginx, hostprog.Curl); err != nil {
		return nil, err
	}
	if err := lab.CheckFRR(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	topo := lab.SoakTopology()
	topo.Prefix, topo.Dir, topo.Manifold = prefix, dir, manifold
	a, err := lab.NewActiveActive(topo)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := a.Close(); cerr != nil && ctx.Err() == nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
	}()
	spec.Logf = func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	r, err := lab.RunSoak(ctx, a, spec)
	if err != nil {
		return nil, err
	}
	md := r.Markdown()
	fmt.Println("\n" + md)
	head := fmt.Sprintf("# Chaos soak\n\n`make soak ROUNDS=%d SEED=%d` on %s, commit %s; docs/security.md (\"Chaos soak\") says what counts.\n\n",
		spec.Rounds, spec.Seed, time.Now().UTC().Format("2006-01-02"), commit)
	if err := os.WriteFile(filepath.Join(out, "soak.md"), []byte(head+md), 0o644); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "soak.json"), append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	return r.Failures(), nil
}
