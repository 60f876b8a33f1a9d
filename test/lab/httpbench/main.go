// Command httpbench measures HTTP requests/s and latency through manifold and through
// the load balancers it is compared with, on the lab's comparison topology (as root,
// after `make build`):
//
//	go run ./test/lab/httpbench -manifold bin/manifold -json bench/results/parts/http.json
//
// One client runs wrk against the same two backends directly, through manifold
// (DSR), through nftables DNAT, through HAProxy in TCP mode and through nginx stream.
// The load balancers all run at once, each on its own VIP (manifold on the LB node,
// the three others on a host without XDP; lab.NewLBComparison says why). Every round
// measures every mode once, within half a minute: because the machine is shared and
// noisy, figures are reported as ratios of the runs of the same round, min/median/max
// over the rounds. Targets are printed beside their measured ratio, never asserted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/bench"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

// wrk's load, as in the study the targets come from: two threads, 64 keep-alive
// connections. wrk runs closed-loop: each connection sends its next request when the
// previous response is in.
const (
	wrkThreads     = 2
	wrkConnections = 64
)

const (
	backends = 2
	// proxyWorkers is HAProxy's nbthread and nginx stream's worker_processes: one per
	// core of the study's 2-core machines, as HAProxy's default and nginx's
	// worker_processes auto would have them there.
	proxyWorkers = 2
	// settle is the pause between two wrk runs, for the previous run's connections
	// to close and its packets to drain.
	settle = 500 * time.Millisecond
)

func main() {
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary (make build)")
	jsonPath := flag.String("json", "", "also write the results to this file (a bench.Part)")
	rounds := flag.Int("rounds", 3, "rounds; each measures every mode once")
	duration := flag.Duration("duration", 5*time.Second, "length of one wrk run, whole seconds")
	warmup := flag.Duration("warmup", time.Second, "length of the unrecorded wrk run of each mode before the rounds, whole seconds; 0 for none")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{
		manifold: *manifold, jsonPath: *jsonPath, rounds: *rounds, duration: *duration, warmup: *warmup,
		prefix: envOr("MANIFOLD_LAB_PREFIX", "mfh"),
	}
	err := run(ctx, cfg)
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the lab has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\nhttpbench failed: %v\n", err)
		os.Exit(1)
	}
}

type config struct {
	manifold, jsonPath string
	rounds             int
	duration, warmup   time.Duration
	prefix             string
}

