package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The binaries' sizes, built as they are shipped: bin/manifold as `make deb` builds it
// (PIE, -s -w) and manifold-connect as `make connect-cross` does (pure Go, -s -w), for
// each target an origin runs. Issue 26 bounds them: 45 MB and 15 MB.

// SizeTarget is one binary for one GOOS/GOARCH and the bound on its size.
type SizeTarget struct {
	Pkg, GOOS, GOARCH string
	Flags             []string // go build's, besides -trimpath and -ldflags "-s -w"
	Env               []string
	MaxMB             float64
}

// SizeTargets are the shipped binaries.
var SizeTargets = []SizeTarget{
	{Pkg: "manifold", GOOS: "linux", GOARCH: "amd64", Flags: []string{"-buildmode=pie"}, MaxMB: 45},
	{Pkg: "manifold-connect", GOOS: "linux", GOARCH: "amd64", Env: []string{"CGO_ENABLED=0"}, MaxMB: 15},
	{Pkg: "manifold-connect", GOOS: "linux", GOARCH: "arm64", Env: []string{"CGO_ENABLED=0"}, MaxMB: 15},
	{Pkg: "manifold-connect", GOOS: "darwin", GOARCH: "arm64", Env: []string{"CGO_ENABLED=0"}, MaxMB: 15},
	{Pkg: "manifold-connect", GOOS: "windows", GOARCH: "amd64", Env: []string{"CGO_ENABLED=0"}, MaxMB: 15},
}

// SizeBefore is bin/manifold built as make deb builds it at 30c3b6b, the commit before
// the typed Kubernetes clients and the connector's own binary (recorded, not rebuilt:
// it is one build of the whole module, minutes on a loaded machine).
const SizeBefore = 84.358144

// Sizes builds every SizeTarget from the module at repo and reports its size in MB
// (10^6 bytes), bounded by MaxMB.
func Sizes(w io.Writer, repo string) (Part, error) {
	dir, err := os.MkdirTemp("", "manifold-sizes-")
	if err != nil {
		return Part{}, err
	}
	defer os.RemoveAll(dir)
	part := Part{Name: "sizes", Method: "go build -trimpath -ldflags \"-s -w\" of each shipped binary and target " +
		"(bin/manifold also -buildmode=pie, as make deb; manifold-connect CGO_ENABLED=0, as make connect-cross); size of the file in MB (10^6 bytes)"}
	before := NewFigure("binary_size", "manifold linux/amd64 at 30c3b6b (recorded)", "MB", []float64{SizeBefore})
	part.Figures = append(part.Figures, before)
	for _, t := range SizeTargets {
		out := filepath.Join(dir, fmt.Sprintf("%s-%s-%s", t.Pkg, t.GOOS, t.GOARCH))
		args := append([]string{"build", "-trimpath", "-ldflags", "-s -w"}, t.Flags...)
		args = append(args, "-o", out, "./cmd/"+t.Pkg)
		cmd := hostprog.Command(hostprog.Go, args...)
		cmd.Dir = repo
		cmd.Env = append(append(os.Environ(), "GOOS="+t.GOOS, "GOARCH="+t.GOARCH), t.Env...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return Part{}, fmt.Errorf("GOOS=%s GOARCH=%s go build ./cmd/%s: %v\n%s", t.GOOS, t.GOARCH, t.Pkg, err, msg)
		}
		fi, err := os.Stat(out)
		if err != nil {
			return Part{}, err
		}
		mb := float64(fi.Size()) / 1e6
		f := NewFigure("binary_size", fmt.Sprintf("%s %s/%s", t.Pkg, t.GOOS, t.GOARCH), "MB", []float64{mb})
		f.SetBound("<=", t.MaxMB)
		if t.Pkg == "manifold" {
			f.Compare(before, "<=", 0)
		}
		fmt.Fprintf(w, "%-40s %6.1f MB  %s\n", f.Name, mb, f.BoundText())
		part.Figures = append(part.Figures, f)
	}
	return part, nil
}
