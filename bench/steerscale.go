package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/fleet"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/steer"
	"github.com/manifoldlb/manifold/internal/store"
)

// Steering at internet scale (`manifold-bench steerscale`): one round of the steering
// controller for 1 000 sites × 100 origins × 10 services, simulated (the control law
// alone) and live (a real etcd holding 2 000 node records: read, decide, write), the
// keys and bytes a live round writes, and the scale scenario's summary.

// SteerScaleMethod says how the figures were measured.
const SteerScaleMethod = "Steering at scale (manifold-bench steerscale). Simulated: steer.Manifold.Decide over every service of a " +
	"steer.World (sites and origins at random places on the Earth, RTT from the distance over fibre, log-normal demand, capacity " +
	"1.25× the demand), from the shares of a fleet without demand, GOMAXPROCS=1; a round's CPU time is the process's (getrusage), " +
	"its wall time counts the waits for a core on a shared machine. Live: one etcd member on loopback (Debian's etcd-server), the " +
	"10 services imported, 2 000 node records (2 nodes a site, each carrying the 10 services: demand, and per origin, or per " +
	"backend as the release before's nodes wrote them, load, health and RTT; one backend an origin), alive under a lease; the real " +
	"controller (fleet.Controller, leading, its default interval of 1 s) keeps them from its watch and runs its rounds, each " +
	"reporting its cost (read: taking its view; decide; write; the records its view decoded since the round before; the CPU time " +
	"of the controller's process and of etcd over the interval up to the round's end). Writes and bytes: the keys and values a " +
	"round put, once nothing changed, and in the first round after one site's demand of one service rose by half (both its " +
	"nodes' records; the shares settle before the next change), whose round refreshes the decisions due too; rounds that write only " +
	"decisions due for their refresh (at most one service of the ten a round) apart. Jitter: every rate and RTT of every record " +
	"drawn each second within ±1 % of its steady value, published at full precision (every record changes) and through the nodes' " +
	"deadbands (fleet.HoldSteady): the records written, and the records the controller decoded until its view held them. " +
	"Scenario: bench/steer/scale/world1000.yaml simulated with manifold's controller and the seed's baseline."

// steerWorld is the fleet every figure is measured on.
var steerWorld = steer.World{Sites: 1000, Origins: 100, Seed: 1}

const (
	steerServices = 10
	steerGoalMs   = 200
	// liveInterval is the live controller's round interval: the default
	liveInterval = config.DefaultSteerInterval
)

// SteerScale measures it all: runs simulated rounds of each size, liveRuns live rounds
// of each kind (each of a few live rounds takes the live interval); scenario is the
// scale scenario's file.
func SteerScale(w io.Writer, runs, liveRuns int, scenario string) (Part, error) {
	part := Part{Name: "steerscale", Method: SteerScaleMethod}
	if _, err := hostprog.Etcd.Path(); err != nil {
		return part, err // before anything is measured
	}
	fmt.Fprintf(w, "Steering at scale: one round of %d sites × %d origins × %d services, %d runs.\n\n", steerWorld.Sites, steerWorld.Origins, steerServices, runs)
	part.Figures = append(part.Figures, simulatedRounds(w, runs)...)
	live, err := liveRounds(w, liveRuns)
	if err != nil {
		return part, fmt.Errorf("live: %w", err)
	}
	part.Figures = append(part.Figures, live...)
	figs, err := scaleScenario(w, scenario)
	if err != nil {
		return part, fmt.Errorf("scenario: %w", err)
	}
	part.Figures = append(part.Figures, figs...)
	return part, nil
}

