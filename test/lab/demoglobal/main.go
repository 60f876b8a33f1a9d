// Command demoglobal shows the global accelerator on one machine (`make demo-global`,
// as root, after `make build`): the world of TestWorld (test/lab/world.go) — three
// regions with their routers, sites and clients, a core, a fleet on etcd steered by two
// controllers, one service over two routed origins and one behind NAT reached by
// tunnel — and its acts, each with a one-line verdict. It tears everything down at the
// end, on Ctrl-C or on failure (then keeping the logs).
//
// While it runs it samples lb-ams1's shares and the origins' loads, and each region's
// latency to web; at the end bench/world_plot.py draws them (PNG, matplotlib).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

const prefix = "mfglobal"

// the generators' rates, new connections per second from each region's client
const webRate = 20

func main() {
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary (make build)")
	out := flag.String("out", "bin/demo-global", "where the plots (and their data) go")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *manifold, *out)
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the world has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("Done.")
}

func run(ctx context.Context, manifold, out string) (err error) {
	if err := lab.Preflight("the global demo", &manifold, hostprog.Nginx, hostprog.Ethtool, hostprog.IP, hostprog.Bird,
		hostprog.Birdc, hostprog.Curl, hostprog.Etcd, hostprog.Nft); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Println("manifold global demo — anycast sites in three regions, steering over routed and tunnelled origins, in network namespaces")

	step(1, "Build the world", "three regions (ams, nyc, sin), each a router (BIRD, BFD), a client and a site of two nodes; a core; etcd in every region; two controllers; web over origins eu, us (routed) and home (behind NAT, by tunnel, 30 ms from every site).")
	w, err := lab.NewWorld(lab.WorldSpec{Prefix: prefix, Dir: dir, Manifold: manifold, BFD: lab.WorldBFD,
		Capacity: lab.WorldCapacity, SteerInterval: 500 * time.Millisecond, SteerLease: 2 * time.Second})
	if err != nil {
		fmt.Fprintf(os.Stderr, "the logs are in %s\n", dir)
		return err
	}
	defer func() {
		if err != nil && ctx.Err() == nil {
			path := filepath.Join(dir, "state.log")
			if f, ferr := os.Create(path); ferr == nil {
				w.WriteState(f)
				f.Close()
			}
			fmt.Fprintf(os.Stderr, "\nThe state of the world and every process log are in %s.\n", dir)
		}
		fmt.Printf("\nTearing down: stopping every process and deleting the %s-* namespaces.\n", prefix)
		if cerr := w.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
		if err == nil || ctx.Err() != nil {
			os.RemoveAll(dir)
		}
	}()
	fmt.Printf("  up in %v\n", time.Since(start).Round(time.Millisecond))

	step(2, "Look at the routers", "each region's router routes the VIPs over its own two nodes (ECMP); the core has every site's route.")
	for _, r := range lab.WorldRegions {
		showRoute(w.Host("r-" + r))
	}
	showRoute(w.Router)

	loads := w.StartLoads(webRate)
	defer loads.Stop()
	rec := startRecorder(w)
	defer rec.stop()
	acts := []struct {
		title, explanation string
		act                func(lab.Logf) (lab.Problems, error)
		after              func()
	}{
		{"Steady state", fmt.Sprintf("every region offers %d new connections/s to web: each goes to its closest origin (ams eu, nyc us, sin home), home's nginx logs the clients' addresses from the PROXY header.", webRate),
			func(l lab.Logf) (lab.Problems, error) { return w.SteadyState(l, loads) }, func() { ctlSteering(w, manifold) }},
		{"A surge in ams", "ams offers 5 % more than eu takes: the excess spills to home, the next closest, and no origin goes over its capacity.",
			func(l lab.Logf) (lab.Problems, error) { return w.Surge(l, loads, webRate) }, func() { ctlSteering(w, manifold) }},
		{"eu fails", "its backend stops: every node gives it nothing within 3 s; ams's flows go to home, through the tunnels.",
			func(l lab.Logf) (lab.Problems, error) { return w.OriginFails(l, "eu") }, nil},
		{"sin's site freezes", "both its nodes stop (SIGSTOP): BFD withdraws them, sin's clients reach another site through the core.",
			func(l lab.Logf) (lab.Problems, error) { return w.SiteFrozen(l, "sin") }, nil},
		{"An etcd member dies", "the one of the leading controller's region: a controller keeps deciding, the nodes keep forwarding.",
			func(l lab.Logf) (lab.Problems, error) { return w.EtcdMemberKilled(l, loads) }, nil},
	}
	for i, a := range acts {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		step(i+3, a.title, a.explanation)
		rec.mark(a.title)
		// the act runs aside, so that Ctrl-C tears the world down at once, not after it
		type result struct {
			problems lab.Problems
			err      error
		}
		done := make(chan result, 1)
		go func() {
			p, err := a.act(func(format string, args ...any) { fmt.Printf("  "+format+"\n", args...) })
			done <- result{p, err}
		}()
		var r result
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r = <-done:
		}
		problems, err := r.problems, r.err
		if err != nil {
			return err
		}
		if len(problems) == 0 {
			fmt.Printf("  ✔ %s: every bound held\n", a.title)
		} else {
			fmt.Printf("  ✘ %s: %s\n", a.title, strings.Join(problems, "; "))
		}
		if a.after != nil {
			a.after()
		}
	}
	fmt.Printf("\nThe world ran for %v.\n", time.Since(start).Round(time.Second))
	rec.stop()
	return plot(rec, out)
}

