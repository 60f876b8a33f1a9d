package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/manifoldlb/manifold/internal/datapath"
)

// version and commit are set at build time (make build: -ldflags "-X main.version=…
// -X main.commit=…", from git); a plain `go build` says dev and takes the commit from
// the toolchain's VCS stamp when it made one.
var (
	version = "dev"
	commit  = ""
)

// printVersion writes what tells one build from another: the version, the commit the
// Go toolchain stamped (with +dirty for uncommitted changes), the Go version and the
// hashes of the BPF objects the binary carries.
func printVersion(w io.Writer) error {
	commit := commit
	if info, ok := debug.ReadBuildInfo(); ok && commit == "" {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			commit = rev
			if modified == "true" {
				commit += "+dirty"
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	fmt.Fprintf(w, "manifold %s\ncommit: %s\ngo: %s %s/%s\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, o := range datapath.ObjectHashes() {
		fmt.Fprintf(w, "bpf: %s sha256:%s\n", o.Name, o.SHA256)
	}
	return nil
}
