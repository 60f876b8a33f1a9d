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

// The Kubernetes parts link the API groups they read and nothing of client-go's
// clientset, informers, typed clients or scheme of every group (more than half of the
// binary before: issue 26), nor the OpenAPI models that client-go's event recorder
// brings (gnostic). Importing is not linking, so this reads the built binary's symbols.
func TestNoAllGroupsKubernetesClient(t *testing.T) {
	bin := t.TempDir() + "/manifold"
	if out, err := hostprog.Command(hostprog.Go, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := hostprog.Command(hostprog.Go, "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	if !strings.Contains(string(out), " k8s.io/api/core/v1.") || !strings.Contains(string(out), " k8s.io/client-go/rest.") {
		t.Fatal("no symbol of k8s.io/api/core/v1 or client-go's rest: not the binary this test is about")
	}
	found := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		for _, pkg := range []string{
			"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/tools/leaderelection",
			"k8s.io/client-go/tools/record", "k8s.io/api/apps/", "github.com/google/gnostic-models",
		} {
			if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[2], pkg) {
				found[pkg]++
			}
		}
	}
	for pkg, n := range found {
		t.Errorf("cmd/manifold links %d symbols of %s", n, pkg)
	}
}