// plot writes the recording to out/world.json and has bench/world_plot.py draw it.
func plot(rec *recorder, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	data := filepath.Join(out, "world.json")
	b, err := json.Marshal(rec.series)
	if err != nil {
		return err
	}
	if err := os.WriteFile(data, b, 0o644); err != nil {
		return err
	}
	cmd := hostprog.Command(hostprog.Python3, "bench/world_plot.py", data, out)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench/world_plot.py (python3-matplotlib, make deps): %w", err)
	}
	fmt.Printf("\nPlots: %s (shares and origin loads), %s (each region's latency to web); data %s\n",
		filepath.Join(out, "world-shares.png"), filepath.Join(out, "world-latency.png"), data)
	return nil
}

// series is what the recorder sampled, times in seconds since its start.
type series struct {
	Acts    []act     `json:"acts"`
	Shares  []share   `json:"shares"`
	Loads   []load    `json:"loads"`
	Latency []latency `json:"latency"`
}

type act struct {
	T     float64 `json:"t"`
	Title string  `json:"title"`
}

type share struct {
	T       float64 `json:"t"`
	Service string  `json:"service"`
	Site    string  `json:"site"`
	Origin  string  `json:"origin"`
	Share   float64 `json:"share"`
}

type load struct {
	T        float64 `json:"t"`
	Service  string  `json:"service"`
	Origin   string  `json:"origin"`
	Load     float64 `json:"load"`
	Capacity float64 `json:"capacity"`
}

// latency is one request's time to answer, -1 when it failed.
type latency struct {
	T      float64 `json:"t"`
	Region string  `json:"region"`
	MS     float64 `json:"ms"`
}

// recorder samples the shares lb-ams1 applies, the origins' loads in the decision,
// and every region's latency to web (a request on a new connection), every 250 ms.
type recorder struct {
	start  time.Time
	mu     sync.Mutex
	series series
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

const sampleEvery = 250 * time.Millisecond

func startRecorder(w *lab.World) *recorder {
	r := &recorder{start: time.Now(), done: make(chan struct{})}
	api := w.API["lb-ams1"]
	r.every(func(t float64) {
		st, err := api.Steering()
		if err != nil {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, svc := range st.Services {
			for site, m := range svc.Shares {
				for origin, sh := range m {
					r.series.Shares = append(r.series.Shares, share{t, svc.Service, site, origin, sh})
				}
			}
			for _, o := range svc.Decision.Origins {
				r.series.Loads = append(r.series.Loads, load{t, svc.Service, o.Origin, o.Load, o.Capacity})
			}
		}
	})
	for _, region := range lab.WorldRegions {
		ns := w.Clients[region].NS
		r.every(func(t float64) {
			began := time.Now()
			ms := -1.0
			if _, err := lab.HTTPGet(ns, lab.URL(lab.WorldWebVIP, 80), 0); err == nil {
				ms = float64(time.Since(began).Microseconds()) / 1000
			}
			r.mu.Lock()
			r.series.Latency = append(r.series.Latency, latency{t, region, ms})
			r.mu.Unlock()
		})
	}
	return r
}

// every runs sample every sampleEvery until the recorder stops.
func (r *recorder) every(sample func(t float64)) {
	r.wg.Go(func() {
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-r.done:
				return
			case now := <-tick.C:
				sample(now.Sub(r.start).Seconds())
			}
		}
	})
}

// mark records the start of an act.
func (r *recorder) mark(title string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.series.Acts = append(r.series.Acts, act{time.Since(r.start).Seconds(), title})
}

func (r *recorder) stop() {
	r.once.Do(func() { close(r.done) })
	r.wg.Wait()
}

func step(n int, title, explanation string) {
	fmt.Printf("\n%d. %s\n   %s\n", n, title, explanation)
}

// showRoute prints the host's route to web's VIP, as `ip route` gives it.
func showRoute(h *lab.Host) {
	vip := lab.WorldWebVIP.String() + "/32"
	out, err := h.Output(hostprog.IP, "route", "show", vip)
	printCommand(h, "ip route show "+vip, out, err)
}

// ctlSteering prints `manifold ctl steering` on lb-ams1: the shares it applies and why.
func ctlSteering(w *lab.World, manifold string) {
	h := w.Host("lb-ams1")
	out, err := h.Output(hostprog.Built(manifold), "ctl", "steering")
	printCommand(h, "manifold ctl steering", out, err)
}

// printCommand prints a command run on h and its output, indented.
func printCommand(h *lab.Host, command, out string, err error) {
	fmt.Printf("\n  %s$ %s\n", h.Role, command)
	if err != nil {
		fmt.Printf("    (%v)\n", err)
	}
	fmt.Print("    " + strings.ReplaceAll(strings.TrimRight(out, "\n"), "\n", "\n    ") + "\n")
}
