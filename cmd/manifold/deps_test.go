package main

import (
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The binary operators run links none of the test rig: no packet library, no
// namespace helpers, no test certificates, no filler of wire values, no benchmarks
// (they are cmd/manifold-bench).
func TestNoTestRigLinked(t *testing.T) {
	out, err := hostprog.Command(hostprog.Go, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: not the binary's closure\n%s", len(deps), out)
	}
	for _, dep := range deps {
		if strings.Contains(dep, "gopacket") || strings.HasSuffix(dep, "/dptest") || strings.HasSuffix(dep, "/testpki") || strings.HasSuffix(dep, "/wiretest") || dep == "github.com/manifoldlb/manifold/bench" {
			t.Errorf("cmd/manifold links %s, a part of the test rig", dep)
		}
	}
}
