// Command demo shows manifold at work on one machine (`make demo`, as root, after
// `make build`): it builds a small network out of namespaces, puts one manifold node
// in front of three nginx backends, sends requests to the VIP, removes a backend live,
// and tears everything down again — also on Ctrl-C or on failure.
//
//	client ── router ── lb1 (manifold run, XDP)
//	             ├───── be1 ┐
//	             ├───── be2 ├ nginx + manifold backend, replying straight to the client
//	             └───── be3 ┘
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/manifoldlb/manifold/test/lab"
)

const prefix = "mfdemo"

var vip = netip.MustParseAddr("198.51.100.10")

func main() {
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary (make build)")
	requests := flag.Int("requests", 300, "requests per round")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *manifold, *requests)
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the lab has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("Done.")
}

// demo is one run: the lab and what runs in it.
type demo struct {
	lab      *lab.Lab
	manifold string
	client   *lab.Host
	node     *lab.Host
	backends []*lab.Host
	daemon   *lab.Node
}

func run(ctx context.Context, manifold string, requests int) (err error) {
	if err := preflight(&manifold); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "mfdemo-")
	if err != nil {
		return err
	}

	fmt.Println("manifold demo — an XDP load balancer with direct server return, in network namespaces")

	step(1, "Build the lab", "a router joins the client, one manifold node and three backends, each in its own namespace.")
	l, err := lab.New(lab.Spec{
		Prefix: prefix,
		Dir:    dir,
		Hosts: []lab.HostSpec{
			{Role: "client", Kind: lab.Client},
			{Role: "lb1", Kind: lab.LBNode},
			{Role: "be1", Kind: lab.Backend},
			{Role: "be2", Kind: lab.Backend},
			{Role: "be3", Kind: lab.Backend},
		},
	})
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	d := &demo{lab: l, manifold: manifold, client: l.Host("client"), node: l.Host("lb1"), backends: l.HostsOf(lab.Backend)}
	defer func() {
		if err != nil && ctx.Err() == nil {
			d.saveState(dir)
		}
		fmt.Println()
		fmt.Println("Tearing down: stopping every process and deleting the mfdemo-* namespaces.")
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
		if err == nil || ctx.Err() != nil {
			os.RemoveAll(dir)
		}
	}()
	tw := table()
	fmt.Fprintln(tw, "  namespace\trole\tIPv4 address\t")
	for _, h := range l.Hosts {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", h.NS, h.Kind, h.Addr4)
	}
	tw.Flush()

	step(2, "Start the backends", "nginx answers with its name; `manifold backend` decapsulates IPIP and puts the VIP on lo.")
	for _, be := range d.backends {
		if _, err := l.StartNginx(be); err != nil {
			return err
		}
		if _, err := l.StartBackendAgent(manifold, be, vip); err != nil {
			return err
		}
		fmt.Printf("  %s ready: nginx on :80, VIP %s on lo\n", be.Role, vip)
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	step(3, "Start manifold on lb1", "its XDP program picks a backend per connection (Maglev) and forwards the packets in IPIP.")
	if d.daemon, err = l.StartNode(manifold, d.node, d.config(d.backends)); err != nil {
		return err
	}
	if err := l.RouteVIP(vip, d.node); err != nil {
		return err
	}
	fmt.Printf("  XDP attached to %s:eth0; the router sends %s to lb1\n", d.node.NS, vip)
	if err := d.waitFor(ctx, "every backend to answer through the VIP", func(seen map[string]int, _ string) bool {
		return len(seen) == len(d.backends)
	}); err != nil {
		return err
	}

	step(4, fmt.Sprintf("Send %d requests", requests), "each on a new connection from the client; replies come straight from the backends.")
	counts, err := d.send(ctx, requests)
	if err != nil {
		return err
	}
	d.printTable(counts, requests, d.backends)

	step(5, "Ask the node", "`manifold ctl status` reads the node's counters through its REST API.")
	d.printStatus()

	removed := d.backends[len(d.backends)-1]
	kept := d.backends[:len(d.backends)-1]
	step(6, "Remove "+removed.Role+" live", "rewrite the config without it and send SIGHUP: the node swaps its backend set atomically.")
	if err := d.daemon.Reload(d.config(kept)); err != nil {
		return err
	}
	streak := 0
	if err := d.waitFor(ctx, "the new backend set to take effect", func(_ map[string]int, last string) bool {
		if last == removed.Role {
			streak = 0
		} else {
			streak++
		}
		return streak >= 30
	}); err != nil {
		return err
	}
	counts, err = d.send(ctx, requests)
	if err != nil {
		return err
	}
	d.printTable(counts, requests, d.backends)
	if n := counts[removed.Role]; n > 0 {
		return fmt.Errorf("%d requests still reached %s after the reload", n, removed.Role)
	}
	fmt.Printf("  %s gets nothing any more; its share went to the others.\n", removed.Role)
	d.printStatus()
	return nil
}

