// Command cpbench measures how fast manifold's control plane moves traffic, on the
// active-active lab (as root, after `make build`):
//
//	go run ./test/lab/cpbench -manifold bin/manifold -json bench/results/parts/convergence.json
//
// lb1 and lb2 announce the VIPs all along; lb3 is the node under test. Every round
// measures, once each, how long the router takes to add lb3 as a next hop of the web
// VIPs when it starts (counted from the start of the process, and from the log line
// in which it announces them), to drop it when it is frozen (hold timer), killed (TCP
// session closes) or stopped with SIGTERM (graceful withdraw), and how long the nodes
// take to mark a failed backend down. It prints min/median/max against the targets and can
// write them as JSON. Timing lives here and never in the lab tests, whose machines
// may be slow.
//
// Times are seen by polling the router's routes and the nodes' APIs every pollEvery
// and taken when the poll that sees the change returns: they err on the slow side by
// up to one poll.
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
	"sync"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/test/lab"
)

const prefix = "mfcpb"

// The lab's tuning: BIRD's shortest hold time, and fast health checks.
const (
	holdTime  = 3 * time.Second
	drainTime = time.Second
)

var health = &lab.Health{Kind: "http", Port: 80, Path: "/", Interval: 500 * time.Millisecond, Timeout: 300 * time.Millisecond, Rise: 2, Fall: 2}

// bfdTimers are BFD's on the sessions of bfdSubject: the 100 ms × 3.
var bfdTimers = &lab.RouterBFD{Interval: 100 * time.Millisecond, Multiplier: 3}

const (
	subject = "lb3" // the node started and stopped; lb1 and lb2 keep the VIPs routed
	// bfdSubject runs all along with BFD on its session; it is frozen once a round, to
	// set BFD's detection beside the hold timer's.
	bfdSubject = "lb4"
	// pollEvery is the resolution of every time: finer would only load the machine
	// whose timing is measured (each poll runs ip or curl in a namespace).
	pollEvery = 10 * time.Millisecond
	// resumeBound is how long a node may take to be back in the routes once it
	// resumes: its speaker's connect retry (3 s) plus BIRD's error wait, which grows
	// with every failed session up to 4 s.
	resumeBound = 15 * time.Second
)

var webVIPs = []netip.Addr{lab.WebVIP4, lab.WebVIP6}

func main() {
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary (make build)")
	jsonPath := flag.String("json", "", "also write the results to this file as JSON")
	rounds := flag.Int("rounds", 5, "rounds; each measures every transition once")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *manifold, *jsonPath, *rounds)
	switch {
	case ctx.Err() != nil:
		fmt.Println("\nInterrupted; the lab has been removed.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ncpbench failed: %v\n", err)
		os.Exit(1)
	}
}

// bench is one run: the lab and what has been measured so far.
type bench struct {
	ctx context.Context
	a   *lab.ActiveActive

	start, announce, update, sigterm, sigkill, frozen, frozenBFD, backendDown *metric
}

