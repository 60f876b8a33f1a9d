package main

// manifold connect: the connector of a reverse tunnel, run on an origin that takes no
// inbound connections; it dials the edges and serves its services through them. The
// same part is a binary of its own, cmd/manifold-connect, for origins that need
// nothing else (any OS).

import (
	"github.com/manifoldlb/manifold/internal/cli"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

// connectCmd runs `manifold connect --config FILE` in the foreground: SIGTERM or
// SIGINT drains it (no new streams, the open ones finish up to drain_time) before
// it exits.
func connectCmd(args []string) error {
	return cli.Daemon(args, "connect", tunnel.RunConnector)
}
