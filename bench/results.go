package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The shared shape of every benchmark's results. Each part of `make bench` writes a
// Part (a JSON file of Figures); the report merges the parts into
// bench/results/latest.json and latest.md and draws the plots from them.
//
// A Figure is one quantity measured over repeated runs. Runs are paired with the
// runs of its reference (run i of both was measured in the same round, side by side),
// so the ratio is taken run by run and then summarised: a noisy neighbour that slows
// one round slows both members of the pair.

// Stat summarises repeated measurements.
type Stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// Target is what the project aims at for a figure's ratio to its reference.
type Target struct {
	// Op is "<=" (the ratio must not exceed Ratio) or ">=" (it must reach it).
	Op    string  `json:"op"`
	Value float64 `json:"value"`
	// Met: for a ratio, the median ratio meets the value; for a bound, the slowest
	// run does.
	Met bool `json:"met"`
}

// Figure is one measured quantity.
type Figure struct {
	// Section groups figures: "per_packet", "packet_rate", "http", "control_plane",
	// "fleet", "tunnel".
	Section string `json:"section"`
	// Name says what was measured ("manifold, 10000 flows"); Metric its unit
	// ("ns/packet", "Mpps", "req/s", "p99 ms", "ms").
	Name   string `json:"name"`
	Metric string `json:"metric"`
	// Runs are the per-run values in run order; Value summarises them.
	Runs  []float64 `json:"runs"`
	Value Stat      `json:"value"`
	// Compared holds the figure's ratios to its references.
	Compared []Comparison `json:"compared,omitempty"`
	// Bound is a target on the value itself, in its metric (a time bound, say).
	Bound *Target `json:"bound,omitempty"`
	// Note says anything a reader needs to trust the figure (for example that the
	// generator, not the device under test, was the limit).
	Note string `json:"note,omitempty"`
}

// Comparison is a figure's run-by-run ratio to a reference figure (same section and
// metric, measured in the same rounds), summarised, and the target for it if any.
type Comparison struct {
	Reference string  `json:"reference"`
	Ratio     Stat    `json:"ratio"`
	Target    *Target `json:"target,omitempty"`
}

// Part is what one benchmark writes: its figures and how they were measured.
type Part struct {
	Name    string   `json:"name"`
	Method  string   `json:"method"`
	Figures []Figure `json:"figures"`
}

// Summary gives min, median and max of values (the median of an even count is the
// mean of the middle two). It is zero for no values.
func Summary(values []float64) Stat {
	if len(values) == 0 {
		return Stat{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	mid := len(s) / 2
	med := s[mid]
	if len(s)%2 == 0 {
		med = (s[mid-1] + s[mid]) / 2
	}
	return Stat{Min: s[0], Median: med, Max: s[len(s)-1]}
}

// NewFigure summarises runs into a figure.
func NewFigure(section, name, metric string, runs []float64) Figure {
	return Figure{Section: section, Name: name, Metric: metric, Runs: slices.Clone(runs), Value: Summary(runs)}
}

// Compare adds f's run-by-run ratio to ref; with a target (op "<=" or ">=",
// ratio > 0) it also says whether the median ratio meets it. Runs beyond the shorter
// of the two are ignored, and so is a zero reference run; without any pair nothing is
// added.
func (f *Figure) Compare(ref Figure, op string, target float64) {
	var ratios []float64
	for i := 0; i < min(len(f.Runs), len(ref.Runs)); i++ {
		if ref.Runs[i] != 0 {
			ratios = append(ratios, f.Runs[i]/ref.Runs[i])
		}
	}
	if len(ratios) == 0 {
		return
	}
	c := Comparison{Reference: ref.Name, Ratio: Summary(ratios)}
	if target > 0 {
		met := c.Ratio.Median <= target
		if op == ">=" {
			met = c.Ratio.Median >= target
		}
		c.Target = &Target{Op: op, Value: target, Met: met}
	}
	f.Compared = append(f.Compared, c)
}

// TargetText is "≤ 2.3× met", "≥ 4× NOT met", or "" without a target.
func (c Comparison) TargetText() string {
	if c.Target == nil {
		return ""
	}
	return c.Target.text("×")
}

// SetBound sets a bound on the value itself ("<=": no run above it, ">=": none below),
// judged on the worst run: a bound is a promise about every time, not an average.
func (f *Figure) SetBound(op string, value float64) {
	met := f.Value.Max <= value
	if op == ">=" {
		met = f.Value.Min >= value
	}
	f.Bound = &Target{Op: op, Value: value, Met: met}
}

// BoundText is "≤ 1500 ms met" or "" without a bound.
func (f Figure) BoundText() string {
	if f.Bound == nil {
		return ""
	}
	return f.Bound.text(" " + f.Metric)
}

// text is "≤ <value><unit> met" or "… NOT met".
func (t Target) text(unit string) string {
	op, met := "≤", "met"
	if t.Op == ">=" {
		op = "≥"
	}
	if !t.Met {
		met = "NOT met"
	}
	return fmt.Sprintf("%s %s%s %s", op, trimFloat(t.Value), unit, met)
}

// trimFloat prints 2.3 as "2.3" and 4 as "4".
func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

// Find returns the figure of a part by section, name and metric.
func (p Part) Find(section, name, metric string) (Figure, bool) {
	for _, f := range p.Figures {
		if f.Section == section && f.Name == name && f.Metric == metric {
			return f, true
		}
	}
	return Figure{}, false
}

// WritePart writes a part as indented JSON, creating the directory.
func WritePart(path string, p Part) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadPart reads a part written by WritePart.
func ReadPart(path string) (Part, error) {
	var p Part
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Percentile is the nearest-rank percentile p (0 < p <= 1) of ds, which it leaves as
// they are.
func Percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Milliseconds converts to milliseconds, to the tenth: a figure's values.
func Milliseconds(ds ...time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = math.Round(float64(d)/float64(time.Millisecond)*10) / 10
	}
	return out
}
