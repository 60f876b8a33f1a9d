// Command demo shows manifold's active-active deployment on one machine (`make demo`,
// as root, after `make build`): three manifold nodes announce the VIPs over BGP to a
// router running BIRD, which spreads client connections over all of them (ECMP). Then
// a node leaves gracefully and a backend fails, and no request fails with them. It
// tears everything down again — also on Ctrl-C or on failure.
//
//	client ── router (BIRD, ECMP) ──┬── lb1 lb2 lb3   manifold run, eBGP (MD5) → router
//	                                └── be1 … be4      nginx + manifold backend
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const prefix = "mfdemo"

// The lab: sized and tuned so that every transition shows within seconds.
const (
	nodes     = 3
	backends  = 4
	holdTime  = 3 * time.Second // BIRD's minimum
	drainTime = time.Second
	password  = "mfdemo-md5-key"
)

var health = &lab.Health{Kind: "http", Port: 80, Path: "/", Interval: 500 * time.Millisecond, Timeout: 300 * time.Millisecond, Rise: 2, Fall: 2}

// removalBound is how soon every node stops sending to a dead backend: fall failed
// checks, plus up to one interval before the first of them.
var removalBound = health.Interval*time.Duration(health.Fall) + health.Interval

var webVIPs = []netip.Addr{lab.WebVIP4, lab.WebVIP6}

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

// demo is one run: the topology and the binary its nodes run.
type demo struct {
	ctx      context.Context
	a        *lab.ActiveActive
	manifold string
}

func run(ctx context.Context, manifold string, requests int) (err error) {
	if err := lab.Preflight("the demo", &manifold, hostprog.Nginx, hostprog.Ethtool, hostprog.IP, hostprog.Bird, hostprog.Birdc, hostprog.Curl); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "mfdemo-")
	if err != nil {
		return err
	}

	fmt.Println("manifold demo — active-active XDP load balancing: BGP, ECMP and direct server return, in network namespaces")

	step(1, "Build the lab", "a router joins a client, three manifold nodes and four backends, each in its own namespace.")
	a, err := lab.NewActiveActive(lab.ActiveActiveSpec{
		Prefix: prefix, Dir: dir, Manifold: manifold,
		Nodes: nodes, Backends: backends, Health: health,
		HoldTime: holdTime, DrainTime: drainTime, Password: password,
	})
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	d := &demo{ctx: ctx, a: a, manifold: manifold}
	defer func() {
		if err != nil && ctx.Err() == nil {
			d.saveState(dir)
		}
		fmt.Println()
		fmt.Println("Tearing down: stopping every process and deleting the mfdemo-* namespaces.")
		if cerr := a.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
		if err == nil || ctx.Err() != nil {
			os.RemoveAll(dir)
		}
	}()
	tw := table()
	fmt.Fprintln(tw, "  namespace\trole\tIPv4\tIPv6\truns\t")
	fmt.Fprintf(tw, "  %s\t%s\t\t\tBIRD 2, AS %d\t\n", a.Router.NS, a.Router.Kind, lab.RouterASN)
	for _, h := range a.Hosts {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t\n", h.NS, h.Kind, h.Addr4, h.Addr6, runs(h.Kind))
	}
	tw.Flush()

	step(2, "Start the backends, BIRD and the three nodes",
		"each node attaches XDP, health-checks the backends and announces the VIPs over BGP once one is healthy.")
	for _, be := range a.Backends {
		fmt.Printf("  %s ready: nginx on :80, the VIPs on lo for direct return\n", be.Role)
	}
	fmt.Printf("  BIRD ready on the router: one eBGP session per node, TCP MD5, hold time %s\n", holdTime)
	for _, n := range a.Nodes {
		if err := a.StartNode(n.Role); err != nil {
			return err
		}
		fmt.Printf("  %s started: XDP on eth0, AS %d, peer %s\n", n.Role, lab.NodeASN, n.Gateway4)
	}
	all := roles(a.Nodes)
	took, err := d.a.WaitRoutes(webVIPs, 5*time.Second, all...)
	if err != nil {
		return err
	}
	if _, err := d.a.WaitRoutes([]netip.Addr{lab.PartialVIP4, lab.PartialVIP6}, 5*time.Second, "lb1", "lb2"); err != nil {
		return err
	}
	fmt.Printf("  every node announces the web VIPs: the router has all three %s after the last one started\n", took.Round(time.Millisecond))

	step(3, "Look at the router", "BIRD merges the equal BGP routes into one multipath route; the kernel hashes each flow's 5-tuple onto a next hop.")
	if err := d.showRoutes(lab.WebVIP4, lab.WebVIP6); err != nil {
		return err
	}
	protocols, err := a.Bird.Show("protocols")
	if err != nil {
		return err
	}
	fmt.Printf("\n  $ birdc show protocols\n%s", indent(protocols))

	step(4, fmt.Sprintf("Send %d requests to %s", requests, lab.WebVIP4),
		"each on a new connection, so from a new port: the router spreads them over the nodes, each node over the backends.")
	perBackend, perNode, err := d.spread(lab.WebVIP4, requests)
	if err != nil {
		return err
	}
	d.printNodes(perNode)
	printBackends(perBackend, requests, a.Backends)

	step(5, "Ask lb1", "`manifold ctl status` reads the node's state through its REST API.")
	d.printStatus("lb1")

	if err := d.gracefulLeave("lb3"); err != nil {
		return err
	}
	return d.backendFails("be2", requests)
}

