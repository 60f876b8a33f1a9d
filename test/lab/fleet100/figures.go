package main

import (
	"fmt"
	"strings"
	"time"

	results "github.com/manifoldlb/manifold/bench"
)

// The figures of one run, each named after the fleet measured ("100 nodes, 10000
// services"): a fleet that stopped short of -nodes says so in its name.

func propagationFigures(fleet string, n int, applied, answered []time.Duration, stopped error) []results.Figure {
	p50, p99 := results.Percentile(applied, 0.5), results.Percentile(applied, 0.99)
	prop := results.NewFigure("fleet", fmt.Sprintf("API write → applied on all %d nodes, %s", n, fleet), "ms", results.Milliseconds(applied...))
	prop.Note = fmt.Sprintf("p50 %.1f ms, p99 %.1f ms over %d writes, one at a time", results.Milliseconds(p50)[0], results.Milliseconds(p99)[0], len(applied))
	if stopped != nil {
		prop.Note += fmt.Sprintf("; the writes stopped there: %v", stopped)
	}
	tail := results.NewFigure("fleet", fmt.Sprintf("API write → applied on all %d nodes, p99, %s", n, fleet), "p99 ms", results.Milliseconds(p99))
	tail.SetBound("<=", results.Milliseconds(propagationGoal)[0])
	// the reference of the same run: the write applied by the node that took it
	ans := results.NewFigure("fleet", "API write answered (committed, applied by the node that took it), "+fleet, "ms", results.Milliseconds(answered...))
	prop.Compare(ans, "", 0)
	return []results.Figure{prop, tail, ans}
}

// cpuFigures are the CPU the nodes spent on a write, per node (with every node on one
// machine, all of it is spent before the last node has applied), and what each spends
// with nothing to do: the share of the cores that the fleet's size leaves the writes.
func cpuFigures(fleet string, n int, perWrite time.Duration, idleShare float64) []results.Figure {
	w := results.NewFigure("fleet", "nodes' CPU per write, per node, "+fleet, "ms", results.Milliseconds(perWrite/time.Duration(n)))
	w.Note = fmt.Sprintf("%.0f ms of CPU per write for the %d nodes together, idle work included (utime+stime from /proc, over the writes)", results.Milliseconds(perWrite)[0], n)
	idle := results.NewFigure("fleet", "a node's CPU with the fleet idle, "+fleet, "% of a core", []float64{round1(100 * idleShare)})
	idle.Note = fmt.Sprintf("%.2f cores for the %d nodes together", idleShare*float64(n), n)
	return []results.Figure{w, idle}
}

// startFigures are the restarts of one node in the running fleet, and the starts of
// every node as the fleet was built (a few at a time, on a loaded machine).
func startFigures(fleet string, built, starts []time.Duration) []results.Figure {
	var figs []results.Figure
	if len(starts) > 0 {
		f := results.NewFigure("fleet", "node start → serving every service, the rest of the fleet running, "+fleet, "ms", results.Milliseconds(starts...))
		f.Note = "one node stopped and started again; to XDP attached with every service programmed"
		figs = append(figs, f)
	}
	if len(built) > 0 {
		f := results.NewFigure("fleet", "node start → serving, while the fleet was built, "+fleet, "ms", results.Milliseconds(built...))
		f.Note = fmt.Sprintf("every node of the fleet, -parallel at a time; p50 %.0f ms", results.Milliseconds(results.Percentile(built, 0.5))[0])
		figs = append(figs, f)
	}
	return figs
}

// etcdFigures are the cluster's load, idle and during the writes; each during-figure
// is compared with its idle reference of the same run.
func etcdFigures(fleet string, idle, writing etcdLoad, writes int) []results.Figure {
	type quantity struct {
		what, metric string
		idle, during float64
	}
	qs := []quantity{
		{"etcd watch events sent", "events/s", idle.events, writing.events},
		{"etcd bytes sent to clients", "kB/s", idle.sent / 1e3, writing.sent / 1e3},
		{"etcd bytes received from clients", "kB/s", idle.received / 1e3, writing.received / 1e3},
		{"etcd puts (each member's, averaged)", "puts/s", idle.puts, writing.puts},
		{"etcd revisions", "revisions/s", idle.revisions, writing.revisions},
		{"etcd database in use, growth (history not compacted)", "MB/hour", idle.dbGrowth * 3600 / 1e6, writing.dbGrowth * 3600 / 1e6},
		{"etcd CPU, three members", "% of a core", 100 * idle.cpu, 100 * writing.cpu},
	}
	var figs []results.Figure
	for _, q := range qs {
		ref := results.NewFigure("fleet", q.what+", fleet idle, "+fleet, q.metric, []float64{round1(q.idle)})
		during := results.NewFigure("fleet", q.what+", during the writes, "+fleet, q.metric, []float64{round1(q.during)})
		during.Compare(ref, "", 0)
		figs = append(figs, ref, during)
	}
	figs[len(figs)-1].Note = fmt.Sprintf("%d writes over %.0f s; %d watch streams, %d watchers open",
		writes, writing.seconds, int(writing.streams), int(writing.watchers))
	return figs
}

// memoryFigures are each node's memory, and the fleet's total.
func memoryFigures(fleet string, mem []memory) []results.Figure {
	per := func(pick func(memory) uint64) []float64 {
		out := make([]float64, len(mem))
		for i, m := range mem {
			out[i] = round1(float64(pick(m)) / (1 << 20))
		}
		return out
	}
	rss, pss, bpf := per(func(m memory) uint64 { return m.rss }), per(func(m memory) uint64 { return m.pss }), per(func(m memory) uint64 { return m.bpf })
	sum := func(vs []float64) float64 {
		var s float64
		for _, v := range vs {
			s += v
		}
		return round1(s)
	}
	figs := []results.Figure{
		results.NewFigure("fleet", "node RSS, "+fleet, "MiB", rss),
		results.NewFigure("fleet", "node PSS (shared pages divided among the nodes), "+fleet, "MiB", pss),
		results.NewFigure("fleet", "node BPF maps (memlock), "+fleet, "MiB", bpf),
		results.NewFigure("fleet", "fleet total: PSS + BPF maps of every node, "+fleet, "MiB", []float64{round1(sum(pss) + sum(bpf))}),
	}
	figs[0].Note = "one run per node"
	return figs
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }

func printFigures(figs []results.Figure) {
	for _, f := range figs {
		fmt.Printf("  %-96s median %9.1f %s", f.Name, f.Value.Median, f.Metric)
		if len(f.Runs) > 1 {
			fmt.Printf(", min %.1f, max %.1f", f.Value.Min, f.Value.Max)
		}
		for _, c := range f.Compared {
			fmt.Printf(", %.2f× %s", c.Ratio.Median, shortRef(c.Reference))
		}
		if f.Bound != nil {
			fmt.Printf("   goal %s", f.BoundText())
		}
		if f.Note != "" {
			fmt.Printf("  (%s)", f.Note)
		}
		fmt.Println()
	}
}

// shortRef names a reference by what it measured, without the fleet's name.
func shortRef(name string) string {
	switch {
	case strings.Contains(name, ", fleet idle"):
		return "idle"
	case strings.Contains(name, "answered"):
		return "answered"
	}
	return name
}
