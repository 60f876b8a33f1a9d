// Command fleetbench measures how fast a change of the fleet store reaches every node,
// in the lab (as root, after `make build`):
//
//	go run ./test/lab/fleetbench -manifold bin/manifold -json bench/results/parts/fleet.json
//
// Three LB nodes, each with an etcd member, take their services from the store.
// Propagation: a weight change written through one node's API (each node in turn),
// timed from the request to the moment every node's API shows the new weight, over
// -writes writes, with each of -sizes services in the store (issue 26: 1 000, 10 000,
// 100 000). Load: a node started on a store of 1 000 services, timed from the start of
// the process to its API serving the last of them, against the same start on a store
// of 2 services. Records: at each size, the size of each node's record in the store
// once it counts every service (bounded by wire.MaxRecordBytes). Numbers, never pass/fail: the goals (p99 propagation under 100 ms with
// 2 services, issue 12; under 50 ms at any size, issue 26) are reported met or not.
//
// "Before" is the same run with an older binary (-manifold), labelled with -label.
//
// Times are seen by polling each node's API every pollEvery: they err on the slow side
// by up to one poll.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	results "github.com/manifoldlb/manifold/bench"
	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

// prefix names the lab's namespaces; MANIFOLD_LAB_PREFIX gives a run names of its own,
// beside another run's (as the lab tests do)
var prefix = cmp.Or(os.Getenv("MANIFOLD_LAB_PREFIX"), "mffb")

// pollEvery is how often each node's API is asked (-poll). A node answers GET
// /api/v1/services/NAME from that service's status alone; the rate meter and the
// record still read every service's counters every second.
var pollEvery = 2 * time.Millisecond

// keep is where the lab's directory goes at the end (-keep); "" removes it.
var keep string

const (
	// the goal of issue 12 for the slowest 1 % of writes, with 2 services
	propagationGoal = 100 * time.Millisecond
	// the goal of issue 26 for the slowest 1 % of writes among 100 000 services
	scaleGoal    = 50 * time.Millisecond
	manyServices = 1000
)

var vip = netip.MustParseAddr("198.51.100.10")

func main() {
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary (make build)")
	jsonPath := flag.String("json", "", "also write the results to this file as JSON")
	writes := flag.Int("writes", 200, "weight changes timed at each store size")
	sizes := flag.String("sizes", "2,1000", "services in the store while the writes are timed, comma-separated (10000 and more: with -poll 20ms or slower, see docs/performance.md)")
	starts := flag.Int("starts", 3, "node starts timed on each store size (0: none)")
	label := flag.String("label", "", "a label for the figures' names, e.g. before (an older -manifold)")
	flag.DurationVar(&pollEvery, "poll", pollEvery, "how often each node's API is asked whether it applied a write")
	flag.StringVar(&keep, "keep", "", "move the lab's directory (the processes' logs) here at the end, for a look at where the time went")
	flag.Parse()

	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "-sizes %q: a list of positive counts\n", *sizes)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *manifold, *jsonPath, *label, *writes, ns, *starts)
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the lab has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\nfleetbench failed: %v\n", err)
		os.Exit(1)
	}
}

type bench struct {
	ctx      context.Context
	manifold string
	l        *lab.Lab
	etcd     *lab.Etcd
	lbs      []*lab.Host
	backends []*lab.Host
	nodes    map[string]*lab.Node
	apis     map[string]*lab.NodeAPI
	most     int // the largest store of the run, in services
}