// gracefulLeave stops a node with SIGTERM under load and shows that the router moves
// the traffic away before the node stops forwarding.
func (d *demo) gracefulLeave(role string) error {
	step(6, "Stop "+role+" with SIGTERM",
		fmt.Sprintf("it withdraws the VIPs, keeps forwarding for bgp.drain_time (%s) while the router moves its flows, then detaches.", drainTime))
	node := d.a.Running[role]
	rest := slices.DeleteFunc(slices.Clone(roles(d.a.Nodes)), func(r string) bool { return r == role })
	load := lab.StartLoad(d.a.Client.NS, webVIPs)
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- d.a.StopNode(role, syscall.SIGTERM) }()
	shrunk, routeErr := d.a.WaitRoutes(webVIPs, drainTime+time.Second, rest...)
	stopErr := <-stopped
	exited := time.Since(start)
	time.Sleep(300 * time.Millisecond) // and traffic after the detach
	sent, failed, firstErr := load.Finish()
	if err := errors.Join(routeErr, stopErr); err != nil {
		return err
	}
	fmt.Printf("  the router has %d next hops %s after the signal; %s exited after %s\n",
		len(rest), shrunk.Round(time.Millisecond), role, exited.Round(time.Millisecond))
	fmt.Printf("  %s: %s\n", role, lastLogLine(node.Log(), `msg="VIP withdrawn"`, "vip="+lab.WebVIP4.String()))
	if err := d.showRoutes(lab.WebVIP4); err != nil {
		return err
	}
	fmt.Printf("\n  %d requests sent meanwhile on new connections, %d failed\n", sent, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d requests failed while %s drained (first: %w)", failed, sent, role, firstErr)
	}
	return nil
}

