// Command manifold is the one binary of the manifold load balancer: the node daemon
// (run), the backend agent, the operator CLI (ctl), the fleet, steering, tunnel, link and
// Kubernetes parts. The command table below is the list; the usage text and the shell
// completion are drawn from it.
//
// The benchmarks are another binary, manifold-bench, so that this one does not carry
// their test rig (TestNoTestRigLinked).
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/manifoldlb/manifold/internal/backendagent"
	"github.com/manifoldlb/manifold/internal/cli"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/link"
	"github.com/manifoldlb/manifold/internal/node"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

// command is one row of the command table: the usage text, the shell completion and the
// dispatch all come from it, so a new command cannot miss one of them.
type command struct {
	name     string
	synopsis string   // the arguments, as the usage shows them
	summary  string   // what it does, one line
	words    []string // what completes after the name: subcommands and flags
	run      func(args []string) error
}

// commands is the table, in the order the usage lists them. It is filled in init
// because usage and completion read it from inside it.
var commands []command

func init() {
	commands = []command{
		{"run", "--config FILE", "run an LB node (foreground)", []string{"--config"},
			func(a []string) error { return cli.Daemon(a, "run", node.Run) }},
		{"backend", "--config FILE", "run the backend agent (foreground)", []string{"--config"},
			func(a []string) error { return cli.Daemon(a, "backend", backendagent.Run) }},
		{"validate", "--config FILE", "check a node, backend, steering or connector config file", []string{"--config"},
			func(a []string) error { return exitWith(validate(a, os.Stdout, os.Stderr)) }},
		{"ctl", "[--api URL] [--ca-file FILE] COMMAND", "operate a running node (manifold ctl: the commands)", ctlWords(),
			func(a []string) error { return ctl(a, os.Stdout, os.Stderr) }},
		{"fleet", "import|export ...", "seed or read the fleet store (manifold fleet: how)",
			[]string{"import", "export", "--config", "--services", "--force"},
			func(a []string) error { return fleetCmd(a, os.Stdout) }},
		{"steer", "--config FILE | simulate ...", "the steering controller, live or on a scenario (simulated time)",
			[]string{"simulate", "--config", "--scenario", "--algorithm", "--json", "--plot"},
			func(a []string) error { return steerCmd(a, os.Stdout) }},
		{"connect", "--config FILE", "the tunnel connector of an origin behind NAT (foreground)", []string{"--config"},
			connectCmd},
		{"link", "--config FILE", "a site-to-site link over several WireGuard tunnels (foreground)", []string{"--config"},
			func(a []string) error { return cli.Daemon(a, "link", link.Run) }},
		{"kube-controller", "[--kubeconfig FILE] [--default-class]", "allocate LoadBalancer addresses from IPPools (Kubernetes)",
			[]string{"--kubeconfig", "--default-class", "--namespace"},
			kubeControllerCmd},
		{"version", "", "version, commit, Go version and the BPF objects' hashes", nil,
			func([]string) error { return printVersion(os.Stdout) }},
		{"man", "", "print the manual page (roff), as the Debian package installs it", nil,
			func([]string) error { return manPage(os.Stdout) }},
		{"completion", "bash|zsh", "print the shell completion script (docs/install.md)", []string{"bash", "zsh"},
			func(a []string) error { return completion(a, os.Stdout) }},
	}
}

// usage is the top-level help, from the table.
func usage() string {
	var b strings.Builder
	b.WriteString("manifold — active-active XDP load balancer\n\nUsage:\n")
	for _, c := range commands {
		left := strings.TrimSpace("manifold " + c.name + " " + c.synopsis)
		if len(left) > 34 {
			fmt.Fprintf(&b, "  %s\n  %-34s%s\n", left, "", c.summary)
		} else {
			fmt.Fprintf(&b, "  %-34s%s\n", left, c.summary)
		}
	}
	b.WriteString("\nThe benchmarks are a binary of their own: manifold-bench (make build builds both).\n")
	return b.String()
}

// exitStatus carries a command's own exit status (validate: 1 for a bad file) out of
// the table's error-returning signature.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func exitWith(code int) error {
	if code == 0 {
		return nil
	}
	return exitStatus(code)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage())
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	switch name {
	case "help", "-h", "--help":
		fmt.Print(usage())
		return
	case "--version":
		name = "version"
	case "bench":
		fmt.Fprintln(os.Stderr, "manifold bench: the benchmarks are a binary of their own: bin/manifold-bench (make build)")
		os.Exit(1)
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(args)
		var code exitStatus
		switch {
		case errors.As(err, &code):
			os.Exit(int(code))
		case err != nil:
			fmt.Fprintf(os.Stderr, "manifold %s: %s\n", name, err)
			os.Exit(1)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "manifold: unknown command %q\n\n%s", name, usage())
	os.Exit(2)
}

// validate checks a node, backend agent, steering controller, link or connector file
// (told apart by their top-level keys: config.KindOf) and the files it names, and
// prints every problem as FILE:LINE: field: message.
func validate(args []string, stdout, stderr io.Writer) int {
	return cli.Validate(args, stdout, stderr, "manifold validate", func(path string, data []byte) error {
		if config.KindOf(data) == config.ConnectFile { // its parser reads the files it names
			_, err := tunnel.ParseConnectorConfig(path, data, slog.New(slog.NewTextHandler(stderr, nil)))
			return err
		}
		return config.Validate(path, data)
	})
}
