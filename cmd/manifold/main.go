// Command manifold is the one binary of the manifold load balancer:
//
//	manifold run --config FILE        the LB node daemon (XDP data plane, health checks, API)
//	manifold backend --config FILE    the backend agent (tc decapsulation, VIPs on lo)
//	manifold validate --config FILE   check a file without touching the system
//	manifold ctl [--api URL] COMMAND  operator CLI against a node's API (status, drain, …)
//	manifold fleet import|export      seed or read the fleet store (etcd)
//	manifold steer simulate           the steering controller on a simulated clock
//	manifold connect --config FILE    the tunnel connector: an origin behind NAT dials the edges
//	manifold link --config FILE       a site-to-site link over several WireGuard tunnels
//	manifold kube-controller          LoadBalancer addresses for Kubernetes Services, from IPPools
//
// The benchmarks are another binary, manifold-bench, so that this one does not carry
// their test rig (TestNoTestRigLinked).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/manifoldlb/manifold/internal/backendagent"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/link"
	"github.com/manifoldlb/manifold/internal/node"
)

const usage = `manifold — active-active XDP load balancer

Usage:
  manifold run --config FILE        run an LB node (foreground)
  manifold backend --config FILE    run the backend agent (foreground)
  manifold validate --config FILE   check a node or backend config file
  manifold ctl [--api URL] COMMAND  operate a running node (manifold ctl: the commands)
  manifold fleet import|export ...  seed or read the fleet store (manifold fleet: how)
  manifold steer simulate ...       run the steering controller on a scenario (simulated time)
  manifold connect --config FILE    the tunnel connector of an origin behind NAT (foreground)
  manifold link --config FILE       a site-to-site link over several WireGuard tunnels (foreground)
  manifold kube-controller [--kubeconfig FILE] [--default-class]
                                    allocate LoadBalancer addresses from IPPools (Kubernetes)
  manifold version

The benchmarks are a binary of their own: manifold-bench (make build builds both).
`

var version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "run":
		err = daemon(args, "run", node.Run)
	case "backend":
		err = daemon(args, "backend", backendagent.Run)
	case "validate":
		os.Exit(validate(args, os.Stdout, os.Stderr))
	case "ctl":
		err = ctl(args, os.Stdout)
	case "fleet":
		err = fleetCmd(args, os.Stdout)
	case "steer":
		err = steerCmd(args, os.Stdout)
	case "connect":
		err = connectCmd(args)
	case "link":
		err = daemon(args, "link", link.Run)
	case "kube-controller":
		err = kubeControllerCmd(args)
	case "bench":
		err = errors.New("the benchmarks are a binary of their own: bin/manifold-bench (make build)")
	case "version", "--version":
		fmt.Println("manifold", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "manifold: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifold %s: %s\n", cmd, err)
		os.Exit(1)
	}
}

func configFlag(name string, args []string) (string, error) {
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

// daemon runs a foreground daemon: structured logs on stderr, SIGTERM/SIGINT stop it.
func daemon(args []string, name string, run func(context.Context, string, *slog.Logger) error) error {
	path, err := configFlag(name, args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
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

// validate checks a node file, a backend agent file, a steering controller file or a
// link file (recognised by their top-level `backend:`, `steer:` or `link:` key), and
// prints every problem
// as FILE:LINE: field: message.
func validate(args []string, stdout, stderr io.Writer) int {
	path, err := configFlag("validate", args)
	if err != nil {
		fmt.Fprintln(stderr, "manifold validate:", err)
		return 2
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, "manifold validate:", err)
		return 1
	}
	switch config.KindOf(data) {
	case config.BackendFile:
		_, err = config.ParseBackend(path, data)
	case config.SteerFile:
		_, err = config.ParseSteer(path, data)
	case config.LinkFile:
		_, err = config.ParseLink(path, data)
	default:
		_, err = config.Parse(path, data)
	}
	if err != nil {
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