func run(ctx context.Context, cfg config) (err error) {
	if cfg.rounds < 1 {
		return fmt.Errorf("-rounds %d: at least 1", cfg.rounds)
	}
	for _, d := range []time.Duration{cfg.duration, cfg.warmup} {
		// wrk takes whole seconds
		if d%time.Second != 0 || d < 0 {
			return fmt.Errorf("duration %s: whole seconds only", d)
		}
	}
	if cfg.duration == 0 {
		return errors.New("-duration 0: at least 1s")
	}
	if err := lab.Preflight("httpbench", &cfg.manifold, hostprog.Wrk, hostprog.HAProxy, hostprog.Nginx, hostprog.Nft, hostprog.Ethtool, hostprog.IP); err != nil {
		return err
	}
	if _, err := lab.NginxStreamModule(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", cfg.prefix+"-")
	if err != nil {
		return err
	}
	began := time.Now()
	c, err := lab.NewLBComparison(lab.LBComparisonSpec{
		Prefix: cfg.prefix, Dir: dir, Manifold: cfg.manifold, Backends: backends, ProxyWorkers: proxyWorkers,
	})
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	defer func() {
		if err != nil && ctx.Err() == nil {
			saveState(c, dir)
		}
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
		if err == nil || ctx.Err() != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := c.WaitServing(15 * time.Second); err != nil {
		return err
	}
	script, err := directScript(dir, c)
	if err != nil {
		return err
	}
	b := &bencher{ctx: ctx, c: c, script: script}

	fmt.Printf("HTTP benchmark: wrk -t%d -c%d -d%s --latency, %d rounds, %d backends, %d CPUs\n",
		wrkThreads, wrkConnections, cfg.duration, cfg.rounds, backends, numCPU())
	if cfg.warmup > 0 {
		fmt.Printf("warm-up (%s each):", cfg.warmup)
		for _, m := range c.Modes {
			r, err := b.wrk(m, cfg.warmup)
			if err != nil {
				return err
			}
			fmt.Printf(" %s %s,", m.Name, kilo(r.RequestsPerSec))
		}
		fmt.Println()
	}
	results := map[string][]bench.WrkResult{}
	for round := range cfg.rounds {
		fmt.Printf("round %d/%d:", round+1, cfg.rounds)
		// start each round at another mode: none is always the one that runs first
		// after a pause, or right after the heaviest one
		for i := range c.Modes {
			m := c.Modes[(round+i)%len(c.Modes)]
			r, err := b.wrk(m, cfg.duration)
			if err != nil {
				return err
			}
			results[m.Name] = append(results[m.Name], r)
			fmt.Printf(" %s %s p99 %.2f ms,", m.Name, kilo(r.RequestsPerSec), r.P99Ms)
		}
		fmt.Println()
	}

	part := bench.Part{Name: "http", Method: method(cfg), Figures: figures(c.Modes, results)}
	fmt.Println()
	printReport(os.Stdout, part)
	fmt.Printf("(%s in all)\n", time.Since(began).Round(time.Second))
	if cfg.jsonPath != "" {
		if err := bench.WritePart(cfg.jsonPath, part); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", cfg.jsonPath)
	}
	return nil
}

// bencher runs wrk in the lab.
type bencher struct {
	ctx    context.Context
	c      *lab.LBComparison
	script string // the Lua script of direct runs
}

// wrk runs wrk from the client against mode m for d, after a pause to settle. It
// fails when wrk does, and when the mode served no request at all; errors of a run
// that served are left in the result for the figures' notes.
func (b *bencher) wrk(m lab.LBMode, d time.Duration) (bench.WrkResult, error) {
	select {
	case <-b.ctx.Done():
		return bench.WrkResult{}, b.ctx.Err()
	case <-time.After(settle):
	}
	args := []string{fmt.Sprintf("-t%d", wrkThreads), fmt.Sprintf("-c%d", wrkConnections),
		fmt.Sprintf("-d%ds", int(d/time.Second)), "--latency"}
	if m.Name == lab.ModeDirect {
		args = append(args, "-s", b.script)
	}
	args = append(args, lab.URL(m.Addrs[0], 80))
	// `ip netns exec` execs wrk: cancelling kills wrk itself
	out, err := hostprog.InNetns(b.ctx, b.c.Client.NS, hostprog.Wrk, args...).CombinedOutput()
	if b.ctx.Err() != nil {
		return bench.WrkResult{}, b.ctx.Err()
	}
	if err != nil {
		return bench.WrkResult{}, fmt.Errorf("%s: wrk %s: %w\n%s", m.Name, strings.Join(args, " "), err, out)
	}
	r, err := bench.ParseWrk(string(out))
	if err != nil {
		return r, fmt.Errorf("%s: %w", m.Name, err)
	}
	if r.Requests == 0 {
		return r, fmt.Errorf("%s served no request in %s (%s)", m.Name, d, or(r.Errors(), "and wrk reported no error"))
	}
	return r, nil
}

// directScript writes the Lua script of direct runs: wrk connects all its threads to
// the address of its URL, so the script gives thread i the address of backend i
// instead, and -c64 puts 32 connections on each, where the load balancers spread
// theirs by hash, at random or round robin. Defining only setup keeps wrk on its
// fast path: no Lua runs per request.
func directScript(dir string, c *lab.LBComparison) (string, error) {
	direct, ok := c.Mode(lab.ModeDirect)
	if !ok {
		return "", errors.New("the lab has no direct mode")
	}
	if len(direct.Addrs) != wrkThreads {
		// one thread per backend, or the split is no longer even
		return "", fmt.Errorf("direct: %d backends for %d wrk threads", len(direct.Addrs), wrkThreads)
	}
	var quoted []string
	for _, a := range direct.Addrs {
		quoted = append(quoted, fmt.Sprintf("%q", a))
	}
	script := fmt.Sprintf(`-- httpbench, direct: wrk thread i connects to backend i
local backends = { %s }
local n = 0
function setup(thread)
   n = n %% #backends + 1
   thread.addr = wrk.lookup(backends[n], "80")[1]
end
`, strings.Join(quoted, ", "))
	path := filepath.Join(dir, "direct.lua")
	return path, os.WriteFile(path, []byte(script), 0o644)
}

// saveState writes the state of every namespace and every process log to a file
// that outlives the lab.
func saveState(c *lab.LBComparison, dir string) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("%s-failure-%s.log", c.Prefix, time.Now().Format("20060102-150405")))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not save the lab state: %v\n", err)
		return
	}
	defer f.Close()
	if out, err := c.Proxy.Output(hostprog.Nft, "list", "ruleset"); err == nil {
		fmt.Fprintf(f, "===== proxy: nft list ruleset =====\n%s", out)
	}
	c.WriteState(f)
	fmt.Fprintf(os.Stderr, "\nThe state of the lab and every process log are in %s (configs in %s).\n", path, dir)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
