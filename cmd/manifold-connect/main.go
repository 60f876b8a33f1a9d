// Command manifold-connect is the connector of manifold's reverse tunnels alone: what an
// origin behind NAT runs (a laptop, a Raspberry Pi, a Pod) to dial the edges and serve
// its services through them. It is `manifold connect` without the node's parts (BPF,
// BGP, netlink, etcd, Kubernetes), pure Go, for Linux, macOS and Windows
// (cmd/manifold's TestConnectorLinksNoNodePart, TestConnectorCrossBuilds).
package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/manifoldlb/manifold/internal/cli"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

// version and commit are set at build time, as cmd/manifold's (the Makefile's LDFLAGS).
var (
	version = "dev"
	commit  = ""
)

const usage = `manifold-connect — the tunnel connector of an origin behind NAT

Usage:
  manifold-connect --config FILE            run the connector (foreground; SIGTERM or Ctrl-C drain it)
  manifold-connect validate --config FILE   check a connector file
  manifold-connect version                  version, commit, Go version and target
  manifold-connect man                      print the manual page (roff), as the Debian package installs it
`

func main() {
	// Without a command it runs the connector: `manifold-connect --config FILE` is
	// `manifold connect --config FILE`.
	name, args := "run", os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "validate", "version", "man", "help":
			name, args = args[0], args[1:]
		case "--version":
			name = "version"
		case "-h", "--help":
			name = "help"
		}
	}
	switch name {
	case "run":
		if err := cli.Daemon(args, "manifold-connect", tunnel.RunConnector); err != nil {
			fmt.Fprintf(os.Stderr, "manifold-connect: %s\n\n%s", err, usage)
			os.Exit(1)
		}
	case "validate":
		os.Exit(cli.Validate(args, os.Stdout, os.Stderr, "manifold-connect validate", func(path string, data []byte) error {
			_, err := tunnel.ParseConnectorConfig(path, data, slog.New(slog.NewTextHandler(os.Stderr, nil)))
			return err
		}))
	case "version":
		cli.Version(os.Stdout, "manifold-connect", version, commit)
	case "man":
		fmt.Print(manPage())
	case "help":
		fmt.Print(usage)
	}
}

// manPage is manifold-connect(1) in roff; the Debian package installs it.
func manPage() string {
	return `.TH MANIFOLD\-CONNECT 1 "" "manifold\-connect ` + strings.ReplaceAll(version, "-", `\-`) + `" "User Commands"
.SH NAME
manifold\-connect \- the tunnel connector of manifold, for an origin behind NAT
.SH SYNOPSIS
.B manifold\-connect
\-\-config FILE
.br
.B manifold\-connect validate
\-\-config FILE
.br
.B manifold\-connect version
.br
.B manifold\-connect man
.SH DESCRIPTION
manifold\-connect dials the edges a connector file names, over QUIC with the token and
the CA it names, and serves the services it lists through them: an origin that takes no
inbound connection is reachable at the edges' addresses. It is
.B manifold connect
alone, without the load balancer's parts, for Linux, macOS and Windows. SIGTERM or
SIGINT drain it: no new streams, the open ones finish up to drain_time, then it exits.
.SH FILES
.I /etc/manifold/connect.yaml
(the systemd unit manifold\-connect.service runs it)
.SH SEE ALSO
.BR manifold (1);
docs/tunnels.md in the source repository.
`
}