func run(ctx context.Context, manifold, jsonPath string, rounds int) (err error) {
	if rounds < 1 {
		return fmt.Errorf("-rounds %d: at least 1", rounds)
	}
	if err := lab.Preflight("cpbench", &manifold, hostprog.Nginx, hostprog.Ethtool, hostprog.IP, hostprog.Bird, hostprog.Birdc, hostprog.Curl); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "mfcpb-")
	if err != nil {
		return err
	}
	began := time.Now()
	a, err := lab.NewActiveActive(lab.ActiveActiveSpec{
		Prefix: prefix, Dir: dir, Manifold: manifold,
		Nodes: 4, Backends: 2, Health: health,
		HoldTime: holdTime, DrainTime: drainTime, Password: "mfcpb-md5-key",
		BFD: bfdTimers, BFDNodes: []string{bfdSubject},
	})
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	defer func() {
		if err != nil && ctx.Err() == nil {
			saveState(a, dir)
		}
		if cerr := a.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
		if err == nil || ctx.Err() != nil {
			os.RemoveAll(dir)
		}
	}()
	removalBound := health.Interval*time.Duration(health.Fall) + health.Interval
	b := &bench{
		ctx:   ctx,
		a:     a,
		start: &metric{name: "node_start_to_next_hop", label: "node start → next hop"},
		// The announce target is for the announcement itself: from the moment the node
		// has both decided to announce and a session to announce on. On a cold start
		// the session is the slower part (GoBGP's first connect waits 1.5–2 s; a router
		// may back off after refused connects), reported on the row above it.
		announce: &metric{name: "announce_to_route", label: "VIP announced (log) → route"},
		update:   &metric{name: "announced_and_session_up_to_route", label: "announced and session up (logs) → route", target: time.Second},
		sigterm:  &metric{name: "sigterm_to_next_hop_gone", label: "SIGTERM → next hop gone", target: time.Second},
		sigkill:  &metric{name: "sigkill_to_next_hop_gone", label: "SIGKILL → next hop gone", target: holdTime},
		// the router's hold timer runs from the last keepalive it got, and its FIB
		// update and this poll come on top: the lab test's bound, hold time + 1 s
		frozen: &metric{name: "frozen_to_next_hop_gone", label: "SIGSTOP (frozen) → next hop gone", target: holdTime + time.Second},
		// BFD's detection time, multiplier × interval, and 100 ms for the router's FIB
		frozenBFD: &metric{name: "frozen_bfd_to_next_hop_gone", label: "SIGSTOP (frozen, BFD 100 ms × 3) → next hop gone",
			target: time.Duration(bfdTimers.Multiplier)*bfdTimers.Interval + 100*time.Millisecond},
		backendDown: &metric{name: "backend_failure_to_down", label: "backend failure → down on every node", target: removalBound},
	}
	fmt.Printf("control-plane benchmark: %d rounds on %d nodes (%s under test), %d backends; hold time %s, drain %s, "+
		"health %s every %s, fall %d, rise %d\n",
		rounds, len(a.Nodes), subject, len(a.Backends), holdTime, drainTime, health.Kind, health.Interval, health.Fall, health.Rise)

	for _, role := range []string{"lb1", "lb2", bfdSubject} {
		if err := a.StartNode(role); err != nil {
			return err
		}
	}
	for _, vip := range webVIPs {
		if _, err := a.WaitNextHops(vip, a.NodeAddrs(vip, "lb1", "lb2", bfdSubject), 10*time.Second); err != nil {
			return err
		}
	}
	for i := range rounds {
		if err := b.round(i+1, rounds); err != nil {
			return err
		}
	}

	fmt.Println()
	metrics := []*metric{b.start, b.announce, b.update, b.sigterm, b.sigkill, b.frozen, b.frozenBFD, b.backendDown}
	if err := printTable(os.Stdout, metrics); err != nil {
		return err
	}
	fmt.Printf("(targets hold for the slowest round; times err slow by up to one poll of %s; %s in all)\n",
		pollEvery, time.Since(began).Round(time.Second))
	if jsonPath != "" {
		if err := writePart(jsonPath, metrics); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", jsonPath)
	}
	return nil
}

// round measures every transition once. lb3 is stopped when it begins and when it
// ends; the restart in the middle is not measured, so that each transition has one
// sample per round.
func (b *bench) round(i, rounds int) error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	fmt.Printf("round %d/%d:", i, rounds)
	defer fmt.Println()

	st, err := b.startNode(true)
	if err != nil {
		return err
	}
	b.start.add(st.route)
	b.announce.add(st.announced)
	b.update.add(st.updated)
	fmt.Printf(" start %s (from the announce %s, once the session is up too %s)",
		st.route.Round(time.Millisecond), st.announced.Round(time.Millisecond), st.updated.Round(time.Millisecond))

	frozen, resumed, err := b.freeze(subject, holdTime+2*time.Second)
	if err != nil {
		return err
	}
	b.frozen.add(frozen)
	fmt.Printf(", frozen %s (back %s after SIGCONT)", frozen.Round(time.Millisecond), resumed.Round(time.Millisecond))

	frozen, resumed, err = b.freeze(bfdSubject, holdTime+2*time.Second)
	if err != nil {
		return err
	}
	b.frozenBFD.add(frozen)
	fmt.Printf(", frozen with BFD %s (back %s after SIGCONT)", frozen.Round(time.Millisecond), resumed.Round(time.Millisecond))

	down, err := b.failBackend("be1")
	if err != nil {
		return err
	}
	b.backendDown.add(down)
	fmt.Printf(", backend down %s", down.Round(time.Millisecond))

	killed, err := b.stop(syscall.SIGKILL)
	if err != nil {
		return err
	}
	b.sigkill.add(killed)
	fmt.Printf(", SIGKILL %s", killed.Round(time.Millisecond))

	if _, err := b.startNode(false); err != nil {
		return err
	}
	termed, err := b.stop(syscall.SIGTERM)
	if err != nil {
		return err
	}
	b.sigterm.add(termed)
	fmt.Printf(", SIGTERM %s", termed.Round(time.Millisecond))
	return nil
}

