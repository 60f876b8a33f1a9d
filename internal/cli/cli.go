// Package cli is what the binaries' mains share: the --config flag, running a part in
// the foreground until a signal, and the version text. cmd/manifold and
// cmd/manifold-connect both use it, so it imports nothing of the node (no BPF, BGP,
// netlink, etcd or Kubernetes client): the connector stays small and builds for every
// OS (TestConnectorLinksNoNodePart).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
)

// ConfigFlag reads the required --config FILE of command name.
func ConfigFlag(name string, args []string) (string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	path := fs.String("config", "", "config file (YAML)")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if *path == "" {
		return "", errors.New("--config FILE is required")
	}
	return *path, nil
}

// Daemon runs a part in the foreground with its --config FILE until SIGTERM or SIGINT
// (on Windows, Ctrl-C and the service stop: Go maps both to these), and prints every
// problem of a bad file on its own line.
func Daemon(args []string, name string, run func(context.Context, string, *slog.Logger) error) error {
	path, err := ConfigFlag(name, args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err = run(ctx, path, log)
	var cerrs config.Errors
	if errors.As(err, &cerrs) {
		for _, e := range cerrs {
			fmt.Fprintln(os.Stderr, e)
		}
		return fmt.Errorf("%d problem(s) in %s", len(cerrs), path)
	}
	return err
}

// Version writes what tells one build from another: the binary's name, its version,
// the commit (given at build time, else the one the Go toolchain stamped, with +dirty
// for uncommitted changes) and the Go version and target.
func Version(w io.Writer, binary, version, commit string) {
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
	fmt.Fprintf(w, "%s %s\ncommit: %s\ngo: %s %s/%s\n", binary, version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Validate checks the file of --config FILE with parse and prints every problem as
// FILE:LINE: field: message; it returns the exit status: 0 for a good file, 1 for a
// bad or unreadable one, 2 for bad arguments. prog prefixes the other errors.
func Validate(args []string, stdout, stderr io.Writer, prog string, parse func(path string, data []byte) error) int {
	path, err := ConfigFlag("validate", args)
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 2
	}
	data, err := decode.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 1
	}
	if err := parse(path, data); err != nil {
		var cerrs config.Errors
		if errors.As(err, &cerrs) {
			for _, e := range cerrs {
				fmt.Fprintln(stdout, e)
			}
		} else {
			fmt.Fprintln(stdout, err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	return 0
}
