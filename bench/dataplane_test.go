package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestMedianAndMean(t *testing.T) {
	ns := []uint32{90, 10, 50, 30, 70, 20, 40, 60, 80, 100, 0}
	if med, mean := medianAndMean(ns); med != 50 || mean != 50 {
		t.Errorf("median %v mean %v, want 50 and 50", med, mean)
	}
	if _, m := medianAndMean([]uint32{10, 10, 20}); m < 13.3 || m > 13.4 {
		t.Errorf("mean of 10,10,20 = %v", m)
	}
	if ns[0] != 90 {
		t.Error("medianAndMean sorted its caller's slice")
	}
}

func TestDataplaneTableSaysMetOrNot(t *testing.T) {
	ref := NewFigure("per_packet", "ref", "ns/packet", []float64{80, 90})
	fast := NewFigure("per_packet", "fast", "ns/packet", []float64{160, 180})
	slow := NewFigure("per_packet", "slow", "ns/packet", []float64{400, 400})
	ref.Compare(ref, "<=", 0)
	fast.Compare(ref, "<=", 2.3)
	slow.Compare(ref, "<=", 2.3)
	mean := NewFigure("per_packet", "fast", "mean ns/packet", []float64{170})
	var buf bytes.Buffer
	WriteDataplaneTable(&buf, Part{Figures: []Figure{ref, fast, mean, slow}}, "per_packet", "× xdp_tx")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rows (the mean is a column), got:\n%s", buf.String())
	}
	if !strings.Contains(lines[2], "≤ 2.3× met") || !strings.Contains(lines[2], "170.0") ||
		!strings.Contains(lines[3], "NOT met") || strings.Contains(lines[1], "met") {
		t.Errorf("targets or means not reported right:\n%s", buf.String())
	}
	if !strings.Contains(lines[3], "4.44–5.00") {
		t.Errorf("ratio range of the runs missing:\n%s", buf.String())
	}
}