// startTimes are the times to the route of a node that starts, each the slower of
// the two web VIPs.
type startTimes struct {
	route time.Duration // from the start of the process
	// announced is from the node's "VIP announced" log line. The node health-checks
	// its way to announcing sooner than its BGP session comes up, so this includes
	// the session's set-up.
	announced time.Duration
	// updated is from that line or the session's "BGP peer up", whichever came later:
	// the UPDATE's way through the router alone.
	updated time.Duration
}

// startNode starts lb3 and waits for it to be a next hop of both web VIPs. If measure
// is set, it returns how long that took.
func (b *bench) startNode(measure bool) (startTimes, error) {
	t0 := time.Now()
	if err := b.a.StartNode(subject); err != nil {
		return startTimes{}, err
	}
	routed, err := b.waitHop(true, 10*time.Second)
	if err != nil || !measure {
		return startTimes{}, err
	}
	n := b.a.Running[subject]
	sessionUp, err := loggedAt(n, t0, `msg="BGP peer up"`, "peer="+b.a.Host(subject).Gateway4.String())
	if err != nil {
		return startTimes{}, err
	}
	st := startTimes{route: latest(routed).Sub(t0)}
	for i, vip := range webVIPs {
		announced, err := loggedAt(n, t0, `msg="VIP announced"`, "vip="+vip.String())
		if err != nil {
			return startTimes{}, err
		}
		st.announced = max(st.announced, routed[i].Sub(announced))
		st.updated = max(st.updated, routed[i].Sub(latest([]time.Time{announced, sessionUp})))
	}
	return st, nil
}

// stop sends sig to lb3 and returns how long until it is no next hop of either web
// VIP. It returns once the node has exited.
func (b *bench) stop(sig syscall.Signal) (time.Duration, error) {
	t0 := time.Now()
	stopped := make(chan error, 1)
	// owned by stop, which waits for it: StopNode blocks until the node exits, after
	// its drain for a SIGTERM, while the route is watched here
	go func() { stopped <- b.a.StopNode(subject, sig) }()
	gone, err := b.waitHop(false, holdTime+2*time.Second)
	if err := errors.Join(err, <-stopped); err != nil {
		return 0, fmt.Errorf("%s %v: %w", subject, sig, err)
	}
	return latest(gone).Sub(t0), nil
}

// freeze stops a node with SIGSTOP: its sessions stay open but silent, so only the
// router's hold timer (or BFD, on bfdSubject's session) removes it. It returns how long that took, then resumes the node
// and returns how long it took to be a next hop again. A round freezes the node as
// soon as it is routed: its last message is then the UPDATE just sent rather than a
// keepalive up to a second old, and the hold timer runs its whole length, the worst
// case the target bounds.
func (b *bench) freeze(role string, bound time.Duration) (gone, back time.Duration, err error) {
	n := b.a.Running[role]
	t0 := time.Now()
	if err := n.Signal(syscall.SIGSTOP); err != nil {
		return 0, 0, err
	}
	defer n.Signal(syscall.SIGCONT) // on every path: a stopped node would stall the teardown
	times, err := b.waitHopOf(role, false, bound)
	if err != nil {
		return 0, 0, fmt.Errorf("frozen %s: %w", role, err)
	}
	gone = latest(times).Sub(t0)
	t1 := time.Now()
	if err := n.Signal(syscall.SIGCONT); err != nil {
		return 0, 0, err
	}
	times, err = b.waitHopOf(role, true, resumeBound)
	if err != nil {
		return 0, 0, fmt.Errorf("%s resumed: %w", role, err)
	}
	return gone, latest(times).Sub(t1), nil
}

// failBackend stops a backend's nginx and returns how long until every node gives it
// the state down in the IPv4 web service; it then restarts nginx and waits until every
// node has it up again.
func (b *bench) failBackend(role string) (time.Duration, error) {
	be := b.a.Host(role)
	t0 := time.Now()
	if err := b.a.StopNginx(role); err != nil {
		return 0, err
	}
	down, err := b.waitBackend(be.Addr4, "down", 5*time.Second)
	if err != nil {
		return 0, err
	}
	if err := b.a.StartNginx(role); err != nil {
		return 0, err
	}
	if _, err := b.waitBackend(be.Addr4, "up", 5*time.Second); err != nil {
		return 0, err
	}
	return latest(down).Sub(t0), nil
}