func run(ctx context.Context, manifold, jsonPath, label string, writes int, sizes []int, starts int) (err error) {
	if writes < 1 || starts < 0 {
		return fmt.Errorf("-writes %d, -starts %d: at least 1 write", writes, starts)
	}
	if err := lab.Preflight("fleetbench", &manifold, hostprog.Ethtool, hostprog.IP, hostprog.Etcd); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return err
	}
	if keep == "" {
		defer os.RemoveAll(dir)
	} else {
		defer func() { _ = os.Rename(dir, keep) }()
	}
	began := time.Now()
	// the backends are addresses only: no traffic is sent, health checks are off
	l, err := lab.New(lab.Spec{Prefix: prefix, Dir: dir, Hosts: []lab.HostSpec{
		{Role: "lb1", Kind: lab.LBNode}, {Role: "lb2", Kind: lab.LBNode}, {Role: "lb3", Kind: lab.LBNode},
		{Role: "be1", Kind: lab.Backend}, {Role: "be2", Kind: lab.Backend},
	}})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && ctx.Err() == nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
	}()
	b := &bench{ctx: ctx, manifold: manifold, l: l, lbs: l.HostsOf(lab.LBNode), backends: l.HostsOf(lab.Backend), most: slices.Max(sizes),
		nodes: map[string]*lab.Node{}, apis: map[string]*lab.NodeAPI{}}
	if slices.Max(sizes) > 10*manyServices {
		// the seed is one transaction (`manifold fleet import`): 100 000 puts outlast
		// etcd's request timeout (5 s and two election timeouts) on a busy machine
		l.EtcdArgs = []string{"--heartbeat-interval", "500", "--election-timeout", "5000"}
	}
	if b.etcd, err = l.StartEtcd(b.lbs...); err != nil {
		return err
	}
	if err := b.seed(2); err != nil {
		return err
	}
	for _, h := range b.lbs {
		b.apis[h.Role] = lab.NewNodeAPI(h)
		if err := b.startNode(h); err != nil {
			return err
		}
	}
	fmt.Printf("fleet benchmark: 3 nodes, 3 etcd members (%s); %d writes at each of %v services, %d starts per store size\n",
		hostprog.Etcd.Name(), writes, sizes, starts)

	var figs []results.Figure
	for _, n := range sizes {
		if n != 2 {
			if err := b.seedAndWait(n); err != nil {
				return err
			}
		}
		applied, answered, err := b.propagation(writes)
		if err != nil {
			return err
		}
		sized := propagationFigures(label, n, applied, answered)
		if rec, ok := b.records(label, n); ok {
			sized = append(sized, rec)
		}
		printFigures(sized)
		figs = append(figs, sized...)
	}
	if starts > 0 {
		few, many, err := b.loads(starts)
		if err != nil {
			return err
		}
		figs = append(figs, loadFigures(label, few, many)...)
		printFigures(figs[len(figs)-2:])
	}
	fmt.Printf("(times err slow by up to one poll of %s; %s in all)\n", pollEvery, time.Since(began).Round(time.Second))
	if jsonPath != "" {
		if err := results.WritePart(jsonPath, results.Part{Name: "fleet", Method: method, Figures: figs}); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", jsonPath)
	}
	return nil
}

const method = "Fleet store in the lab (test/lab): three manifold nodes, each beside an etcd 3.4 member " +
	"(Debian's etcd-server) in its network namespace, the members reached through the lab's router. " +
	"Propagation: a backend's weight changed through one node's API (each node in turn), from " +
	"sending the request to every node's API showing the new weight (polled every -poll per node), " +
	"with 2 services in the store, and with each of -sizes seeded while the nodes run (beyond 1 000, " +
	"the default table size). " +
	"Load: a node started on a store of 1 000 services (table_size 1021 each) or of 2, from starting " +
	"the process to its API serving the last service, the other nodes stopped."

// seed replaces the store's services with n services on the two backends. Past
// manyServices they keep the default table size (a few hundred slots): 10 000 tables of
// 1021 would measure the kernel's memory, not the fleet.
func (b *bench) seed(n int) error {
	cfg := lab.NodeConfig{Name: "seed", Address: b.lbs[0].Addr4}
	for i := range n {
		s := lab.Service{Name: serviceName(i), VIP: vipOf(i), Port: uint16(10000 + i%50000), TableSize: 1021}
		if n > manyServices {
			s.TableSize = 0
		}
		for _, be := range b.backends {
			s.Backends = append(s.Backends, be.Addr4)
		}
		cfg.Services = append(cfg.Services, s)
	}
	return b.l.FleetImport(b.manifold, b.lbs[0], b.nodeConfig(b.lbs[0]), cfg, true)
}

func serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// vipOf spreads the services over VIPs, 50 000 ports each.
func vipOf(i int) netip.Addr {
	a := vip.As4()
	a[3] += byte(i / 50000)
	return netip.AddrFrom4(a)
}

