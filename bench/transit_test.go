package bench

import (
	"strings"
	"testing"
)

// Route counts grow by adding routes: two batches make the same table as one, with
// no route twice.
func TestTransitRoutesAddUp(t *testing.T) {
	whole := transitRoutes(0, 300, "out")
	parts := transitRoutes(0, 10, "out") + transitRoutes(10, 300, "out")
	if whole != parts {
		t.Fatalf("routes 0..10 and 10..300 differ from routes 0..300")
	}
	lines := strings.Split(strings.TrimSpace(whole), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		if seen[l] {
			t.Errorf("route twice: %s", l)
		}
		seen[l] = true
	}
	if len(lines) != 300 || lines[0] != "route add 198.51.100.0/24 via 10.1.2.2 dev out" || lines[299] != "route add 11.1.42.0/24 via 10.1.2.2 dev out" {
		t.Errorf("%d routes, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}