// backendFails stops a backend's web server, shows the nodes marking it down and the
// traffic going to the others, then brings it back.
func (d *demo) backendFails(role string, requests int) error {
	step(7, "Fail "+role,
		fmt.Sprintf("stop its nginx: the health checks mark it down on every node within interval × fall + interval = %s.", removalBound))
	be := d.a.Host(role)
	running := d.runningNodes()
	if err := d.a.StopNginx(role); err != nil {
		return err
	}
	down, err := d.waitBackend(running, be.Addr4, "down", removalBound+2*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("  %s down on %s %s after its server stopped\n", role, strings.Join(running, ", "), down.Round(time.Millisecond))
	for _, n := range running {
		line := lastLogLine(d.a.Running[n].Log(), `msg="backend health changed"`, "backend="+be.Addr4.String(), "up=false")
		fmt.Printf("  %s: %s\n", n, line)
	}
	fmt.Println()
	if err := d.printBackendStates(running); err != nil {
		return err
	}

	perBackend, _, err := d.spread(lab.WebVIP4, requests)
	if err != nil {
		return err
	}
	alive := slices.DeleteFunc(slices.Clone(d.a.Backends), func(h *lab.Host) bool { return h == be })
	printBackends(perBackend, requests, alive)
	if n := perBackend[role]; n > 0 {
		return fmt.Errorf("%d requests reached %s after it was marked down", n, role)
	}
	fmt.Printf("  %s gets nothing; its share went to the others.\n", role)

	if err := d.a.StartNginx(role); err != nil {
		return err
	}
	up, err := d.waitBackend(running, be.Addr4, "up", 5*time.Second)
	if err != nil {
		return err
	}
	perBackend, _, err = d.spread(lab.WebVIP4, requests/3)
	if err != nil {
		return err
	}
	fmt.Printf("\n  nginx restarted: %s up again on every node after %s (rise %d); it answered %d of %d new requests\n",
		role, up.Round(time.Millisecond), health.Rise, perBackend[role], requests/3)
	if perBackend[role] == 0 {
		return fmt.Errorf("%s got no request after it recovered", role)
	}
	return nil
}

// showRoutes prints the router's kernel routes to the vips.
func (d *demo) showRoutes(vips ...netip.Addr) error {
	for _, vip := range vips {
		argv := []string{"route", "show", vip.String()}
		if vip.Is6() {
			argv = append([]string{"-6"}, argv...)
		}
		out, err := d.a.Router.Output(hostprog.IP, argv...)
		if err != nil {
			return err
		}
		fmt.Printf("\n  $ ip %s   (in %s)\n%s", strings.Join(argv, " "), d.a.Router.NS, indent(out))
	}
	return nil
}

// spread sends n requests to vip, each on a new connection, and returns the answers
// per backend and the packets each running node forwarded meanwhile.
func (d *demo) spread(vip netip.Addr, n int) (perBackend map[string]int, perNode map[string]uint64, err error) {
	before := map[string]uint64{}
	for _, role := range d.runningNodes() {
		if before[role], err = d.forwarded(role); err != nil {
			return nil, nil, err
		}
	}
	perBackend = map[string]int{}
	for i := range n {
		if err := d.ctx.Err(); err != nil {
			return nil, nil, err
		}
		body, err := lab.HTTPGet(d.a.Client.NS, lab.URL(vip, 80), 0)
		if err != nil {
			return nil, nil, fmt.Errorf("request %d of %d: %w", i+1, n, err)
		}
		perBackend[strings.TrimSpace(body)]++
	}
	perNode = map[string]uint64{}
	for role, b := range before {
		after, err := d.forwarded(role)
		if err != nil {
			return nil, nil, err
		}
		perNode[role] = after - b
	}
	return perBackend, perNode, nil
}

// forwarded is the number of packets a node has forwarded to backends, from its
// Prometheus metrics.
func (d *demo) forwarded(role string) (uint64, error) {
	out, err := d.a.Host(role).Output(hostprog.Curl, "-sf", "--max-time", "2", "http://127.0.0.1:9100/metrics")
	if err != nil {
		return 0, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		return 0, fmt.Errorf("%s /metrics: %w", role, err)
	}
	var n uint64
	if f, ok := families["manifold_packets_total"]; ok {
		for _, m := range f.Metric {
			n += uint64(m.GetCounter().GetValue())
		}
	}
	return n, nil
}

// waitBackend waits until every node gives the backend at addr the state want in
// the IPv4 web service, and returns how long that took.
func (d *demo) waitBackend(nodes []string, addr netip.Addr, want wire.BackendState, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	err := lab.Eventually(timeout, 20*time.Millisecond, func() error {
		for _, role := range nodes {
			st, err := d.a.Status(role)
			if err != nil {
				return err
			}
			got, err := lab.BackendState(st, "web-v4", addr)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s: %s is %s, want %s", role, addr, got, want)
			}
		}
		return nil
	})
	return time.Since(start), err
}

