package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
)

func TestLimiterPassesBurstThenRate(t *testing.T) {
	var out bytes.Buffer
	clk := clock.NewFake(time.Unix(0, 0))
	l := New(slog.New(slog.NewTextHandler(&out, nil)), clk, time.Second, 3)
	for range 1000 {
		l.Warn("refused", "client", "x")
	}
	if n := strings.Count(out.String(), "refused"); n != 3 {
		t.Fatalf("%d lines of 1000 at once, want the burst of 3:\n%s", n, out.String())
	}
	if l.Suppressed() != 997 {
		t.Fatalf("suppressed %d, want 997", l.Suppressed())
	}
	clk.Advance(time.Second)
	l.Warn("refused", "client", "y")
	last := out.String()[strings.LastIndex(strings.TrimRight(out.String(), "\n"), "\n")+1:]
	if !strings.Contains(last, "client=y") || !strings.Contains(last, "suppressed=997") {
		t.Fatalf("the line after a second: %q, want it with suppressed=997", last)
	}
	if l.Suppressed() != 0 {
		t.Fatal("the count was not reset by the line that reported it")
	}
	l.Warn("refused")
	if n := strings.Count(out.String(), "refused"); n != 4 {
		t.Fatalf("%d lines, want 4: one per second after the burst", n)
	}
}

func TestClip(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"GET", "GET"},
		{strings.Repeat("A", 100), strings.Repeat("A", 16) + "…"},
		{"ééééééééé", "éééééééé…"}, // 18 bytes cut at 17: back to a rune boundary
	} {
		if got := Clip(c.in, map[bool]int{true: 17, false: 16}[strings.HasPrefix(c.in, "é")]); got != c.want {
			t.Errorf("Clip(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
