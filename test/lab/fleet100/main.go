// Command fleet100 measures a fleet of many nodes on one etcd cluster, in the lab (as
// root, after `make build`):
//
//	go run ./test/lab/fleet100 -manifold bin/manifold -nodes 100 -services 10000 -json bench/results/parts/fleet100.json
//
// -nodes `manifold run` processes, each in a namespace of its own with XDP on its veth,
// take their services from one etcd cluster of three members (each in a namespace of
// its own), seeded with -services services. The workload of each node is fixed and
// light: table_size 1021, a flow table of 1024 entries, health checks off (kind none),
// no BGP. Measured (issue 28):
//   - propagation: a backend's weight changed through one node's API (each node in
//     turn), from sending the request to the last node applying the write's revision;
//   - node start → serving: one node of the running fleet restarted, from starting the
//     process to its XDP program attached with every service programmed;
//   - etcd's load: watch events, bytes, puts and revisions per second, the growth of
//     its database and its CPU, over the members, with the fleet idle (the nodes'
//     records and probes) and during the writes;
//   - the nodes' CPU: idle, and per write;
//   - memory: each node's RSS, PSS and BPF maps, and the total.
//
// When does a node apply, or start serving? Its own log says, with its own clock
// (nodelog.go says why that and not its API). Nodes are started -parallel at a time
// while the machine keeps -mem-floor available and the running nodes take less than
// -cpu-share of its cores doing nothing; past either the fleet stops growing and the
// figures are those of the largest fleet that fit.
//
// Numbers, never pass/fail: the goal (p99 ≤ 250 ms with 100 nodes and 10 000
// services) is reported met or not.
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
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	results "github.com/manifoldlb/manifold/bench"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

// prefix names the lab's namespaces; MANIFOLD_LAB_PREFIX gives a run names of its own.
var prefix = cmp.Or(os.Getenv("MANIFOLD_LAB_PREFIX"), "mff100")

const (
	// the goal of issue 28 for the slowest 1 % of writes
	propagationGoal = 250 * time.Millisecond
	// the light workload of every node
	tableSize     = 1021
	flowTableSize = 1024
	// node.max_services' default: the nodes keep it, and hold one service fewer
	maxServices = 16384
	// how often the bench reads the nodes' logs: the times are the nodes' own, so this
	// bounds only how long the bench takes to notice
	pollEvery = 20 * time.Millisecond
)

var vip = netip.MustParseAddr("198.51.100.10")

type options struct {
	manifold, jsonPath, keep string
	nodes, services          int
	writes, starts, parallel int
	idle                     time.Duration
	memFloor                 uint64
	cpuShare                 float64
}

func main() {
	var o options
	var floorMiB uint64
	flag.StringVar(&o.manifold, "manifold", "bin/manifold", "the manifold binary (make build)")
	flag.StringVar(&o.jsonPath, "json", "", "also write the results to this file as JSON")
	flag.IntVar(&o.nodes, "nodes", 100, "nodes in the fleet (at most 240)")
	flag.IntVar(&o.services, "services", 10000, "services in the store")
	flag.IntVar(&o.writes, "writes", 50, "weight changes timed")
	flag.IntVar(&o.starts, "starts", 3, "restarts of one node timed (0: none)")
	flag.IntVar(&o.parallel, "parallel", 4, "nodes started at once while the fleet is built")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "how long etcd's load is measured with the fleet idle")
	flag.Uint64Var(&floorMiB, "mem-floor", 4096, "MiB the machine must keep available (MemAvailable) for another node to start")
	flag.Float64Var(&o.cpuShare, "cpu-share", 0.6, "share of the machine's cores the running nodes may take doing nothing for another node to start")
	flag.StringVar(&o.keep, "keep", "", "move the lab's directory (the processes' logs) here at the end")
	flag.Parse()
	o.memFloor = floorMiB << 20

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, o)
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the lab has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\nfleet100 failed: %v\n", err)
		os.Exit(1)
	}
}

type bench struct {
	ctx      context.Context
	o        options
	l        *lab.Lab
	etcd     *lab.Etcd
	backends []netip.Addr
	nodes    []*node // running, in start order
}

