package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	ns := []uint32{90, 10, 50, 30, 70, 20, 40, 60, 80, 100, 0}
	s := Summarize("x", ns)
	if s.Calls != 11 || s.Min != 0 || s.Median != 50 || s.Mean != 50 || s.P90 != 90 || s.Max != 100 {
		t.Errorf("summary %+v, want 11 calls, min 0, median 50, mean 50, p90 90, max 100", s)
	}
	if m := Summarize("y", []uint32{10, 10, 20}).Mean; m < 13.3 || m > 13.4 {
		t.Errorf("mean of 10,10,20 = %v", m)
	}
	if ns[0] != 90 {
		t.Error("Summarize sorted its caller's slice")
	}
}

func TestDataplaneTableSaysMetOrNot(t *testing.T) {
	var buf bytes.Buffer
	WriteDataplaneTable(&buf, []Sample{
		{Name: "ref", Verdict: "XDP_TX", Median: 80, Ratio: 1},
		{Name: "fast", Verdict: "XDP_TX", Median: 160, Ratio: 2, Target: 2.3, Met: true},
		{Name: "slow", Verdict: "XDP_TX", Median: 400, Ratio: 5, Target: 2.3},
	})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rows, got:\n%s", buf.String())
	}
	if !strings.Contains(lines[2], "≤ 2.3× met") || !strings.Contains(lines[3], "NOT met") || strings.Contains(lines[1], "met") {
		t.Errorf("targets not reported right:\n%s", buf.String())
	}
}
