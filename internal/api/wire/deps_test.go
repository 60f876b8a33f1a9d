package wire_test

import (
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// A program that only speaks the API links the standard library and these types: no
// QUIC, YAML, etcd, Kubernetes client or BPF loader comes with them. (Before the wire
// types had a package of their own, internal/api linked all of them but the last.)
func TestLinksOnlyTheStandardLibrary(t *testing.T) {
	out, err := hostprog.Command(hostprog.Go, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing: not even the package itself")
	}
	for _, dep := range deps {
		if dep == "github.com/manifoldlb/manifold/internal/api/wire" {
			continue
		}
		t.Errorf("internal/api/wire links %s: the wire types take nothing but the standard library", dep)
		for _, heavy := range []string{"quic-go", "yaml", "etcd", "k8s.io", "cilium/ebpf"} {
			if strings.Contains(dep, heavy) {
				t.Errorf("… and %s is one of the heavy ones (%s) that every client would link", dep, heavy)
			}
		}
	}
}
