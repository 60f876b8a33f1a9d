package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// Targets are the connector's release targets: `make connect-cross` builds
// bin/manifold-connect-$GOOS-$GOARCH[.exe] for each, as `make test` does before the tests.
var targets = []struct{ goos, goarch string }{
	{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}, {"windows", "amd64"},
}

// maxSize bounds the connector built as the Makefile builds it (-s -w): an origin
// downloads it (issue 26: at most 15 MB).
const maxSize = 15_000_000

// The connector links none of the node's parts: on every target, no BPF, BGP, netlink,
// etcd or Kubernetes client, so that it stays small and builds for any OS.
func TestConnectorLinksNoNodePart(t *testing.T) {
	forbidden := []string{
		"github.com/cilium/ebpf", "github.com/osrg/gobgp", "github.com/vishvananda/netlink",
		"k8s.io/", "go.etcd.io/", "golang.zx2c4.com/wireguard",
		"github.com/manifoldlb/manifold/internal/datapath", "github.com/manifoldlb/manifold/internal/node",
	}
	for _, tg := range targets {
		cmd := hostprog.Command(hostprog.Go, "list", "-deps", ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+tg.goos, "GOARCH="+tg.goarch)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s/%s: go list -deps: %v", tg.goos, tg.goarch, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 20 {
			t.Fatalf("go list -deps listed %d packages: not the binary's closure\n%s", len(deps), out)
		}
		for _, dep := range deps {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s/%s: cmd/manifold-connect links %s", tg.goos, tg.goarch, dep)
				}
			}
		}
	}
}

// The connector builds, pure Go, for every release target and stays within maxSize;
// the binaries `make connect-cross` left in bin/ are within it too.
func TestConnectorCrossBuilds(t *testing.T) {
	dir := t.TempDir()
	for _, tg := range targets {
		name := fmt.Sprintf("manifold-connect-%s-%s", tg.goos, tg.goarch)
		if tg.goos == "windows" {
			name += ".exe"
		}
		out := filepath.Join(dir, name)
		cmd := hostprog.Command(hostprog.Go, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+tg.goos, "GOARCH="+tg.goarch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s GOARCH=%s go build ./cmd/manifold-connect: %v\n%s", tg.goos, tg.goarch, err, msg)
			continue
		}
		checkSize(t, out)
		made := filepath.Join("..", "..", "bin", name)
		if _, err := os.Stat(made); err != nil {
			testenv.Missingf(t, "%s: make connect-cross (a step of make test) builds it: %v", made, err)
			continue
		}
		checkSize(t, made)
	}
}

func checkSize(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxSize {
		t.Errorf("%s is %.1f MB, more than the connector's %d MB", path, float64(fi.Size())/1e6, maxSize/1_000_000)
	}
	t.Logf("%s: %.1f MB", filepath.Base(path), float64(fi.Size())/1e6)
}

// The connector's own commands: version names the binary and the version the build
// gave, validate refuses a bad file, a run without --config says what it needs.
func TestConnectorCommands(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manifold-connect")
	if msg, err := hostprog.Command(hostprog.Go, "build", "-ldflags", "-X main.version=1.2.3", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	out, err := hostprog.Command(hostprog.Built(bin), "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "manifold-connect 1.2.3\n") {
		t.Errorf("manifold-connect version: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "connect.yaml")
	if err := os.WriteFile(bad, []byte("edges: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := hostprog.Command(hostprog.Built(bin), "validate", "--config", bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "token_file") {
		t.Errorf("manifold-connect validate of a file without token_file: %v\n%s", err, out)
	}
	if out, err := hostprog.Command(hostprog.Built(bin)).CombinedOutput(); err == nil || !strings.Contains(string(out), "--config FILE is required") {
		t.Errorf("manifold-connect with no --config: %v\n%s", err, out)
	}
}
