package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"
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

// result is one metric in the JSON results file.
type result struct {
	Name     string   `json:"name"`
	Unit     string   `json:"unit"`
	Rounds   int      `json:"rounds"`
	Min      float64  `json:"min"`
	Median   float64  `json:"median"`
	Max      float64  `json:"max"`
	TargetMs *float64 `json:"target_ms,omitempty"`
	// Met is judged on the slowest round: a target is a bound, not an average.
	Met *bool `json:"met,omitempty"`
}

func (m *metric) result() result {
	s := slices.Clone(m.samples)
	slices.Sort(s)
	r := result{Name: m.name, Unit: "ms", Rounds: len(s)}
	if len(s) == 0 {
		return r
	}
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	r.Min, r.Median, r.Max = ms(s[0]), ms(median), ms(s[len(s)-1])
	if m.target > 0 {
		t, met := ms(m.target), s[len(s)-1] <= m.target
		r.TargetMs, r.Met = &t, &met
	}
	return r
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
		r := m.result()
		fmt.Fprintf(tw, "%s\t%d\t%7.0f ms\t%7.0f ms\t%7.0f ms\t", m.label, r.Rounds, r.Min, r.Median, r.Max)
		switch {
		case r.Met == nil:
			fmt.Fprint(tw, "—\t\t")
		case *r.Met:
			fmt.Fprintf(tw, "≤ %s\tmet\t", m.target)
		default:
			fmt.Fprintf(tw, "≤ %s\tNOT met\t", m.target)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func writeJSON(path string, metrics []*metric) error {
	var out []result
	for _, m := range metrics {
		out = append(out, m.result())
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