// node is one `manifold run` of the fleet and its log.
type node struct {
	host   *lab.Host
	config string
	proc   *lab.Process
	log    *nodeLog
	api    *lab.NodeAPI
}

func run(ctx context.Context, o options) (err error) {
	switch {
	case o.nodes < 1 || o.nodes > 240:
		return fmt.Errorf("-nodes %d: 1 to 240", o.nodes)
	case o.services < 1 || o.services >= maxServices:
		return fmt.Errorf("-services %d: 1 to %d (node.max_services' default, plus one)", o.services, maxServices-1)
	case o.writes < 1 || o.starts < 0 || o.parallel < 1:
		return fmt.Errorf("-writes %d, -starts %d, -parallel %d: at least 1 write, 1 at a time", o.writes, o.starts, o.parallel)
	}
	if err := lab.Preflight("fleet100", &o.manifold, hostprog.Ethtool, hostprog.IP, hostprog.Etcd); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return err
	}
	if o.keep == "" {
		defer os.RemoveAll(dir)
	} else {
		defer func() { _ = os.Rename(dir, o.keep) }()
	}
	began := time.Now()
	spec := lab.Spec{Prefix: prefix, Dir: dir, Hosts: []lab.HostSpec{
		{Role: "etcd1", Kind: lab.Backend}, {Role: "etcd2", Kind: lab.Backend}, {Role: "etcd3", Kind: lab.Backend},
	}}
	for i := range o.nodes {
		spec.Hosts = append(spec.Hosts, lab.HostSpec{Role: fmt.Sprintf("n%03d", i+1), Kind: lab.LBNode})
	}
	l, err := lab.New(spec)
	if err != nil {
		return err
	}
	// the lab's Close stops every process and deletes every namespace, on any return
	defer func() {
		if cerr := l.Close(); cerr != nil && ctx.Err() == nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
	}()
	b := &bench{ctx: ctx, o: o, l: l,
		// the backends are addresses only: no traffic is sent, health checks are off
		backends: []netip.Addr{netip.MustParseAddr("10.250.0.1"), netip.MustParseAddr("10.250.0.2")}}
	if b.etcd, err = l.StartEtcd(l.Hosts[:3]...); err != nil {
		return err
	}
	fmt.Printf("fleet of %d nodes, 3 etcd members (%s), %d services (table_size %d, flow table %d, health none, no BGP); lab built in %s\n",
		o.nodes, hostprog.Etcd.Name(), o.services, tableSize, flowTableSize, time.Since(began).Round(time.Second))
	t0 := time.Now()
	if err := b.seed(); err != nil {
		return err
	}
	fmt.Printf("store seeded with %d services in %s\n", o.services, time.Since(t0).Round(time.Millisecond))

	built, bound, err := b.build(l.HostsOf(lab.LBNode))
	if err != nil {
		return err
	}
	if bound != "" {
		fmt.Printf("the fleet stopped growing at %d nodes: %s\n", len(b.nodes), bound)
	}
	n := len(b.nodes)
	fleetName := fmt.Sprintf("%d nodes, %d services", n, o.services)

	mem, err := b.memory()
	if err != nil {
		return err
	}
	memFigs := memoryFigures(fleetName, mem)
	printFigures(memFigs)
	var idleCPU time.Duration
	idle, err := b.etcdLoad(func() error {
		cpu0 := b.nodesCPU()
		err := results.SleepContext(ctx, o.idle)
		idleCPU = b.nodesCPU() - cpu0
		return err
	})
	if err != nil {
		return err
	}
	idleShare := idleCPU.Seconds() / idle.seconds / float64(n) // cores per node
	fmt.Printf("etcd, fleet idle: %s\nthe nodes, idle: %.1f %% of a core each, %.2f cores in all\n", idle, 100*idleShare, idleShare*float64(n))

	var applied, answered []time.Duration
	var nodesCPU time.Duration
	var writesFailed error
	writing, err := b.etcdLoad(func() error {
		cpu0 := b.nodesCPU()
		applied, answered, writesFailed = b.propagation()
		nodesCPU = b.nodesCPU() - cpu0
		return ctx.Err()
	})
	if err != nil {
		return err
	}
	if writesFailed != nil {
		// the figures of the writes made stand; the rest of the run goes on
		fmt.Printf("the writes stopped after %d of %d: %v\n", len(applied), o.writes, writesFailed)
		if len(applied) == 0 {
			return writesFailed
		}
	}
	fmt.Printf("etcd, during the writes: %s\n", writing)
	perWrite := nodesCPU / time.Duration(max(1, len(applied)))
	fmt.Printf("the nodes' CPU per write: %s in all, %s per node\n", perWrite.Round(time.Millisecond), (perWrite / time.Duration(n)).Round(100*time.Microsecond))

	var starts []time.Duration
	if o.starts > 0 {
		if starts, err = b.restarts(); err != nil {
			return err
		}
	}

	figs := propagationFigures(fleetName, n, applied, answered, writesFailed)
	figs = append(figs, cpuFigures(fleetName, n, perWrite, idleShare)...)
	figs = append(figs, startFigures(fleetName, built, starts)...)
	figs = append(figs, etcdFigures(fleetName, idle, writing, len(applied))...)
	figs = append(figs, memFigs...)
	fmt.Println()
	printFigures(figs)
	if bound != "" {
		fmt.Printf("(asked for %d nodes: %s)\n", o.nodes, bound)
	}
	fmt.Printf("(%s in all)\n", time.Since(began).Round(time.Second))
	if o.jsonPath != "" {
		m := method
		if bound != "" {
			m += fmt.Sprintf(" Asked for %d nodes, the fleet stopped at %d: %s.", o.nodes, n, bound)
		}
		if writesFailed != nil {
			m += fmt.Sprintf(" The writes stopped after %d of %d: %v.", len(applied), o.writes, writesFailed)
		}
		if err := results.WritePart(o.jsonPath, results.Part{Name: "fleet100", Method: m, Figures: figs}); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", o.jsonPath)
	}
	return nil
}

