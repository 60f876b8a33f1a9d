package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFigureBoundIsTheSlowestRound(t *testing.T) {
	m := &metric{name: "x", label: "SIGKILL → next hop gone", target: 3 * time.Second}
	for _, d := range []time.Duration{30 * time.Millisecond, 3100 * time.Millisecond, 29 * time.Millisecond} {
		m.add(d)
	}
	f := m.figure()
	if f.Section != "control_plane" || f.Metric != "ms" || f.Value.Median != 30 || f.Value.Max != 3100 {
		t.Errorf("figure %+v", f)
	}
	if f.Bound == nil || f.Bound.Met || f.Bound.Value != 3000 {
		t.Errorf("one round over the hold time must miss the bound: %+v", f.Bound)
	}
	var buf bytes.Buffer
	if err := printTable(&buf, []*metric{m}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "NOT met") {
		t.Errorf("table:\n%s", buf.String())
	}
}
