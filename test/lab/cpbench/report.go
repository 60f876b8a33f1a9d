package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	results "github.com/manifoldlb/manifold/bench"
)

// metric is one transition measured once per round.
type metric struct {
	name   string        // stable key of the JSON results
	label  string        // for people
	target time.Duration // 0: none, printed for information only
	// samples, one per round
	samples []time.Duration
}

func (m *metric) add(d time.Duration) { m.samples = append(m.samples, d) }

// figure is the metric as a figure of the benchmark report (section
// "control_plane", in ms, a bound where the metric has a target).
func (m *metric) figure() results.Figure {
	runs := make([]float64, len(m.samples))
	for i, d := range m.samples {
		runs[i] = ms(d)
	}
	f := results.NewFigure("control_plane", m.label, "ms", runs)
	if m.target > 0 {
		f.SetBound("<=", ms(m.target))
	}
	return f
}

// ms converts to milliseconds, to the tenth: finer would be noise (see pollEvery).
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*10) / 10
}

func printTable(w io.Writer, metrics []*metric) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// the number columns are right-aligned by their format, their headings to match
	fmt.Fprintf(tw, "transition\trounds\t%10s\t%10s\t%10s\ttarget\t\t\n", "min", "median", "max")
	for _, m := range metrics {
		f := m.figure()
		fmt.Fprintf(tw, "%s\t%d\t%7.0f ms\t%7.0f ms\t%7.0f ms\t", m.label, len(f.Runs), f.Value.Min, f.Value.Median, f.Value.Max)
		switch {
		case f.Bound == nil:
			fmt.Fprint(tw, "—\t\t")
		case f.Bound.Met:
			fmt.Fprintf(tw, "≤ %s\tmet\t", m.target)
		default:
			fmt.Fprintf(tw, "≤ %s\tNOT met\t", m.target)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// method says how the convergence figures are measured.
const method = "Convergence in the active-active lab (test/lab): BIRD 2 as the router with ECMP, three " +
	"manifold nodes with BGP hold time 3 s and drain time 1 s, two backends with HTTP health " +
	"checks every 500 ms (fall 2, rise 2). " +
	"Each round measures every transition once, from the event (a log line, a signal, a stopped " +
	"backend) to the router's routing table (or every node's status) showing the change, polled " +
	"every 10 ms; a bound holds when the slowest round keeps it."

func writePart(path string, metrics []*metric) error {
	p := results.Part{Name: "convergence", Method: method}
	for _, m := range metrics {
		p.Figures = append(p.Figures, m.figure())
	}
	return results.WritePart(path, p)
}