const method = "A fleet in the lab (test/lab/fleet100): N `manifold run` processes, each in a network " +
	"namespace of its own with native XDP on its veth, on one etcd 3.4 cluster of three members " +
	"(Debian's etcd-server, each in a namespace of its own), the store seeded with S services of two " +
	"backends each (table_size 1021, health none; nodes: flow_table_size 1024, no BGP). Times are the " +
	"nodes' own, from their logs: a revision applied is the fleet source's \"fleet revision applied\" " +
	"(after the reconciler took it), serving is \"node running\" (XDP attached, every service " +
	"programmed). Propagation: a backend's weight changed through one node's API (each node in turn), " +
	"one write at a time, from sending the request to the last node applying its revision. " +
	"Start: one node of the running fleet stopped and started again. etcd: counters of its members' " +
	"/metrics and their CPU from /proc, summed, over an idle window and over the writes. Memory: " +
	"VmRSS, Pss (smaps_rollup) and the memlock of the BPF maps each node holds."

// seed writes the store's services: S services on the two backends, each of table
// size 1021, spread over VIPs of 50 000 ports each.
func (b *bench) seed() error {
	cfg := lab.NodeConfig{Name: "seed", Address: b.l.Hosts[0].Addr4}
	for i := range b.o.services {
		cfg.Services = append(cfg.Services, lab.Service{Name: serviceName(i), VIP: vipOf(i),
			Port: uint16(10000 + i%50000), TableSize: tableSize, Backends: b.backends})
	}
	return b.l.FleetImport(b.o.manifold, b.l.Hosts[0], b.nodeConfig(b.l.Hosts[0]), cfg, true)
}

func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

func vipOf(i int) netip.Addr {
	a := vip.As4()
	a[3] += byte(i / 50000)
	return netip.AddrFrom4(a)
}

// nodeConfig is a node's file: its own sections, small maps, and the fleet's.
func (b *bench) nodeConfig(h *lab.Host) lab.NodeConfig {
	return lab.NodeConfig{Name: h.Role, Address: h.Addr4, FlowTableSize: flowTableSize, Fleet: &lab.Fleet{Endpoints: b.etcd.Endpoints()}}
}

