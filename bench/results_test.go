package bench

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestSummary(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Stat
	}{
		{nil, Stat{}},
		{[]float64{5}, Stat{5, 5, 5}},
		{[]float64{3, 1, 2}, Stat{1, 2, 3}},
		{[]float64{4, 1, 3, 2}, Stat{1, 2.5, 4}},
	} {
		if got := Summary(c.in); got != c.want {
			t.Errorf("Summary(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	in := []float64{3, 1, 2}
	Summary(in)
	if !reflect.DeepEqual(in, []float64{3, 1, 2}) {
		t.Errorf("Summary reordered its input: %v", in)
	}
}

func TestCompareIsRunByRun(t *testing.T) {
	// a noisy second round slows both members of the pair: the ratio stays 2
	ref := NewFigure("s", "ref", "ns", []float64{100, 300, 110})
	f := NewFigure("s", "f", "ns", []float64{200, 600, 220})
	f.Compare(ref, "<=", 2.3)
	f.Compare(ref, "<=", 1.5)
	if len(f.Compared) != 2 {
		t.Fatalf("compared = %+v", f.Compared)
	}
	c := f.Compared[0]
	if c.Reference != "ref" || c.Ratio != (Stat{2, 2, 2}) {
		t.Errorf("comparison = %+v", c)
	}
	if got := c.TargetText(); got != "≤ 2.3× met" {
		t.Errorf("target text %q", got)
	}
	if got := f.Compared[1].TargetText(); got != "≤ 1.5× NOT met" {
		t.Errorf("target text %q", got)
	}

	rate := NewFigure("s", "r", "Mpps", []float64{4, 3})
	rate.Compare(NewFigure("s", "k", "Mpps", []float64{1, 0, 9}), ">=", 4)
	if c := rate.Compared[0]; c.Ratio != (Stat{4, 4, 4}) || c.TargetText() != "≥ 4× met" {
		t.Errorf("zero reference run not skipped, or >= wrong: %+v %q", c, c.TargetText())
	}
	none := NewFigure("s", "n", "ns", []float64{1})
	none.Compare(NewFigure("s", "z", "ns", []float64{0}), "<=", 1)
	if none.Compared != nil {
		t.Errorf("a comparison without pairs was added: %+v", none.Compared)
	}
}

func TestBoundIsJudgedOnTheWorstRun(t *testing.T) {
	f := NewFigure("control_plane", "backend removal", "ms", []float64{900, 1600, 1000})
	f.SetBound("<=", 1500)
	if f.Bound.Met || f.BoundText() != "≤ 1500 ms NOT met" {
		t.Errorf("one slow run must fail a bound: %+v %q", f.Bound, f.BoundText())
	}
	f.SetBound("<=", 1600)
	if !f.Bound.Met {
		t.Errorf("bound 1600 with max 1600 not met")
	}
	g := NewFigure("s", "kept", "%", []float64{99, 100})
	if g.SetBound(">=", 99.5); g.Bound.Met {
		t.Errorf(">= bound judged on the median, not the worst run")
	}
}

func TestPartRoundTrip(t *testing.T) {
	f := NewFigure("http", "direct", "req/s", []float64{1, 2, 3})
	f.Compare(NewFigure("http", "x", "req/s", []float64{1, 1, 1}), ">=", 1.5)
	p := Part{Name: "http", Method: "wrk", Figures: []Figure{f}}
	path := filepath.Join(t.TempDir(), "d", "p.json")
	if err := WritePart(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPart(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, p)
	}
	if _, ok := got.Find("http", "direct", "req/s"); !ok {
		t.Error("Find missed the figure")
	}
	if _, ok := got.Find("http", "direct", "p99 ms"); ok {
		t.Error("Find matched another metric")
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("Percentile %v = %v, want %v", p, got, want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Percentile sorted its caller's slice")
	}
}