// waitHop waits until lb3 is (present) or is not a next hop of each web VIP, and
// returns when each was first seen so.
func (b *bench) waitHop(present bool, timeout time.Duration) ([]time.Time, error) {
	return b.waitHopOf(subject, present, timeout)
}

// waitHopOf is waitHop of node role.
func (b *bench) waitHopOf(role string, present bool, timeout time.Duration) ([]time.Time, error) {
	var conds []func() error
	for _, vip := range webVIPs {
		addr := b.a.NodeAddrs(vip, role)[0]
		conds = append(conds, func() error {
			hops, err := b.a.NextHops(vip)
			if err != nil {
				return err
			}
			if slices.Contains(hops, addr) != present {
				return fmt.Errorf("route to %s: next hops %v", vip, hops)
			}
			return nil
		})
	}
	return b.watch(timeout, conds...)
}

// waitBackend waits until every node gives the backend at addr the state want in
// the IPv4 web service, and returns when each node was first seen so.
func (b *bench) waitBackend(addr netip.Addr, want wire.BackendState, timeout time.Duration) ([]time.Time, error) {
	var conds []func() error
	for _, n := range b.a.Nodes {
		conds = append(conds, func() error {
			st, err := b.a.Status(n.Role)
			if err != nil {
				return err
			}
			got, err := lab.BackendState(st, "web-v4", addr)
			if err == nil && got != want {
				err = fmt.Errorf("%s: backend %s is %s, want %s", n.Role, addr, got, want)
			}
			return err
		})
	}
	return b.watch(timeout, conds...)
}

// watch polls every condition on a goroutine of its own until it holds, for at most
// timeout or until the run is interrupted, and returns when each was first seen to
// hold.
func (b *bench) watch(timeout time.Duration, conds ...func() error) ([]time.Time, error) {
	times := make([]time.Time, len(conds))
	errs := make([]error, len(conds))
	deadline := time.Now().Add(timeout)
	var wg sync.WaitGroup
	for i, cond := range conds {
		wg.Go(func() {
			for {
				err := cond()
				if err == nil {
					times[i] = time.Now()
					return
				}
				if time.Now().After(deadline) {
					errs[i] = fmt.Errorf("after %s: %w", timeout, err)
					return
				}
				select {
				case <-b.ctx.Done():
					errs[i] = b.ctx.Err()
					return
				case <-time.After(pollEvery):
				}
			}
		})
	}
	wg.Wait()
	return times, errors.Join(errs...)
}

// loggedAt returns the time of the node's first log line since the given time that
// holds msg and, as a field of its own, field. The log file carries the node's earlier
// runs too, hence since.
func loggedAt(n *lab.Node, since time.Time, msg, field string) (time.Time, error) {
	var at time.Time
	_, err := n.WaitLog(2*time.Second, func(line string) bool {
		if !strings.Contains(line, msg) || !slices.Contains(strings.Fields(line), field) {
			return false
		}
		stamp, _, _ := strings.Cut(line, " ")
		t, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(stamp, "time="))
		// slog writes milliseconds: compare at that precision
		if err != nil || t.Before(since.Truncate(time.Millisecond)) {
			return false
		}
		at = t
		return true
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: no %s %s: %w", subject, msg, field, err)
	}
	return at, nil
}

func latest(times []time.Time) time.Time {
	return slices.MaxFunc(times, time.Time.Compare)
}

// saveState writes the router's view, the state of every namespace and every process
// log to a file that outlives the lab.
func saveState(a *lab.ActiveActive, dir string) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("mfcpb-failure-%s.log", time.Now().Format("20060102-150405")))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not save the lab state: %v\n", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "===== router: next hops of every VIP =====\n%s", a.Describe())
	if out, err := a.Bird.Show("protocols", "all"); err == nil {
		fmt.Fprintf(f, "\n===== birdc show protocols all =====\n%s", out)
	}
	a.WriteState(f)
	fmt.Fprintf(os.Stderr, "\nThe state of the lab and every process log are in %s (configs in %s).\n", path, dir)
}