// build starts a node on each of hosts, parallel at a time, each batch once the
// previous one serves; it stops early (bound says why) when the machine has less than
// the memory floor available. It returns how long each start took to serve.
func (b *bench) build(hosts []*lab.Host) (starts []time.Duration, bound string, err error) {
	t0 := time.Now()
	fmt.Print("starting the nodes:")
	defer fmt.Println()
	for i := 0; i < len(hosts); i += b.o.parallel {
		avail, err := memAvailable()
		if err != nil {
			return nil, "", err
		}
		if avail < b.o.memFloor {
			return starts, fmt.Sprintf("memory: %d MiB available, under the floor of %d MiB (-mem-floor)", avail>>20, b.o.memFloor>>20), nil
		}
		if len(b.nodes) > 0 {
			// the nodes' own work with nothing to do, which grows with their services:
			// past most of the machine's cores they starve, and a starved node stalls,
			// goes stale and reads the whole store again, which starves them more
			busy, err := b.idleCores()
			if err != nil {
				return nil, "", err
			}
			if limit := b.o.cpuShare * float64(runtime.NumCPU()); busy > limit {
				return starts, fmt.Sprintf("cores: the %d nodes take %.2f of the %d cores doing nothing, over the bound of %.2f (-cpu-share)",
					len(b.nodes), busy, runtime.NumCPU(), limit), nil
			}
		}
		batch := hosts[i:min(i+b.o.parallel, len(hosts))]
		var started []*node
		for _, h := range batch {
			n, err := b.start(h)
			if err != nil {
				return nil, "", err
			}
			started = append(started, n)
		}
		for _, n := range started {
			d, err := b.waitServing(n)
			if err != nil {
				return nil, "", err
			}
			starts = append(starts, d)
			b.nodes = append(b.nodes, n)
		}
		if len(b.nodes)%10 == 0 || len(b.nodes) == len(hosts) {
			fmt.Printf(" %d (%s)", len(b.nodes), time.Since(t0).Round(time.Second))
		}
	}
	return starts, "", nil
}

// start writes h's config and starts `manifold run` there, with a log of its own.
func (b *bench) start(h *lab.Host) (*node, error) {
	n := &node{host: h, config: filepath.Join(b.l.Dir, "manifold-"+h.Role+".yaml"), api: lab.NewNodeAPITimeout(h, 30*time.Second)}
	if err := os.WriteFile(n.config, b.nodeConfig(h).YAML(), 0o644); err != nil {
		return nil, err
	}
	p, err := b.l.Start(h, fmt.Sprintf("manifold-%s-%d", h.Role, time.Now().UnixNano()), hostprog.Built(b.o.manifold),
		"run", "--config", n.config)
	if err != nil {
		return nil, err
	}
	n.proc, n.log = p, newNodeLog(p.LogPath)
	return n, nil
}

// waitServing waits for the node's "node running" and returns how long after its
// process started that came; the node must serve every service of the store.
func (b *bench) waitServing(n *node) (time.Duration, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if err := n.log.poll(); err != nil {
			return 0, err
		}
		if r := n.log.running; r != nil {
			if r.services != b.o.services {
				return 0, fmt.Errorf("%s runs with %d services, the store holds %d", n.host.Role, r.services, b.o.services)
			}
			return r.at.Sub(n.proc.Started()), nil
		}
		if !n.proc.Running() {
			return 0, fmt.Errorf("%s exited before it ran:\n%s", n.host.Role, n.proc.LogTail(20))
		}
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			return 0, fmt.Errorf("%s: not running after 3 minutes:\n%s", n.host.Role, n.proc.LogTail(20))
		}
		if err := results.SleepContext(b.ctx, pollEvery); err != nil {
			return 0, err
		}
	}
}