// simulatedRounds times the control law alone at three sizes, on one core.
func simulatedRounds(w io.Writer, runs int) []Figure {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var figs []Figure
	for _, size := range []struct{ sites, origins, services int }{{100, 50, 1}, {1000, 100, 1}, {steerWorld.Sites, steerWorld.Origins, steerServices}} {
		world := steer.World{Sites: size.sites, Origins: size.origins, Seed: steerWorld.Seed}
		obs := world.Observations(size.services)
		current := make([]steer.Shares, len(obs))
		for i, o := range obs {
			current[i] = steer.Manifold{}.Decide(time.Time{}, idle(o), nil).Shares()
		}
		var wall, cpu []float64
		for run := range runs + 1 {
			runtime.GC()
			began, cpuBefore := time.Now(), cpuSpent()
			for i, o := range obs {
				steer.Manifold{}.Decide(time.Time{}, o, current[i])
			}
			if run > 0 { // the first warms the heap up
				cpu = append(cpu, ms(cpuSpent()-cpuBefore))
				wall = append(wall, ms(time.Since(began)))
			}
		}
		name := fmt.Sprintf("simulated round, %d sites × %d origins × %d services", size.sites, size.origins, size.services)
		c := NewFigure("steering", name+", CPU", "ms", cpu)
		wl := NewFigure("steering", name+", wall", "ms", wall)
		wl.Note = "on a shared machine: the waits for a core count"
		if size.services == steerServices {
			c.SetBound("<=", steerGoalMs)
		}
		fmt.Fprintf(w, "  %-72s CPU %8.1f ms   wall %8.1f ms (median)\n", name, c.Value.Median, wl.Value.Median)
		figs = append(figs, c, wl)
	}
	return figs
}

// idle is obs without demand: where a fleet's shares start.
func idle(obs steer.Observation) steer.Observation {
	out := obs
	out.Sites = make([]steer.Site, len(obs.Sites))
	for i, s := range obs.Sites {
		s.Demand = 0
		out.Sites[i] = s
	}
	return out
}

// cpuSpent is processCPU for a figure: 0 when getrusage fails (it does not on Linux).
func cpuSpent() time.Duration {
	d, _ := processCPU()
	return d
}

// steerPrefix is the fleet's prefix in the bench's etcd.
const steerPrefix = "/steerscale"

// liveRounds runs the real controller on a real etcd holding the world's records, in
// each format: this release's nodes, then the release before's.
func liveRounds(w io.Writer, runs int) ([]Figure, error) {
	var figs []Figure
	for _, format := range []recordFormat{perOrigin, perBackend} {
		f, err := liveRoundsOf(w, runs, format)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", format, err)
		}
		figs = append(figs, f...)
	}
	return figs, nil
}

