package main

import (
	"fmt"
	"io"

	"github.com/manifoldlb/manifold/internal/cli"
	"github.com/manifoldlb/manifold/internal/datapath"
)

// version and commit are set at build time (make build: -ldflags "-X main.version=…
// -X main.commit=…", from git); a plain `go build` says dev and takes the commit from
// the toolchain's VCS stamp when it made one.
var (
	version = "dev"
	commit  = ""
)

// printVersion writes cli.Version's lines and the hashes of the BPF objects the binary
// carries.
func printVersion(w io.Writer) error {
	cli.Version(w, "manifold", version, commit)
	for _, o := range datapath.ObjectHashes() {
		fmt.Fprintf(w, "bpf: %s sha256:%s\n", o.Name, o.SHA256)
	}
	return nil
}