// propagation changes be1's weight in the first service o.writes times, through each
// node in turn, one write at a time, and returns for each how long until the last
// node applied it and how long the API took to answer (the node that took it applied
// it by then).
func (b *bench) propagation() (applied, answered []time.Duration, err error) {
	path := "/api/v1/services/" + serviceName(0) + "/backends/" + b.backends[0].String() + "/weight"
	fmt.Print("propagation:")
	defer fmt.Println()
	for i := range b.o.writes {
		if err := b.ctx.Err(); err != nil {
			return applied, answered, err
		}
		via := b.nodes[i%len(b.nodes)]
		if err := via.log.poll(); err != nil {
			return applied, answered, err
		}
		known := len(via.log.changed)
		t0 := time.Now()
		code, body, err := via.api.Call("POST", path, fmt.Sprintf(`{"weight": %d}`, 2+i%60000))
		if err != nil {
			return applied, answered, err
		}
		if code != 200 {
			return applied, answered, fmt.Errorf("write %d through %s: %d %s", i, via.host.Role, code, body)
		}
		took := time.Since(t0)
		if err := via.log.poll(); err != nil {
			return applied, answered, err
		}
		if len(via.log.changed) != known+1 {
			return applied, answered, fmt.Errorf("write %d through %s: its log has %d new writes, not one", i, via.host.Role, len(via.log.changed)-known)
		}
		last, err := b.allApplied(via.log.changed[known].revision, time.Minute)
		if err != nil {
			return applied, answered, fmt.Errorf("write %d: %w", i, err)
		}
		answered, applied = append(answered, took), append(applied, last.Sub(t0))
		if (i+1)%10 == 0 {
			fmt.Printf(" %d", i+1)
		}
	}
	return applied, answered, nil
}

// allApplied waits until every node applied revision rev and returns when the last
// one did, by its own clock.
func (b *bench) allApplied(rev int64, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	pending := slices.Clone(b.nodes)
	var last time.Time
	for {
		left := pending[:0]
		for _, n := range pending {
			if err := n.log.poll(); err != nil {
				return last, err
			}
			if n.log.failed != nil {
				return last, n.log.failed
			}
			at, ok := n.log.appliedAt(rev)
			if !ok {
				left = append(left, n)
				continue
			}
			if at.After(last) {
				last = at
			}
		}
		pending = left
		if len(pending) == 0 {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("after %s, %d nodes have not applied revision %d (%s: at %d)",
				timeout, len(pending), rev, pending[0].host.Role, pending[0].log.lastApplied().revision)
		}
		if err := results.SleepContext(b.ctx, pollEvery); err != nil {
			return last, err
		}
	}
}

// restarts stops the fleet's last node and starts it again o.starts times, and
// returns how long each start took to serve the store's services, the rest of the
// fleet running.
func (b *bench) restarts() ([]time.Duration, error) {
	fmt.Print("node start → serving:")
	defer fmt.Println()
	var out []time.Duration
	for range b.o.starts {
		i := len(b.nodes) - 1
		// stopped either way: killed when it did not stop in time (a starved node)
		if err := b.nodes[i].proc.Stop(); err != nil && b.nodes[i].proc.Running() {
			return nil, err
		}
		n, err := b.start(b.nodes[i].host)
		if err != nil {
			return nil, err
		}
		b.nodes[i] = n
		d, err := b.waitServing(n)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
		fmt.Printf(" %s", d.Round(time.Millisecond))
	}
	return out, nil
}

// etcdLoad samples etcd around during and returns what it did meanwhile.
func (b *bench) etcdLoad(during func() error) (etcdLoad, error) {
	a, err := sampleEtcd(b.etcd)
	if err != nil {
		return etcdLoad{}, err
	}
	if err := during(); err != nil {
		return etcdLoad{}, err
	}
	z, err := sampleEtcd(b.etcd)
	if err != nil {
		return etcdLoad{}, err
	}
	return loadBetween(a, z), nil
}

// idleCores is the cores the running nodes take over a second with nothing to do.
func (b *bench) idleCores() (float64, error) {
	t0, cpu0 := time.Now(), b.nodesCPU()
	if err := results.SleepContext(b.ctx, time.Second); err != nil {
		return 0, err
	}
	return (b.nodesCPU() - cpu0).Seconds() / time.Since(t0).Seconds(), nil
}

// nodesCPU is the CPU time the running nodes have used.
func (b *bench) nodesCPU() time.Duration {
	var sum time.Duration
	for _, n := range b.nodes {
		sum += results.ProcessCPU(n.proc.Pid())
	}
	return sum
}

// memory reads each running node's memory.
func (b *bench) memory() ([]memory, error) {
	var out []memory
	for _, n := range b.nodes {
		m, err := memoryOf(n.proc.Pid())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.host.Role, err)
		}
		out = append(out, m)
	}
	return out, nil
}