// printBackendStates prints, for every node, the state it gives each backend of the
// IPv4 web service.
func (d *demo) printBackendStates(nodes []string) error {
	tw := table()
	fmt.Fprint(tw, "  web-v4 on\t")
	for _, be := range d.a.Backends {
		fmt.Fprintf(tw, "%s\t", be.Role)
	}
	fmt.Fprintln(tw)
	for _, role := range nodes {
		st, err := d.a.Status(role)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "  %s\t", role)
		for _, be := range d.a.Backends {
			state, err := lab.BackendState(st, "web-v4", be.Addr4)
			if err != nil {
				return err
			}
			fmt.Fprintf(tw, "%s\t", state)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func (d *demo) printNodes(perNode map[string]uint64) {
	var total uint64
	for _, n := range perNode {
		total += n
	}
	fmt.Println()
	tw := table()
	fmt.Fprintln(tw, "  node\taddress\tpackets\tshare\t")
	for _, h := range d.a.Nodes {
		n, ok := perNode[h.Role]
		if !ok {
			continue
		}
		share := 100 * float64(n) / float64(max(total, 1))
		fmt.Fprintf(tw, "  %s\t%s\t%7d\t%5.1f%%\t%s\n", h.Role, h.Addr4, n, share, bar(share))
	}
	tw.Flush()
}

func printBackends(perBackend map[string]int, total int, backends []*lab.Host) {
	fmt.Println()
	tw := table()
	fmt.Fprintln(tw, "  backend\taddress\trequests\tshare\t")
	for _, be := range backends {
		n := perBackend[be.Role]
		share := 100 * float64(n) / float64(total)
		fmt.Fprintf(tw, "  %s\t%s\t%8d\t%5.1f%%\t%s\n", be.Role, be.Addr4, n, share, bar(share))
	}
	for name, n := range perBackend {
		if !slices.ContainsFunc(backends, func(h *lab.Host) bool { return h.Role == name }) {
			fmt.Fprintf(tw, "  %q\t(unexpected answer)\t%8d\t\t\n", name, n)
		}
	}
	tw.Flush()
}

func (d *demo) printStatus(role string) {
	out, err := d.a.Host(role).Output(hostprog.Built(d.manifold), "ctl", "status")
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(err.Error()), "\n")
		fmt.Printf("  (manifold ctl status is not available: %s)\n", first)
		return
	}
	fmt.Printf("\n%s", indent(out))
}

// runningNodes lists the nodes started and not stopped, in lab order.
func (d *demo) runningNodes() []string {
	var out []string
	for _, h := range d.a.Nodes {
		if d.a.Running[h.Role] != nil {
			out = append(out, h.Role)
		}
	}
	return out
}

// saveState keeps what is needed to understand a failure: the router's view, the
// state of every namespace and every process log, in a file that outlives the lab.
func (d *demo) saveState(dir string) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("mfdemo-failure-%s.log", time.Now().Format("20060102-150405")))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not save the lab state: %v\n", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "===== router: next hops of every VIP =====\n%s", d.a.Describe())
	if out, err := d.a.Bird.Show("protocols", "all"); err == nil {
		fmt.Fprintf(f, "\n===== birdc show protocols all =====\n%s", out)
	}
	d.a.WriteState(f)
	fmt.Fprintf(os.Stderr, "\nThe state of the lab and every process log are in %s (configs in %s).\n", path, dir)
	for _, role := range d.runningNodes() {
		fmt.Fprintf(os.Stderr, "Last lines of %s's log:\n%s\n", role, indent(lastLines(d.a.Running[role].Log(), 10)))
	}
}

// lastLogLine returns the last line of a node's log holding every one of the
// substrings, without the timestamp and level that open it.
func lastLogLine(log string, substrings ...string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	for _, line := range slices.Backward(lines) {
		if !slices.ContainsFunc(substrings, func(s string) bool { return !strings.Contains(line, s) }) {
			if _, msg, ok := strings.Cut(line, " msg="); ok {
				return "msg=" + msg
			}
			return line
		}
	}
	return "(no log line with " + strings.Join(substrings, " ") + ")"
}

func runs(k lab.Kind) string {
	switch k {
	case lab.Client:
		return "the demo's requests"
	case lab.LBNode:
		return fmt.Sprintf("manifold run, AS %d", lab.NodeASN)
	case lab.Backend:
		return "nginx + manifold backend"
	}
	return ""
}

func roles(hosts []*lab.Host) []string {
	var out []string
	for _, h := range hosts {
		out = append(out, h.Role)
	}
	return out
}

func step(n int, title, explanation string) {
	fmt.Printf("\n%d. %s\n   %s\n", n, title, explanation)
}

func table() *tabwriter.Writer {
	return tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
}

// bar draws a percentage, one block per 2.5 %.
func bar(percent float64) string {
	return strings.Repeat("█", int(percent/2.5+0.5))
}

func indent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
		} else {
			b.WriteString("  " + strings.TrimRight(line, "\n") + "\n")
		}
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