// preflight checks what the demo needs before it touches anything.
func preflight(manifold *string) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo needs root (network namespaces, BPF)")
	}
	abs, err := filepath.Abs(*manifold)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("%s not found: run `make build` first", *manifold)
	}
	*manifold = abs
	for _, tool := range []string{"nginx", "ethtool", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (`make deps` installs it)", tool)
		}
	}
	return nil
}

func (d *demo) config(backends []*lab.Host) lab.NodeConfig {
	s := lab.Service{Name: "web", VIP: vip, Port: 80}
	for _, be := range backends {
		s.Backends = append(s.Backends, be.Addr4)
	}
	return lab.NodeConfig{Name: d.node.Role, Address: d.node.Addr4, Address6: d.node.Addr6, Services: []lab.Service{s}}
}

// send makes n requests, each on a new connection, and counts the answers per backend.
func (d *demo) send(ctx context.Context, n int) (map[string]int, error) {
	counts := map[string]int{}
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		body, err := lab.HTTPGet(d.client.NS, lab.URL(vip, 80), 0)
		if err != nil {
			return nil, fmt.Errorf("request %d of %d: %w", i+1, n, err)
		}
		counts[strings.TrimSpace(body)]++
	}
	return counts, nil
}

// waitFor sends requests until done says so, for at most 20 seconds.
func (d *demo) waitFor(ctx context.Context, what string, done func(seen map[string]int, last string) bool) error {
	seen := map[string]int{}
	var lastErr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if err := ctx.Err(); err != nil {
			return err
		}
		body, err := lab.HTTPGet(d.client.NS, lab.URL(vip, 80), 0)
		if err != nil {
			lastErr = err
			time.Sleep(20 * time.Millisecond)
			continue
		}
		last := strings.TrimSpace(body)
		seen[last]++
		if done(seen, last) {
			return nil
		}
	}
	return fmt.Errorf("gave up waiting for %s (answers so far: %v, last error: %v)", what, seen, lastErr)
}

func (d *demo) printTable(counts map[string]int, total int, backends []*lab.Host) {
	fmt.Println()
	tw := table()
	fmt.Fprintln(tw, "  backend\taddress\trequests\tshare\t")
	for _, be := range backends {
		n := counts[be.Role]
		share := 100 * float64(n) / float64(total)
		fmt.Fprintf(tw, "  %s\t%s\t%8d\t%5.1f%%\t%s\n", be.Role, be.Addr4, n, share, strings.Repeat("█", int(share/2.5+0.5)))
	}
	for name, n := range counts {
		if d.lab.Host(name) == nil || d.lab.Host(name).Kind != lab.Backend {
			fmt.Fprintf(tw, "  %q\t(unexpected answer)\t%d\t\t\n", name, n)
		}
	}
	tw.Flush()
}

func (d *demo) printStatus() {
	out, err := d.node.Output(d.manifold, "ctl", "--api", "http://127.0.0.1:9100", "status")
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(err.Error()), "\n")
		fmt.Printf("  (manifold ctl status is not available: %s)\n", first)
		return
	}
	fmt.Println()
	for line := range strings.Lines(out) {
		if strings.TrimSpace(line) == "" {
			fmt.Println()
		} else {
			fmt.Print("  ", line)
		}
	}
}

// saveState keeps what is needed to understand a failure: the state of every
// namespace and every process log, in a file that outlives the lab.
func (d *demo) saveState(dir string) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("mfdemo-failure-%s.log", time.Now().Format("20060102-150405")))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not save the lab state: %v\n", err)
		return
	}
	defer f.Close()
	d.lab.WriteState(f)
	fmt.Fprintf(os.Stderr, "\nThe state of the lab and every process log are in %s (configs in %s).\n", path, dir)
	if d.daemon != nil {
		fmt.Fprintf(os.Stderr, "Last lines of manifold's log:\n%s\n", lastLines(d.daemon.Log(), 15))
	}
}

func step(n int, title, explanation string) {
	fmt.Printf("\n%d. %s\n   %s\n", n, title, explanation)
}

func table() *tabwriter.Writer {
	return tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