// liveRoundsOf measures the live rounds on records of one format, on an etcd of their
// own.
func liveRoundsOf(w io.Writer, runs int, format recordFormat) ([]Figure, error) {
	endpoint, etcdPID, stop, err := startEtcd()
	if err != nil {
		return nil, err
	}
	defer stop()
	cli, err := fleet.Dial(config.Fleet{Endpoints: []string{endpoint}})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	obs := steerWorld.Observations(steerServices)
	var docs []store.ServiceDoc
	specs := make([]wire.ServiceSpec, len(obs))
	for k, o := range obs {
		docs = append(docs, store.ServiceDoc{Name: serviceName(k), YAML: serviceYAML(k, o)})
		specs[k] = serviceSpec(k, o)
	}
	if err := fleet.Import(ctx, cli, steerPrefix, docs, false); err != nil {
		return nil, err
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	var recordBytes int
	for i := range steerWorld.Sites {
		for n := range 2 {
			size, err := putNodeRecord(ctx, cli, lease.ID, obs, specs, format, i, n, -1)
			if err != nil {
				return nil, err
			}
			recordBytes += size
		}
	}
	fmt.Fprintf(w, "\n  live, %v: %d node records, %.0f MB (%.0f kB each), written in %v\n", format, 2*steerWorld.Sites, float64(recordBytes)/1e6,
		float64(recordBytes)/float64(2*steerWorld.Sites)/1e3, time.Since(began).Round(time.Millisecond))

	// the controller's default interval: a round a second
	ctl := fleet.NewController(cli, steerPrefix, "bench", liveInterval, 10*liveInterval, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	done := make(chan error, 1)
	loadCPU, loadEtcd, loadBegan := cpuSpent(), processCPUOf(etcdPID), time.Now()
	go func() { done <- ctl.Run(ctx) }() // stopped by cancel, waited for below
	defer func() { cancel(); <-done }()

	// next waits for the first round that read the store at or after revision rev.
	// The CPU time this process (the controller; the bench only polls) and etcd used
	// since the round before is the round's: the view's decoding of what changed is in it.
	var cpu, etcd time.Duration
	next := func(rev int64) (liveRound, error) {
		deadline := time.Now().Add(10*liveInterval + 5*time.Minute)
		seen := ctl.Rounds()
		for time.Now().Before(deadline) {
			if n := ctl.Rounds(); n != seen {
				seen = n
				r := liveRound{RoundStats: ctl.LastRound(), cpu: cpuSpent() - cpu, etcdCPU: processCPUOf(etcdPID) - etcd}
				cpu, etcd = cpu+r.cpu, etcd+r.etcdCPU
				if r.Revision >= rev {
					return r, nil
				}
			}
			time.Sleep(5 * time.Millisecond) // a bench polls: its CPU is in the figures, a little
		}
		return liveRound{}, errors.New("no round within the deadline")
	}
	first, err := next(0)
	if err != nil {
		return nil, err
	}
	if first.Records != 2*steerWorld.Sites || first.Services != steerServices {
		return nil, fmt.Errorf("the first round read %d records and decided %d services, want %d and %d", first.Records, first.Services, 2*steerWorld.Sites, steerServices)
	}
	// the view's first read of the fleet and the first round: CPU up to the first round's end
	fmt.Fprintf(w, "  the controller's first read of the fleet and its first round: %v wall, CPU: controller %v, etcd %v; %d keys, %.1f MB written\n",
		time.Since(loadBegan).Round(time.Millisecond), first.cpu-loadCPU, first.etcdCPU-loadEtcd, first.Writes, float64(first.Bytes)/1e6)
	var mem runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem)
	fmt.Fprintf(w, "  the controller's heap with the fleet decoded: %.0f MB (the bench's own world in it)\n", float64(mem.HeapAlloc)/1e6)
	heap := NewFigure("steering", fmt.Sprintf("live, %v: the controller's heap with the fleet decoded", format), "MB", []float64{float64(mem.HeapAlloc) / 1e6})
	firstLoad := NewFigure("steering", fmt.Sprintf("live, %v: the controller's first read of the fleet and first round, the controller's CPU", format), "ms",
		[]float64{ms(first.cpu - loadCPU)})

	// rounds with nothing changed: those that write nothing, and those that write only
	// the decisions due for a refresh (a few a round, once they have spread), counted
	// apart
	var quiet, refresh, changed []liveRound
	for settled, n := false, 0; len(quiet) < runs && n < 40 || len(refresh) < runs; n++ {
		st, err := next(0)
		if err != nil {
			return nil, err
		}
		switch {
		case st.Writes == 0:
			settled = true
			quiet = append(quiet, st)
		case settled && st.Writes == st.Refreshed:
			refresh = append(refresh, st)
		case n > 30:
			return nil, errors.New("the shares still move after 30 rounds of unchanged records")
		}
	}
	for run := range runs {
		// one site's demand of one service rises by half (both its nodes' records): the
		// round measured decides what the change moved, and refreshes what is due (one
		// service of the ten a round, once the refreshes have spread). One that wrote
		// another service's change too is measured again with another change (up to 5
		// times).
		var st liveRound
		for try := range 5 {
			site, service := 17*(5*run+try+1)%steerWorld.Sites, run%steerServices
			for n := range 2 {
				if _, err := putNodeRecord(ctx, cli, lease.ID, obs, specs, format, site, n, service); err != nil {
					return nil, err
				}
			}
			resp, err := cli.Get(ctx, "rev")
			if err != nil {
				return nil, err
			}
			if st, err = next(resp.Header.Revision); err != nil {
				return nil, err
			}
			// let the shares settle before the next change (the gap halves every round)
			for settle, moving := 0, st; moving.Writes > moving.Refreshed; settle++ {
				if settle == 30 {
					return nil, errors.New("the shares still move 30 rounds after a change")
				}
				if moving, err = next(0); err != nil {
					return nil, err
				}
			}
			if st.Writes-st.Refreshed == 1 {
				break
			}
		}
		changed = append(changed, st)
	}
	var jitter []Figure
	if format == perOrigin {
		if jitter, err = jitterSeconds(w, ctx, cli, lease.ID, obs, specs, next); err != nil {
			return nil, err
		}
	}

	figs := append([]Figure{firstLoad, heap}, jitter...)
	total := func(st liveRound) float64 { return ms(st.Read + st.Decide + st.Write) }
	for _, set := range []struct {
		what   string
		rounds []liveRound
	}{{"nothing changed", quiet}, {"one site's demand of one service changed", changed}, {"nothing changed, decisions due refreshed", refresh}} {
		if len(set.rounds) == 0 {
			continue
		}
		var all, read, decide, write, writes, bytes, cpu, etcd, decoded, settled, refreshed []float64
		for _, st := range set.rounds {
			cpu, etcd, decoded = append(cpu, ms(st.cpu)), append(etcd, ms(st.etcdCPU)), append(decoded, float64(st.Decoded))
			settled, refreshed = append(settled, float64(st.Settled)), append(refreshed, float64(st.Refreshed))
			all, read, decide = append(all, total(st)), append(read, ms(st.Read)), append(decide, ms(st.Decide))
			write, writes, bytes = append(write, ms(st.Write)), append(writes, float64(st.Writes)), append(bytes, float64(st.Bytes)/1e3)
		}
		name := fmt.Sprintf("live round, %v, %s", format, set.what)
		f := NewFigure("steering", name, "ms", all)
		f.Note = "read + decide + write, wall time on a shared machine; etcd on the same two cores"
		c := NewFigure("steering", name+", the controller's CPU", "ms", cpu)
		c.Note = "the controller's process over the interval up to the round's end: its view's decoding of what changed is in it"
		if format == perOrigin {
			f.SetBound("<=", steerGoalMs)
			c.SetBound("<=", steerGoalMs)
		}
		figs = append(figs, f, c,
			NewFigure("steering", name+", etcd's CPU", "ms", etcd),
			NewFigure("steering", name+": read (the view)", "ms", read),
			NewFigure("steering", name+": records decoded", "records", decoded),
			NewFigure("steering", name+": decide", "ms", decide),
			NewFigure("steering", name+": services left as they were (settled)", "services", settled),
			NewFigure("steering", name+": decisions refreshed", "services", refreshed),
			NewFigure("steering", name+": write", "ms", write),
			NewFigure("steering", name+": keys written", "keys", writes),
			NewFigure("steering", name+": bytes written", "kB", bytes))
		fmt.Fprintf(w, "  %-45s %8.1f ms (read %.1f, decide %.1f, write %.1f; CPU: controller %.0f ms (max %.0f), etcd %.0f ms), %.0f records decoded, %.0f services settled, %.0f refreshed, %.0f keys, %.0f kB written (medians of %d)\n",
			set.what, Summary(all).Median, Summary(read).Median, Summary(decide).Median, Summary(write).Median, Summary(cpu).Median, Summary(cpu).Max, Summary(etcd).Median,
			Summary(decoded).Median, Summary(settled).Median, Summary(refreshed).Median, Summary(writes).Median, Summary(bytes).Median, len(set.rounds))
	}
	return figs, nil
}

// liveRound is a live round's cost as the controller tells it, and the CPU time of the
// controller's process and of etcd over it.
type liveRound struct {
	fleet.RoundStats
	cpu, etcdCPU time.Duration
}

// processCPUOf is the CPU time process pid has used (0 if it cannot be read).
func processCPUOf(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// the fields after the command's closing parenthesis; utime and stime are the 14th
	// and 15th of the line, in clock ticks (100 a second)
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func serviceName(k int) string { return fmt.Sprintf("svc%02d", k) }

// backendAddress is the one backend of origin j (every service has the same).
func backendAddress(j int) string { return fmt.Sprintf("10.%d.%d.1", 1+j/250, j%250) }

// serviceYAML is service k of the world: its origins at their capacities, one backend
// each.
func serviceYAML(k int, obs steer.Observation) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nvip: 198.51.100.%d\nport: 80\norigins:\n", serviceName(k), 10+k)
	for _, o := range obs.Origins {
		fmt.Fprintf(&b, "  - {name: %s, capacity: %d}\n", o.Name, int(math.Round(o.Capacity)))
	}
	b.WriteString("backends:\n")
	for j, o := range obs.Origins {
		fmt.Fprintf(&b, "  - {address: %s, origin: %s}\n", backendAddress(j), o.Name)
	}
	return []byte(b.String())
}

// recordFormat is how the bench's nodes list a steered service in their records.
type recordFormat int

const (
	// perOrigin: one entry per origin, as a node of this release (fleet.RecordServices)
	perOrigin recordFormat = iota
	// perBackend: one entry per backend, as a node of the release before
	perBackend
)

func (f recordFormat) String() string {
	return map[recordFormat]string{perOrigin: "records by origin (this release's nodes)", perBackend: "records by backend (the release before's nodes)"}[f]
}

// serviceSpec is service k of the world as a node's status carries it: what the node
// folds its backends by.
func serviceSpec(k int, obs steer.Observation) wire.ServiceSpec {
	spec := wire.ServiceSpec{Name: serviceName(k)}
	for j, o := range obs.Origins {
		spec.Origins = append(spec.Origins, wire.OriginSpec{Name: o.Name, Capacity: uint32(math.Round(o.Capacity))})
		spec.Backends = append(spec.Backends, wire.BackendSpec{Address: backendAddress(j), Weight: 1, Origin: o.Name})
	}
	return spec
}

// putNodeRecord publishes node n of site i as a node does (nodeRecord).
func putNodeRecord(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, obs []steer.Observation, specs []wire.ServiceSpec, format recordFormat, i, n, raised int) (int, error) {
	data, err := json.Marshal(nodeRecord(obs, specs, format, i, n, raised))
	if err != nil {
		return 0, err
	}
	return len(data), putRecordData(ctx, cli, lease, nodeName(obs, i, n), data)
}

func nodeName(obs []steer.Observation, i, n int) string {
	return fmt.Sprintf("%s-n%d", obs[0].Sites[i].Name, n)
}

// putRecordData writes a node's record and its alive key.
func putRecordData(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, name string, data []byte) error {
	recordKey, aliveKey := fleet.NodeKeys(steerPrefix, name)
	_, err := cli.Txn(ctx).Then(clientv3.OpPut(recordKey, string(data)), clientv3.OpPut(aliveKey, "", clientv3.WithLease(lease))).Commit()
	return err
}

// nodeRecord is node n of site i's record: its demand of every service half the
// site's (of service raised, times 1.5), its RTT to each backend the site's to the
// backend's origin.
func nodeRecord(obs []steer.Observation, specs []wire.ServiceSpec, format recordFormat, i, n, raised int) wire.NodeRecord {
	site := obs[0].Sites[i]
	name := nodeName(obs, i, n)
	rec := wire.NodeRecord{V: wire.RecordVersion, Name: name, Site: site.Name, Addresses: []string{fmt.Sprintf("192.0.%d.%d", i/250, i%250)},
		UpdatedAt: time.Now().UTC().Format(time.RFC3339)}
	statuses := make([]wire.ServiceStatus, len(obs))
	rtts := map[string]map[string]float64{} // by service, by backend
	for k, o := range obs {
		s := o.Sites[i]
		factor := 1.0
		if k == raised {
			factor = 1.5
		}
		statuses[k] = wire.ServiceStatus{Name: serviceName(k), Announced: true, NewFlowsPerSecond: s.Demand / 2 * factor, Spec: specs[k]}
		byBackend := map[string]float64{}
		for j, origin := range o.Origins {
			statuses[k].Backends = append(statuses[k].Backends, wire.BackendStatus{Address: backendAddress(j), Weight: 1, State: wire.BackendUp,
				Health: wire.BackendHealth{Up: true}, NewFlowsPerSecond: 1, PacketsPerSecond: 10, BytesPerSecond: 5000})
			byBackend[backendAddress(j)] = ms(s.RTT[origin.Name])
		}
		rtts[serviceName(k)] = byBackend
	}
	rtt := func(service, backend string) float64 { return rtts[service][backend] }
	switch format {
	case perOrigin:
		var totals wire.RecordTotals
		rec.Services, totals = fleet.RecordServices(statuses, rtt, nil)
		rec.Totals = &totals
	case perBackend:
		for _, st := range statuses {
			l := wire.ServiceLoad{Name: st.Name, Announced: st.Announced, NewFlowsPerSecond: st.NewFlowsPerSecond}
			for _, b := range st.Backends {
				l.Backends = append(l.Backends, wire.BackendLoad{Address: b.Address, State: b.State, Healthy: b.Health.Up,
					NewFlowsPerSecond: b.NewFlowsPerSecond, PacketsPerSecond: b.PacketsPerSecond, BytesPerSecond: b.BytesPerSecond,
					RTTMilliseconds: rtt(st.Name, b.Address)})
			}
			rec.Services = append(rec.Services, l)
		}
	}
	return rec
}

// jitterPct is how much the jittered records' rates and RTTs move each second: each
// value is its steady one times a factor drawn in [1 - jitterPct %, 1 + jitterPct %].
const jitterPct = 1.0

// jitterSeconds measures what seconds of records whose every rate and RTT jitters
// around a steady state (jitterPct) cost the controller: published at full precision
// (every record changes: one second, whose 2 000 writes take several on this etcd),
// then through the nodes' deadbands (fleet.HoldSteady; three seconds). Each second:
// the records written, and over the rounds until the controller's view holds them,
// the records it decoded, its decoding time and the process's CPU (the controller's,
// and the bench's etcd client sending the records: they are marshalled before).
func jitterSeconds(w io.Writer, ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, obs []steer.Observation, specs []wire.ServiceSpec,
	next func(rev int64) (liveRound, error)) ([]Figure, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	type node struct {
		name      string
		base      wire.NodeRecord
		published []wire.ServiceLoad
		data      []byte
	}
	nodes := make([]node, 0, 2*steerWorld.Sites)
	for i := range steerWorld.Sites {
		for n := range 2 {
			rec := nodeRecord(obs, specs, perOrigin, i, n, -1)
			data, err := json.Marshal(rec)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, node{name: rec.Name, base: rec, published: rec.Services, data: data})
		}
	}
	jf := func() float64 { return 1 + jitterPct/100*(2*rng.Float64()-1) }
	var figs []Figure
	for _, second := range []struct {
		what string
		held bool
	}{{"full precision", false}, {"deadband, 1st second", true}, {"deadband, 2nd second", true}, {"deadband, 3rd second", true}} {
		// the second's records, marshalled before they are written
		var names []string
		var datas [][]byte
		for k := range nodes {
			nd := &nodes[k]
			rec := nd.base
			rec.Services = slices.Clone(rec.Services)
			for s := range rec.Services {
				l := &rec.Services[s]
				l.NewFlowsPerSecond *= jf()
				l.Origins = slices.Clone(l.Origins)
				for o := range l.Origins {
					l.Origins[o].NewFlowsPerSecond *= jf()
					l.Origins[o].RTTMilliseconds *= jf()
				}
			}
			if second.held {
				fleet.HoldSteady(nd.published, rec.Services)
			}
			data, err := json.Marshal(rec)
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(data, nd.data) {
				nd.data, nd.published = data, rec.Services
				names, datas = append(names, nd.name), append(datas, data)
			}
		}
		if _, err := next(0); err != nil { // the count of decoded records starts here
			return nil, err
		}
		cpuBefore := cpuSpent()
		wrote := make(chan error, 1)
		var lastRev atomic.Int64
		go func() { // written while the rounds below are counted; waited for below
			for k := range names {
				if err := putRecordData(ctx, cli, lease, names[k], datas[k]); err != nil {
					wrote <- err
					return
				}
			}
			resp, err := cli.Get(ctx, "rev")
			if err == nil {
				lastRev.Store(resp.Header.Revision)
			}
			wrote <- err
		}()
		var decoded int
		var decoding time.Duration
		rounds, done := 0, false
		for {
			r, err := next(0)
			if err != nil {
				return nil, err
			}
			rounds++
			decoded, decoding = decoded+r.Decoded, decoding+r.Decoding
			if !done {
				select {
				case err := <-wrote:
					if err != nil {
						return nil, err
					}
					done = true
				default:
				}
			}
			if done && r.Revision >= lastRev.Load() {
				break
			}
		}
		cpu := cpuSpent() - cpuBefore
		fmt.Fprintf(w, "  a second of records jittering ±%.0f %%, %-22s %4d records written, %4d decoded by the controller over %d rounds: decoding %v, the process's CPU %v\n",
			jitterPct, second.what+":", len(names), decoded, rounds, decoding.Round(time.Millisecond), cpu.Round(time.Millisecond))
		name := fmt.Sprintf("live, records jittering ±%.0f %% a second, %s", jitterPct, second.what)
		figs = append(figs,
			NewFigure("steering", name+": records written", "records", []float64{float64(len(names))}),
			NewFigure("steering", name+": records decoded by the controller", "records", []float64{float64(decoded)}),
			NewFigure("steering", name+": the controller's decoding", "ms", []float64{ms(decoding)}),
			NewFigure("steering", name+": the process's CPU (controller and the bench's writes)", "ms", []float64{ms(cpu)}))
	}
	return figs, nil
}