// seedAndWait seeds the store with n services while the nodes run, and waits until
// every node serves the last of them.
func (b *bench) seedAndWait(n int) error {
	t0 := time.Now()
	if err := b.seed(n); err != nil {
		return err
	}
	last := "/api/v1/services/" + serviceName(n-1)
	seen, err := b.watch(5*time.Minute, func(a *lab.NodeAPI) error {
		code, _, err := a.Call("GET", last, "")
		if err == nil && code != 200 {
			err = fmt.Errorf("%s: GET %s: %d", a.Host.Role, last, code)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("seeding %d services: %w", n, err)
	}
	fmt.Printf("%d services seeded and applied on every node in %s\n", n, seen.Sub(t0).Round(time.Millisecond))
	return nil
}

// nodeConfig is a node's file: its own sections and the fleet's; its maps hold the
// largest store of the run (node.max_services past its default of 16 384).
func (b *bench) nodeConfig(h *lab.Host) lab.NodeConfig {
	c := lab.NodeConfig{Name: h.Role, Address: h.Addr4, Address6: h.Addr6, Fleet: &lab.Fleet{Endpoints: b.etcd.Endpoints()}}
	if b.most > config.DefaultMaxServices-16 {
		c.MaxServices = uint32(b.most + 16)
		c.MaxBackends = uint32(len(b.backends)*b.most + 16)
	}
	return c
}

func (b *bench) startNode(h *lab.Host) error {
	n, err := b.l.StartNode(b.manifold, h, b.nodeConfig(h))
	if err != nil {
		return err
	}
	b.nodes[h.Role] = n
	return nil
}

// propagation changes the weight of be1 in the first service writes times, through
// each node in turn, and returns for each write how long until every node served it
// and how long the API took to answer.
func (b *bench) propagation(writes int) (applied, answered []time.Duration, err error) {
	svc, be1 := serviceName(0), b.backends[0].Addr4
	path := "/api/v1/services/" + svc + "/backends/" + be1.String() + "/weight"
	fmt.Print("propagation:")
	defer fmt.Println()
	for i := range writes {
		if err := b.ctx.Err(); err != nil {
			return nil, nil, err
		}
		weight := uint32(2 + i) // a new value every time
		via := b.apis[b.lbs[i%len(b.lbs)].Role]
		t0 := time.Now()
		code, body, err := via.Call("POST", path, fmt.Sprintf(`{"weight": %d}`, weight))
		if err != nil {
			return nil, nil, err
		}
		if code != 200 {
			return nil, nil, fmt.Errorf("write %d through %s: %d %s", i, via.Host.Role, code, body)
		}
		answered = append(answered, time.Since(t0))
		seen, err := b.watch(5*time.Second, func(a *lab.NodeAPI) error {
			var s wire.ServiceStatus
			if err := a.Get("/api/v1/services/"+svc, &s); err != nil {
				return err
			}
			if bs, ok := s.Backend(be1.String()); !ok || bs.Weight != weight {
				return fmt.Errorf("%s: %s's weight is not %d yet", a.Host.Role, be1, weight)
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("write %d: %w", i, err)
		}
		applied = append(applied, seen.Sub(t0))
		if (i+1)%50 == 0 {
			fmt.Printf(" %d", i+1)
		}
	}
	return applied, answered, nil
}

// records waits until every node's record in the store counts the n services (it is
// written every second, and was not at all past a few thousand services before it was
// bounded), and returns the size of each node's last record as its status says it.
// false (and a line saying why) when the nodes do not publish such a record: an older
// binary's records have no totals.
func (b *bench) records(label string, n int) (results.Figure, bool) {
	var mu sync.Mutex
	size := map[string]float64{}
	_, err := b.watch(15*time.Second, func(a *lab.NodeAPI) error {
		var fl wire.FleetStatus
		if err := a.Get("/api/v1/fleet", &fl); err != nil {
			return err
		}
		i := slices.IndexFunc(fl.Nodes, func(r wire.FleetNode) bool { return r.Name == a.Host.Role })
		if i < 0 || fl.Nodes[i].Totals == nil || fl.Nodes[i].Totals.Services != n {
			return fmt.Errorf("%s: no record of its %d services in the store", a.Host.Role, n)
		}
		st, err := a.Status()
		if err != nil || st.Fleet == nil {
			return fmt.Errorf("%s: status: %v", a.Host.Role, err)
		}
		mu.Lock()
		size[a.Host.Role] = float64(st.Fleet.RecordBytes)
		mu.Unlock()
		return nil
	})
	if err != nil {
		fmt.Printf("  node records with %d services: %v\n", n, err)
		return results.Figure{}, false
	}
	name := fmt.Sprintf("a node's fleet record, %d services", n)
	if label != "" {
		name += " (" + label + ")"
	}
	var runs []float64
	for _, h := range b.lbs {
		runs = append(runs, size[h.Role])
	}
	f := results.NewFigure("fleet", name, "bytes", runs)
	f.Note = "one per node; every service as desired (health checks off, no BGP): counted, not listed"
	f.SetBound("<=", wire.MaxRecordBytes)
	return f, true
}

// watch polls cond for every running node, each on a goroutine of its own, until it
// holds on all of them, and returns when the last one was first seen to hold.
func (b *bench) watch(timeout time.Duration, cond func(*lab.NodeAPI) error) (time.Time, error) {
	var (
		mu   sync.Mutex
		last time.Time
		errs []error
		wg   sync.WaitGroup
	)
	deadline := time.Now().Add(timeout)
	for role := range b.nodes {
		a := b.apis[role]
		wg.Go(func() {
			for {
				err := cond(a)
				now := time.Now()
				if err == nil {
					mu.Lock()
					if now.After(last) {
						last = now
					}
					mu.Unlock()
					return
				}
				if now.After(deadline) || b.ctx.Err() != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("after %s: %w", timeout, err))
					mu.Unlock()
					return
				}
				time.Sleep(pollEvery)
			}
		})
	}
	wg.Wait()
	return last, errors.Join(errs...)
}

// loads stops every node but the last, then restarts the last node on a store of 2
// services and on one of manyServices, starts times each, and returns how long each
// start took to serve the store's last service.
func (b *bench) loads(starts int) (few, many []time.Duration, err error) {
	for _, h := range b.lbs[:len(b.lbs)-1] {
		if err := b.nodes[h.Role].Stop(); err != nil {
			return nil, nil, err
		}
		delete(b.nodes, h.Role)
	}
	subject := b.lbs[len(b.lbs)-1]
	fmt.Print("load at start:")
	defer fmt.Println()
	for range starts {
		for _, n := range []int{2, manyServices} {
			if err := b.ctx.Err(); err != nil {
				return nil, nil, err
			}
			if err := b.nodes[subject.Role].Stop(); err != nil {
				return nil, nil, err
			}
			if err := b.seed(n); err != nil {
				return nil, nil, err
			}
			d, err := b.timeStart(subject, n)
			if err != nil {
				return nil, nil, err
			}
			if n == manyServices {
				many = append(many, d)
			} else {
				few = append(few, d)
			}
			fmt.Printf(" %d services %s", n, d.Round(time.Millisecond))
		}
	}
	return few, many, nil
}

// timeStart starts `manifold run` on h and returns how long until its API serves the
// store's last service (a revision is applied whole: the last one there means all).
func (b *bench) timeStart(h *lab.Host, services int) (time.Duration, error) {
	t0 := time.Now()
	p, err := b.l.Start(h, fmt.Sprintf("manifold-%s-%d", h.Role, t0.UnixNano()), hostprog.Built(b.manifold),
		"run", "--config", b.nodes[h.Role].ConfigPath)
	if err != nil {
		return 0, err
	}
	b.nodes[h.Role] = &lab.Node{Process: p, ConfigPath: b.nodes[h.Role].ConfigPath}
	a := b.apis[h.Role]
	last := "/api/v1/services/" + serviceName(services-1)
	var seen time.Time
	err = p.WaitReady(60*time.Second, func() error {
		code, _, err := a.Call("GET", last, "")
		if err == nil && code != 200 {
			err = fmt.Errorf("GET %s: %d", last, code)
		}
		seen = time.Now()
		return err
	})
	if err != nil {
		return 0, err
	}
	st, err := a.Status()
	if err != nil {
		return 0, err
	}
	if len(st.Services) != services {
		return 0, fmt.Errorf("%s serves %d services, the store holds %d", h.Role, len(st.Services), services)
	}
	return seen.Sub(t0), nil
}

func printFigures(figs []results.Figure) {
	for _, f := range figs {
		fmt.Printf("  %-52s median %8.1f %s, min %8.1f, max %8.1f", f.Name, f.Value.Median, f.Metric, f.Value.Min, f.Value.Max)
		if f.Note != "" {
			fmt.Printf("  (%s)", f.Note)
		}
		if f.Bound != nil {
			fmt.Printf("   goal %s", f.BoundText())
		}
		fmt.Println()
	}
}

// propagationFigures are the figures of the writes timed with n services in the store.
func propagationFigures(label string, n int, applied, answered []time.Duration) []results.Figure {
	name := func(what string) string {
		what = fmt.Sprintf("%s, %d services", what, n)
		if label != "" {
			what += " (" + label + ")"
		}
		return what
	}
	prop := results.NewFigure("fleet", name("API write → applied on all 3 nodes"), "ms", results.Milliseconds(applied...))
	p50, p99 := results.Percentile(applied, 0.5), results.Percentile(applied, 0.99)
	prop.Note = fmt.Sprintf("p50 %.1f ms, p99 %.1f ms over %d writes", results.Milliseconds(p50)[0], results.Milliseconds(p99)[0], len(applied))
	tail := results.NewFigure("fleet", name("API write → applied on all 3 nodes, p99"), "p99 ms", results.Milliseconds(p99))
	goal := scaleGoal
	if n <= 2 {
		goal = propagationGoal
	}
	tail.SetBound("<=", results.Milliseconds(goal)[0])
	ans := results.NewFigure("fleet", name("API write answered (committed, applied by the node that took it)"), "ms", results.Milliseconds(answered...))
	return []results.Figure{prop, tail, ans}
}

func loadFigures(label string, few, many []time.Duration) []results.Figure {
	suffix := ""
	if label != "" {
		suffix = " (" + label + ")"
	}
	ref := results.NewFigure("fleet", "node start → serving 2 services from the store"+suffix, "ms", results.Milliseconds(few...))
	load := results.NewFigure("fleet", fmt.Sprintf("node start → serving %d services from the store", manyServices)+suffix, "ms", results.Milliseconds(many...))
	load.Compare(ref, "", 0)
	return []results.Figure{ref, load}
}