// startEtcd starts one etcd member on loopback in a temporary directory.
func startEtcd() (endpoint string, pid int, stop func(), err error) {
	dir, err := os.MkdirTemp("", "steerscale-etcd")
	if err != nil {
		return "", 0, nil, err
	}
	client, peer := "http://"+freeLoopback(), "http://"+freeLoopback()
	cmd := hostprog.Command(hostprog.Etcd, "--name", "m0", "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m0="+peer,
		"--quota-backend-bytes", fmt.Sprint(8<<30), "--logger", "zap", "--log-level", "error")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", 0, nil, fmt.Errorf("start etcd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reaps etcd; stop waits for it
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
		os.RemoveAll(dir)
	}
	if err := waitEtcd(client, exited); err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("%w\n%s", err, out.String())
	}
	return client, cmd.Process.Pid, stop, nil
}

// waitEtcd waits until etcd answers a read, or exits.
func waitEtcd(endpoint string, exited <-chan struct{}) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "ready")
		cancel()
		select {
		case <-exited:
			return errors.New("etcd exited")
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd at %s does not answer: %w", endpoint, err)
		}
	}
}

// freeLoopback is a free TCP address on loopback.
func freeLoopback() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scaleScenario simulates the scale scenario with both controllers, summaries only.
func scaleScenario(w io.Writer, path string) ([]Figure, error) {
	sc, err := steer.LoadScenario(path)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "\n  scenario %s: %d sites × %d origins, %s in steps of %s\n", sc.Name, len(sc.Sites), len(sc.Origins), sc.Duration, sc.Step)
	var figs []Figure
	for _, ctl := range []steer.Controller{steer.Manifold{}, steer.NewSeed()} {
		began := time.Now()
		s := steer.Simulate(sc, ctl).Summary
		fmt.Fprintf(w, "  %-9s converged %.0f s, excess %.0f flows, max overload %.1f %%, %d oscillations, mean RTT %.1f ms, served %.1f %% (%v)\n",
			ctl.Name(), s.ConvergedS, s.ExcessFlows, s.MaxOverloadPct, s.Oscillations, s.MeanRTTMs, s.ServedPct, time.Since(began).Round(time.Second))
		name := fmt.Sprintf("%s: %s", sc.Name, ctl.Name())
		for _, f := range []struct {
			what, metric string
			v            float64
		}{
			{"converged", "s", s.ConvergedS}, {"excess flows", "flows", s.ExcessFlows}, {"max overload", "%", s.MaxOverloadPct},
			{"oscillations", "reversals", float64(s.Oscillations)}, {"mean RTT", "ms", s.MeanRTTMs}, {"served", "%", s.ServedPct},
		} {
			figs = append(figs, NewFigure("steering", name+", "+f.what, f.metric, []float64{f.v}))
		}
	}
	return figs, nil
}
