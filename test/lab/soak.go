package lab

// The chaos soak: a fleet of three nodes behind FRR (BFD on), three etcd members,
// backends with agents, 200 long-lived connections and a steady stream of new ones,
// and a fault every round, drawn from a seeded RNG so that a failing run can be
// replayed. TestSoak runs 20 rounds in `make test`; `make soak` runs ROUNDS of them.
//
//	round: scan the nodes' logs ─► one action (a fault, a repair, a write, a reload)
//	       ─► wait, within the round's budget, for what it should cause
//	       ─► one request on every long-lived connection; classify each broken one
//	end:   repair every fault ─► wait for the routes and the fleet to agree
//	       ─► read every written weight back ─► check the writes (porcupine)
//	       ─► compare what the surviving processes hold with the start
//
// What counts as broken (docs/security.md, "Chaos soak"): the README promises that a
// flow keeps its backend when the router moves it to another node because every node
// has the same Maglev table — which holds only while the table is the one the flow
// began with. A node keeps no state for a flow it never saw, and the nodes share no
// flow state. So a broken connection is excused when its backend's server was stopped
// or a node marked its backend down during its life ("backend"), or when, during its
// life, both the router's route to its VIP and the service's Maglev table changed (a
// write to the service, a backend marked up or down by a node) and a new connection
// from the same 5-tuple now reaches another backend ("moved": the flow went to a node
// that never saw it, whose table, changed since the flow began, picks another
// backend). Every other broken connection counts against the goal of 0.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// Fault classes: the actions a round draws from.
const (
	SoakNodeKill     = "node-kill"     // SIGKILL a node (restarted by a later round)
	SoakNodeRestart  = "node-restart"  // start the killed node again
	SoakNodeStop     = "node-stop"     // SIGSTOP a node: failed until SIGCONT
	SoakNodeCont     = "node-cont"     // SIGCONT the stopped node
	SoakBackendStop  = "backend-stop"  // stop a backend's HTTP server
	SoakBackendStart = "backend-start" // start it again
	SoakEtcdKill     = "etcd-kill"     // SIGKILL an etcd member
	SoakEtcdRestart  = "etcd-restart"  // start it again on its data
	SoakWrite        = "api-write"     // 1-3 concurrent weight writes through random nodes
	SoakReload       = "reload"        // SIGHUP a node
	// SoakRecovery is not drawn: it is the end, every fault repaired.
	SoakRecovery = "recovery"
)

var soakClasses = []string{SoakNodeKill, SoakNodeRestart, SoakNodeStop, SoakNodeCont, SoakBackendStop,
	SoakBackendStart, SoakEtcdKill, SoakEtcdRestart, SoakWrite, SoakReload, SoakRecovery}

const (
	// SoakRoundBudget bounds what a round waits for the consequences of its action;
	// a round whose action itself takes longer (a node's start) runs over it, and the
	// report says by how much.
	SoakRoundBudget = 5 * time.Second
	// soakConverge bounds the wait for the routes and the fleet at the start and the
	// end: a node resumed from SIGSTOP may take two BGP connect retries to be back
	// (TestBFD says why).
	soakConverge = 40 * time.Second
	// soakExerciseWorkers send the requests on the long-lived connections.
	soakExerciseWorkers = 16
	// soakStall bounds one request on a long-lived connection: a connection whose
	// packets were lost while the router moved it answers late, once TCP has sent
	// them again (after up to 3 s of backoff), and is not broken.
	soakStall = 10 * time.Second
	// The long-lived connections take their client ports from soakPorts, each one a
	// new port, in turn (wrapping after 35 536 connections); the steady stream takes
	// the client's ephemeral ports, which the soak moves below them
	// (soakEphemeralPorts). A connection on the 5-tuple of an earlier one meets, on a
	// node the earlier one went through, the earlier one's flow entry, pinned to its
	// backend: if the router moves it there, it is reset (docs/security.md).
	soakPortsFirst, soakPortsLast = 30000, 65535
	soakEphemeralPorts            = "10000 29999"
	// SoakToken is the nodes' API token: every write carries it.
	SoakToken = "soak-api-token-0123456789"
)

// Bounds of the growth of a manifold process from the end of the round it last started in
// (or the soak's start) to the end of the soak,
// every fault repaired: a leak of one goroutine or descriptor per event
// passes them within a few hundred rounds, not a bounded working set.
const (
	soakMaxGoroutineGrowth = 50
	soakMaxFDGrowth        = 32
	soakMaxRSSGrowth       = 64 << 20 // or half the start's RSS, whichever is more
)

// SoakTopology is the topology of the soak: three nodes of a fleet (an etcd member on
// each), three backends, FRR with BFD. The caller sets Prefix, Dir, Logf and Manifold.
func SoakTopology() ActiveActiveSpec {
	return ActiveActiveSpec{
		Router: "frr", Nodes: 3, Backends: 3, Fleet: true, APIToken: SoakToken,
		// a check slow enough not to flap on a loaded 2-core machine: down after 3 s
		Health:    &Health{Kind: "http", Port: 80, Path: "/", Interval: time.Second, Timeout: 800 * time.Millisecond, Rise: 2, Fall: 3},
		HoldTime:  3 * time.Second,
		DrainTime: time.Second,
		BFD:       &RouterBFD{Interval: 300 * time.Millisecond, Multiplier: 3},
	}
}

// SoakSpec sizes a soak.
type SoakSpec struct {
	Rounds int
	Seed   uint64
	Conns  int // long-lived connections, half to each web VIP
	Logf   func(format string, args ...any)
}

// SoakClass is what the rounds of one fault class did.
type SoakClass struct {
	Name   string `json:"name"`
	Rounds int    `json:"rounds"`
	// Broken counts long-lived connections that broke though neither excuse holds:
	// the goal is 0.
	Broken        int `json:"broken_survivors"`
	BrokenBackend int `json:"broken_backend"` // excused: backend stopped or marked down
	BrokenMoved   int `json:"broken_moved"`   // excused: moved after a ring change
	// Requests of the steady stream during the class's rounds, and how many failed.
	Requests       int `json:"requests"`
	FailedRequests int `json:"failed_requests"`
}

// SoakWrites is what became of the API writes.
type SoakWrites struct {
	Sent    int `json:"sent"`
	Acked   int `json:"acked"`   // answered 2xx
	Refused int `json:"refused"` // answered 4xx (409: a conflict): changed nothing
	Unknown int `json:"unknown"` // no answer, or 5xx: may or may not have been applied
	// Lost counts acknowledged writes neither in the final state nor superseded by a
	// later acknowledged one: the goal is 0.
	Lost         int  `json:"lost"`
	Linearizable bool `json:"linearizable"` // porcupine's verdict on the history
}

// SoakGrowth is a process running at the end of the soak, from the end of the round it
// was last started in (0: it ran from the start).
type SoakGrowth struct {
	Process    string    `json:"process"`
	Manifold   bool      `json:"manifold"` // ours: its growth is bounded
	SinceRound int       `json:"since_round"`
	Start, End ProcStats `json:"-"`
	StartJSON  procJSON  `json:"start"`
	EndJSON    procJSON  `json:"end"`
}

type procJSON struct {
	RSS        uint64 `json:"rss_bytes"`
	FDs        int    `json:"fds"`
	Threads    int    `json:"threads"`
	Goroutines int    `json:"goroutines"`
}

// Excess says how the growth exceeds the soak's bounds; "" when it does not (or the
// process is not manifold's).
func (g SoakGrowth) Excess() string {
	if !g.Manifold {
		return ""
	}
	var out []string
	if g.Start.Goroutines >= 0 && g.End.Goroutines > g.Start.Goroutines+soakMaxGoroutineGrowth {
		out = append(out, fmt.Sprintf("goroutines %d → %d", g.Start.Goroutines, g.End.Goroutines))
	}
	if g.End.FDs > g.Start.FDs+soakMaxFDGrowth {
		out = append(out, fmt.Sprintf("descriptors %d → %d", g.Start.FDs, g.End.FDs))
	}
	if g.End.RSS > g.Start.RSS+max(g.Start.RSS/2, soakMaxRSSGrowth) {
		out = append(out, fmt.Sprintf("RSS %s → %s", mib(g.Start.RSS), mib(g.End.RSS)))
	}
	return strings.Join(out, ", ")
}

// SoakReport is the outcome of a soak.
type SoakReport struct {
	Seed     uint64        `json:"seed"`
	Rounds   int           `json:"rounds"`
	Conns    int           `json:"conns"`
	Duration time.Duration `json:"duration_ns"`
	MaxRound time.Duration `json:"max_round_ns"` // the longest round
	// OverBudget counts rounds longer than SoakRoundBudget.
	OverBudget int          `json:"rounds_over_budget"`
	Classes    []*SoakClass `json:"classes"`
	Writes     SoakWrites   `json:"writes"`
	Growth     []SoakGrowth `json:"growth"`
	// Problems describes every broken surviving connection, every lost write and
	// every growth past the bounds (the first 50).
	Problems []string `json:"problems"`
}

// BrokenSurvivors is the total of the classes' Broken.
func (r *SoakReport) BrokenSurvivors() int {
	n := 0
	for _, c := range r.Classes {
		n += c.Broken
	}
	return n
}

// Failures lists what misses the soak's goals: broken surviving connections, lost
// writes, growth past the bounds.
func (r *SoakReport) Failures() []string {
	var out []string
	if n := r.BrokenSurvivors(); n > 0 {
		out = append(out, fmt.Sprintf("%d long-lived connections broke whose node and backend survived", n))
	}
	if r.Writes.Lost > 0 || !r.Writes.Linearizable {
		out = append(out, fmt.Sprintf("%d acknowledged writes lost (linearizable: %v)", r.Writes.Lost, r.Writes.Linearizable))
	}
	for _, g := range r.Growth {
		if e := g.Excess(); e != "" {
			out = append(out, g.Process+" grew: "+e)
		}
	}
	return out
}

// soak is one run.
type soak struct {
	a      *ActiveActive
	spec   SoakSpec
	rng    *rand.Rand
	logf   func(format string, args ...any)
	report *SoakReport
	// problemMu guards report.Problems: the concurrent writes report theirs
	problemMu sync.Mutex
	class     map[string]*SoakClass
	origin    time.Time // of the write history's timestamps

	routes *RouteWatch
	load   *Load
	conns  []*soakConn

	// the faults in force: at most one node, one backend, one etcd member
	killed, frozen, stoppedBackend string
	// baseline is each process's figures at the end of the round it was last started
	// in (round 0: the soak's start), the other end of its growth
	baseline   map[string]soakBaseline
	downMember *EtcdMember

	// events that excuse a broken connection, counted since the start
	stops map[string]int     // server stops, by backend role
	downs map[netip.Addr]int // "backend health changed ... up=false" lines, by address
	// rings counts what changes a web service's Maglev table, by VIP: the writes to it
	// and the health changes (either way) of its backends in the nodes' logs
	rings   map[netip.Addr]int
	logRead map[string]int64 // how far each node's log has been scanned

	writes  writeHistory
	written map[string]int // the last weight written (or tried) to each key

	lastPort int // the client port last given to a long-lived connection
}

// soakConn is one long-lived connection and what it met since it was opened.
type soakConn struct {
	vip     netip.Addr
	c       *KeepAliveConn // nil: to be dialled at the next exercise
	port    int            // the client's
	backend string
	routes  uint64 // route changes of vip when opened
	stops   int    // stops of backend's server when opened
	downs   int    // down marks of backend when opened
	rings   int    // changes of vip's table when opened
}

// RunSoak runs a soak on a (SoakTopology, built by NewActiveActive): it starts the
// nodes, runs the rounds and returns the report. An error is a soak that could not
// run (the lab failed, a node would not start); the goals are the report's.
func RunSoak(ctx context.Context, a *ActiveActive, spec SoakSpec) (*SoakReport, error) {
	s := &soak{
		a: a, spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15)),
		logf:   spec.Logf,
		report: &SoakReport{Seed: spec.Seed, Rounds: spec.Rounds, Conns: spec.Conns},
		class:  map[string]*SoakClass{}, origin: time.Now(),
		stops: map[string]int{}, downs: map[netip.Addr]int{}, rings: map[netip.Addr]int{}, logRead: map[string]int64{}, written: map[string]int{},
	}
	for _, name := range soakClasses {
		c := &SoakClass{Name: name}
		s.class[name] = c
		s.report.Classes = append(s.report.Classes, c)
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if err := s.startUp(); err != nil {
		return nil, err
	}
	defer s.routes.Close()
	s.load = StartLoad(a.Client.NS, []netip.Addr{WebVIP4, WebVIP6})
	defer s.load.Finish()
	if err := a.Client.Sysctl(map[string]string{"net.ipv4.ip_local_port_range": soakEphemeralPorts}); err != nil {
		return nil, err
	}
	for i := range spec.Conns {
		vip := []netip.Addr{WebVIP4, WebVIP6}[i%2]
		s.conns = append(s.conns, &soakConn{vip: vip, port: s.newPort()})
	}
	defer func() {
		for _, c := range s.conns {
			if c.c != nil {
				c.c.Close()
			}
		}
	}()
	s.scanLogs()
	if missing := s.dialMissing(); missing > 0 {
		return nil, fmt.Errorf("soak: %d of %d long-lived connections could not be opened", missing, spec.Conns)
	}
	start, err := s.processStats(nil)
	if err != nil {
		return nil, err
	}
	s.baseline = map[string]soakBaseline{}
	for name, p := range start {
		s.baseline[name] = soakBaseline{soakProc: p}
	}
	began := time.Now()
	for r := 1; r <= spec.Rounds; r++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.round(r); err != nil {
			return nil, fmt.Errorf("soak round %d (seed %d): %w", r, spec.Seed, err)
		}
	}
	s.report.Duration = time.Since(began)
	if err := s.recover(); err != nil {
		return nil, fmt.Errorf("soak (seed %d): %w", spec.Seed, err)
	}
	if err := s.checkWrites(); err != nil {
		return nil, err
	}
	end, err := s.processStats(nil)
	if err != nil {
		return nil, err
	}
	for name, e := range end {
		if st, ok := s.baseline[name]; ok && e.pid == st.pid {
			g := SoakGrowth{Process: name, Manifold: st.manifold, SinceRound: st.round, Start: st.ProcStats, End: e.ProcStats}
			g.StartJSON, g.EndJSON = procJSON(g.Start), procJSON(g.End)
			s.report.Growth = append(s.report.Growth, g)
			if x := g.Excess(); x != "" {
				s.problem("%s grew past the bounds: %s", name, x)
			}
		}
	}
	slices.SortFunc(s.report.Growth, func(x, y SoakGrowth) int { return strings.Compare(x.Process, y.Process) })
	if err := s.routes.Err(); err != nil {
		return nil, fmt.Errorf("soak: the route watch failed, changes may have gone uncounted: %w", err)
	}
	return s.report, nil
}

func (s *soak) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.logf("soak: %s", msg)
	s.problemMu.Lock()
	defer s.problemMu.Unlock()
	if len(s.report.Problems) < 50 {
		s.report.Problems = append(s.report.Problems, msg)
	}
}

// startUp starts every node and waits until the router routes the web VIPs over all
// of them and the fleet agrees.
func (s *soak) startUp() error {
	for _, n := range s.a.Nodes {
		if s.a.Running[n.Role] == nil {
			if err := s.a.StartNode(n.Role); err != nil {
				return err
			}
		}
	}
	var err error
	if s.routes, err = s.a.WatchRoutes(WebVIP4, WebVIP6); err != nil {
		return err
	}
	if _, err := s.a.WaitRoutes([]netip.Addr{WebVIP4, WebVIP6}, soakConverge, s.roles()...); err != nil {
		s.routes.Close()
		return fmt.Errorf("soak: the nodes' routes: %w", err)
	}
	if _, err := s.fleetAgrees(soakConverge); err != nil {
		s.routes.Close()
		return err
	}
	return nil
}

func (s *soak) roles() []string { return roles(s.a.Nodes) }

// usable are the nodes running and not stopped: their APIs answer.
func (s *soak) usable() []string {
	var out []string
	for _, r := range s.roles() {
		if s.a.Running[r] != nil && r != s.frozen {
			out = append(out, r)
		}
	}
	return out
}

// enabled are the actions the faults in force allow.
func (s *soak) enabled() []string {
	var out []string
	switch {
	case s.killed != "":
		out = append(out, SoakNodeRestart)
	case s.frozen != "":
		out = append(out, SoakNodeCont)
	default:
		out = append(out, SoakNodeKill, SoakNodeStop)
	}
	if s.stoppedBackend != "" {
		out = append(out, SoakBackendStart)
	} else {
		out = append(out, SoakBackendStop)
	}
	if s.downMember != nil {
		out = append(out, SoakEtcdRestart)
	} else {
		out = append(out, SoakEtcdKill)
	}
	return append(out, SoakWrite, SoakReload)
}

func (s *soak) pick(items []string) string { return items[s.rng.IntN(len(items))] }

// round runs one round.
func (s *soak) round(r int) error {
	start := time.Now()
	deadline := start.Add(SoakRoundBudget)
	action := s.pick(s.enabled())
	c := s.class[action]
	c.Rounds++
	sent0, failed0 := s.load.Counts()
	what, err := s.act(action, deadline)
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	broken := s.exercise(c)
	sent1, failed1 := s.load.Counts()
	c.Requests += sent1 - sent0
	c.FailedRequests += failed1 - failed0
	took := time.Since(start)
	s.report.MaxRound = max(s.report.MaxRound, took)
	if took > SoakRoundBudget {
		s.report.OverBudget++
	}
	s.logf("soak round %d/%d: %s %s (%s); %d long-lived connections broke; stream %d sent, %d failed",
		r, s.spec.Rounds, action, what, took.Round(time.Millisecond), broken, sent1-sent0, failed1-failed0)
	s.rebase(r)
	return nil
}

// soakBaseline is a process's figures at the end of the round it started in.
type soakBaseline struct {
	soakProc
	round int
}

// rebase takes the figures of each process started since the last round (a new pid),
// once its round is over: the start of the growth measured for it.
func (s *soak) rebase(round int) {
	fresh, err := s.processStats(func(name string, pid int) bool {
		b, ok := s.baseline[name]
		return ok && b.pid == pid
	})
	if err != nil {
		s.logf("soak: figures of the processes started in round %d: %v", round, err)
		return
	}
	for name, p := range fresh {
		s.baseline[name] = soakBaseline{soakProc: p, round: round}
	}
}

// act does one action and waits, until deadline, for what it should cause; it returns
// what it did. Its error is the lab's failure, not the program's.
func (s *soak) act(action string, deadline time.Time) (string, error) {
	a := s.a
	switch action {
	case SoakNodeKill, SoakNodeStop:
		role := s.pick(s.usable())
		if action == SoakNodeKill {
			if err := a.StopNode(role, syscall.SIGKILL); err != nil {
				return "", err
			}
			s.killed = role
		} else {
			if err := a.Running[role].Signal(syscall.SIGSTOP); err != nil {
				return "", err
			}
			s.frozen = role
		}
		s.settle(deadline, func() error { return s.routesOver(s.usable()) })
		return role, nil
	case SoakNodeRestart:
		role := s.killed
		if err := a.StartNode(role); err != nil {
			return "", err
		}
		s.killed = ""
		s.settle(deadline, func() error { return s.routesOver(s.roles()) })
		return role, nil
	case SoakNodeCont:
		role := s.frozen
		if err := a.Running[role].Signal(syscall.SIGCONT); err != nil {
			return "", err
		}
		s.frozen = ""
		s.settle(deadline, func() error { return s.routesOver(s.roles()) })
		return role, nil
	case SoakBackendStop:
		be := s.pick(roles(a.Backends))
		s.stops[be]++ // before the stop: the connections it breaks are excused
		if err := a.StopNginx(be); err != nil {
			return "", err
		}
		s.stoppedBackend = be
		s.settle(deadline, func() error { return s.backendState(be, wire.BackendDown) })
		return be, nil
	case SoakBackendStart:
		be := s.stoppedBackend
		if err := a.StartNginx(be); err != nil {
			return "", err
		}
		s.stoppedBackend = ""
		s.settle(deadline, func() error { return s.backendState(be, wire.BackendUp) })
		return be, nil
	case SoakEtcdKill:
		m := a.Etcd.Members[s.rng.IntN(len(a.Etcd.Members))]
		if err := a.Etcd.Kill(m); err != nil {
			return "", err
		}
		s.downMember = m
		return m.Name, nil
	case SoakEtcdRestart:
		m := s.downMember
		if err := a.Etcd.Start(m); err != nil {
			return "", err
		}
		s.downMember = nil
		s.settle(deadline, func() error { return a.Etcd.WaitHealthy(time.Until(deadline), m) })
		return m.Name, nil
	case SoakWrite:
		what := s.write()
		s.settle(deadline, func() error { _, err := s.fleetAgrees(0); return err })
		return what, nil
	case SoakReload:
		role := s.pick(s.usable())
		before, err := a.API[role].Status()
		if err != nil {
			return "", fmt.Errorf("%s before its reload: %w", role, err)
		}
		if err := a.Running[role].Reload(a.Configs[role]); err != nil {
			return "", err
		}
		s.settle(deadline, func() error {
			st, err := a.API[role].Status()
			if err == nil && st.Reloads <= before.Reloads {
				err = fmt.Errorf("%s: %d reloads, waiting for %d", role, st.Reloads, before.Reloads+1)
			}
			return err
		})
		return role, nil
	}
	return "", fmt.Errorf("unknown action %q", action)
}

// settle polls cond until it holds or deadline passes (a second is kept for the
// exercise); a fault's consequences that take longer come in later rounds.
func (s *soak) settle(deadline time.Time, cond func() error) {
	until := time.Until(deadline) - time.Second
	if until <= 0 {
		return
	}
	if err := Eventually(until, 20*time.Millisecond, cond); err != nil {
		s.logf("soak: not yet: %v", err)
	}
}

// routesOver is nil when the router routes both web VIPs over exactly nodes.
func (s *soak) routesOver(nodes []string) error {
	for _, vip := range []netip.Addr{WebVIP4, WebVIP6} {
		got, err := s.a.NextHops(vip)
		if err != nil {
			return err
		}
		want := s.a.NodeAddrs(vip, nodes...)
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			return fmt.Errorf("route to %s: next hops %v, want %v", vip, got, want)
		}
	}
	return nil
}

// backendState is nil when every usable node gives backend be the state want in both
// web services.
func (s *soak) backendState(be string, want wire.BackendState) error {
	h := s.a.Host(be)
	for _, role := range s.usable() {
		st, err := s.a.API[role].Status()
		if err != nil {
			return err
		}
		for svc, addr := range map[string]netip.Addr{"web-v4": h.Addr4, "web-v6": h.Addr6} {
			got, err := BackendState(st, svc, addr)
			if err != nil {
				return fmt.Errorf("%s: %w", role, err)
			}
			if got != want {
				return fmt.Errorf("%s: %s %s is %s, want %s", role, svc, addr, got, want)
			}
		}
	}
	return nil
}

// fleetAgrees waits up to timeout (0: one look) until every usable node reaches the
// store and has applied the same revision, the store's; it returns their statuses.
func (s *soak) fleetAgrees(timeout time.Duration) (map[string]*wire.Status, error) {
	var apis []*NodeAPI
	for _, role := range s.usable() {
		apis = append(apis, s.a.API[role])
	}
	var out map[string]*wire.Status
	err := Eventually(timeout, 20*time.Millisecond, func() error {
		var err error
		out, _, err = FleetAgrees(apis)
		return err
	})
	return out, err
}

// scanLogs counts the down marks of backends the nodes' logs hold since the last scan.
func (s *soak) scanLogs() {
	for _, n := range s.a.Nodes {
		path := filepath.Join(s.a.Dir, "manifold-"+n.Role+".log")
		f, err := os.Open(path)
		if err != nil {
			continue // not started yet
		}
		b, err := readFrom(f, s.logRead[path])
		f.Close()
		if err != nil {
			continue
		}
		// whole lines only: the rest is read again next time
		end := strings.LastIndexByte(string(b), '\n') + 1
		s.logRead[path] += int64(end)
		for line := range strings.Lines(string(b[:end])) {
			if !strings.Contains(line, `msg="backend health changed"`) {
				continue
			}
			_, rest, _ := strings.Cut(line, " backend=")
			addr, _, _ := strings.Cut(rest, " ")
			a, err := netip.ParseAddr(addr)
			if err != nil {
				continue
			}
			if strings.Contains(line, " up=false") {
				s.downs[a]++
			}
			if a.Is4() {
				s.rings[WebVIP4]++
			} else {
				s.rings[WebVIP6]++
			}
		}
	}
}

func readFrom(f *os.File, off int64) ([]byte, error) {
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// backendAddr is the address of backend role in vip's family.
func (s *soak) backendAddr(role string, vip netip.Addr) netip.Addr {
	h := s.a.Host(role)
	if vip.Is4() {
		return h.Addr4
	}
	return h.Addr6
}

// newPort is the next client port of soakPorts.
func (s *soak) newPort() int {
	if s.lastPort < soakPortsFirst || s.lastPort >= soakPortsLast {
		s.lastPort = soakPortsFirst
	} else {
		s.lastPort++
	}
	return s.lastPort
}

// dial opens c's connection from its port and records what it met so far.
func (s *soak) dial(c *soakConn) (string, error) {
	kc, err := DialKeepAlive(s.a.Client.NS, URL(c.vip, 80), c.port)
	if err != nil {
		return "", err
	}
	body, err := kc.DoWithin(soakStall)
	if err != nil {
		kc.Close()
		return "", err
	}
	c.c, c.backend = kc, strings.TrimSpace(body)
	c.routes = s.routes.Changes(c.vip)
	c.stops = s.stops[c.backend]
	c.downs = s.downs[s.backendAddr(c.backend, c.vip)]
	c.rings = s.rings[c.vip]
	return c.backend, nil
}

// dialMissing opens the connections that have none, and returns how many still have
// none.
func (s *soak) dialMissing() int {
	missing := 0
	for _, c := range s.conns {
		if c.c == nil {
			if _, err := s.dial(c); err != nil {
				missing++
			}
		}
	}
	return missing
}

// exercise sends one request on every long-lived connection, classifies each one that
// broke into c and replaces it; it returns how many broke.
func (s *soak) exercise(c *SoakClass) int {
	s.scanLogs()
	s.dialMissing()
	var mu sync.Mutex
	var broken []*soakConn
	errs := map[*soakConn]error{}
	work := make(chan *soakConn)
	var wg sync.WaitGroup
	for range soakExerciseWorkers {
		wg.Go(func() {
			for sc := range work {
				body, err := sc.c.DoWithin(soakStall)
				if err == nil && strings.TrimSpace(body) != sc.backend {
					err = fmt.Errorf("answered by %s", strings.TrimSpace(body))
				}
				if err != nil {
					mu.Lock()
					broken = append(broken, sc)
					errs[sc] = err
					mu.Unlock()
				}
			}
		})
	}
	for _, sc := range s.conns {
		if sc.c != nil {
			work <- sc
		}
	}
	close(work)
	wg.Wait()
	s.scanLogs()
	for _, sc := range broken {
		s.classify(c, sc, errs[sc])
	}
	return len(broken)
}

// classify decides whether a broken connection is excused (see the top of the file),
// counts it in c and replaces it.
func (s *soak) classify(c *SoakClass, sc *soakConn, cause error) {
	sc.c.Close()
	sc.c = nil
	was, port := sc.backend, sc.port
	// its replacement, from a new port (or at the next exercise)
	defer func() {
		sc.port = s.newPort()
		s.dial(sc)
	}()
	if s.stops[was] > sc.stops || s.downs[s.backendAddr(was, sc.vip)] > sc.downs || s.stoppedBackend == was {
		c.BrokenBackend++
		return
	}
	moved := s.routes.Changes(sc.vip) > sc.routes && s.rings[sc.vip] > sc.rings
	// the same 5-tuple again: where the ring of the node the router now sends it to
	// puts it (a SYN takes no flow entry); closed with a RST, which ends its flow
	var now string
	err := Eventually(2*soakStall, 100*time.Millisecond, func() error {
		probe := &soakConn{vip: sc.vip, port: port}
		var err error
		if now, err = s.dial(probe); err == nil {
			probe.c.Close()
		}
		return err
	})
	switch {
	case err == nil && now != was && moved:
		c.BrokenMoved++
		return
	case err != nil:
		s.problem("%s: connection from port %d to %s (backend %s) broke: %v; its 5-tuple could not be dialled again: %v",
			c.Name, port, sc.vip, was, cause, err)
	case now == was:
		s.problem("%s: connection from port %d to %s broke (%v), though its backend %s ran throughout and a new connection from the same port reaches it",
			c.Name, port, sc.vip, cause, was)
	default:
		s.problem("%s: connection from port %d to %s broke (%v), though its backend %s ran throughout and the route to %s or its Maglev table did not change (the same port now reaches %s)",
			c.Name, port, sc.vip, cause, was, sc.vip, now)
	}
	c.Broken++
}

// write sends 1-3 concurrent weight writes through distinct usable nodes, each to a
// random backend of a web service, and records them in the history.
func (s *soak) write() string {
	via := slices.Clone(s.usable())
	s.rng.Shuffle(len(via), func(i, j int) { via[i], via[j] = via[j], via[i] })
	via = via[:1+s.rng.IntN(min(3, len(via)))]
	type w struct {
		via, key, path string
		value          int
	}
	var ws []w
	for _, role := range via {
		svc := s.pick([]string{"web-v4", "web-v6"})
		vip := map[string]netip.Addr{"web-v4": WebVIP4, "web-v6": WebVIP6}[svc]
		addr := s.backendAddr(s.pick(roles(s.a.Backends)), vip)
		key := svc + "/" + addr.String()
		s.rings[vip]++                              // before the write: it may change the table whatever its answer
		s.written[key] = max(s.written[key], 1) + 1 // every write of a key writes a new value
		ws = append(ws, w{via: role, key: key, value: s.written[key],
			path: "/api/v1/services/" + svc + "/backends/" + addr.String() + "/weight"})
	}
	var wg sync.WaitGroup
	for _, x := range ws {
		wg.Go(func() {
			call := s.now()
			code, body, err := s.a.API[x.via].Call("POST", x.path, fmt.Sprintf(`{"weight": %d}`, x.value))
			s.writes.add(x.key, x.value, call, s.now(), code, err, body)
			if err == nil && code/100 == 4 && code != http.StatusConflict {
				// only a conflict is expected: any other refusal is the soak's mistake
				s.problem("write %s=%d via %s refused: %s", x.key, x.value, x.via, answer(code, err, body))
			}
		})
	}
	wg.Wait()
	var desc []string
	for _, x := range ws {
		desc = append(desc, fmt.Sprintf("%s=%d via %s", x.key, x.value, x.via))
	}
	return strings.Join(desc, ", ")
}

func (s *soak) now() int64 { return int64(time.Since(s.origin)) }

// recover repairs every fault, waits until the routes and the fleet agree, and sends
// the last request on every connection.
func (s *soak) recover() error {
	a := s.a
	c := s.class[SoakRecovery]
	c.Rounds++
	sent0, failed0 := s.load.Counts()
	if s.killed != "" {
		if err := a.StartNode(s.killed); err != nil {
			return err
		}
		s.killed = ""
	}
	if s.frozen != "" {
		if err := a.Running[s.frozen].Signal(syscall.SIGCONT); err != nil {
			return err
		}
		s.frozen = ""
	}
	if s.stoppedBackend != "" {
		if err := a.StartNginx(s.stoppedBackend); err != nil {
			return err
		}
		s.stoppedBackend = ""
	}
	if m := s.downMember; m != nil {
		if err := a.Etcd.Start(m); err != nil {
			return err
		}
		s.downMember = nil
	}
	if err := a.Etcd.WaitHealthy(soakConverge, a.Etcd.Members...); err != nil {
		return err
	}
	if _, err := a.WaitRoutes([]netip.Addr{WebVIP4, WebVIP6}, soakConverge, s.roles()...); err != nil {
		return fmt.Errorf("the routes after the repairs: %w", err)
	}
	for _, be := range a.Backends {
		if err := Eventually(soakConverge, 50*time.Millisecond, func() error { return s.backendState(be.Role, wire.BackendUp) }); err != nil {
			return fmt.Errorf("the backends after the repairs: %w", err)
		}
	}
	broken := s.exercise(c)
	sent1, failed1 := s.load.Counts()
	c.Requests += sent1 - sent0
	c.FailedRequests += failed1 - failed0
	s.logf("soak recovery: every fault repaired; %d long-lived connections broke", broken)
	return nil
}

// checkWrites reads every key back through every node, once the fleet agrees, and
// checks the history: each acknowledged write is in the final state or superseded.
func (s *soak) checkWrites() error {
	call := s.now()
	sts, err := s.fleetAgrees(soakConverge)
	if err != nil {
		return fmt.Errorf("the fleet after the repairs: %w", err)
	}
	ret := s.now()
	for _, key := range s.writes.keys() {
		svc, addr, _ := strings.Cut(key, "/")
		final := -1
		for _, role := range s.roles() {
			w, err := statusWeight(sts[role], svc, addr)
			if err != nil {
				return err
			}
			if final >= 0 && w != final {
				s.problem("%s: the nodes agree on the revision but give weights %d and %d", key, final, w)
			}
			final = w
		}
		s.writes.read(key, final, call, ret)
	}
	s.report.Writes = s.writes.check(s.problem)
	return nil
}

func statusWeight(st *wire.Status, svc, addr string) (int, error) {
	sv, ok := st.Service(svc)
	if !ok {
		return 0, fmt.Errorf("%s: no service %s", st.Node, svc)
	}
	b, ok := sv.Backend(addr)
	if !ok {
		return 0, fmt.Errorf("%s: %s has no backend %s", st.Node, svc, addr)
	}
	return int(b.Weight), nil
}

// processStats reads what every process of the lab holds, by name.
func (s *soak) processStats(known func(name string, pid int) bool) (map[string]soakProc, error) {
	out := map[string]soakProc{}
	add := func(p *Process, manifold bool, stats func() (ProcStats, error)) error {
		if p == nil || !p.Running() || known != nil && known(p.Name, p.Pid()) {
			return nil
		}
		st, err := stats()
		if err != nil {
			return err
		}
		out[p.Name] = soakProc{ProcStats: st, pid: p.Pid(), manifold: manifold}
		return nil
	}
	for _, role := range s.roles() {
		if n := s.a.Running[role]; n != nil && role != s.frozen { // a stopped node's API does not answer
			if err := add(n.Process, true, n.Stats); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range s.a.Agents {
		if err := add(p, true, p.Stats); err != nil {
			return nil, err
		}
	}
	var others []*Process
	for _, m := range s.a.Etcd.Members {
		others = append(others, m.Proc)
	}
	if f := s.a.FRR; f != nil {
		others = append(others, f.Zebra, f.BGPd, f.BFDd)
	}
	for _, p := range others {
		if p != nil {
			if err := add(p, false, p.Stats); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

type soakProc struct {
	ProcStats
	pid      int
	manifold bool
}

// weightOp is an operation of the write history: a write of value to key, or the
// final read of key (value: what it read).
type weightOp struct {
	key   string
	write bool
	value int
}

// writeHistory is the history of the soak's writes, for porcupine.
type writeHistory struct {
	mu    sync.Mutex
	ops   []porcupine.Operation
	stats SoakWrites
}

// add records a write's outcome: 2xx acknowledged, 4xx refused (it changed nothing:
// left out), anything else unknown (it may have been applied, at any time after its
// call).
func (h *writeHistory) add(key string, value int, call, ret int64, code int, err error, body []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Sent++
	switch {
	case err == nil && code/100 == 2:
		h.stats.Acked++
	case err == nil && code/100 == 4:
		h.stats.Refused++
		return
	default:
		h.stats.Unknown++
		ret = math.MaxInt64
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: len(h.ops), Input: weightOp{key: key, write: true, value: value},
		Call: call, Return: ret, Metadata: answer(code, err, body)})
}

// answer describes a write's answer in one short line.
func answer(code int, err error, body []byte) string {
	if err != nil {
		return err.Error()
	}
	if code/100 == 2 {
		return strconv.Itoa(code)
	}
	return fmt.Sprintf("%d %s", code, bytes.TrimSpace(body[:min(len(body), 200)]))
}

func (h *writeHistory) read(key string, value int, call, ret int64) {
	h.ops = append(h.ops, porcupine.Operation{ClientId: len(h.ops), Input: weightOp{key: key}, Output: value, Call: call, Return: ret})
}

func (h *writeHistory) keys() []string {
	var ks []string
	for _, op := range h.ops {
		if k := op.Input.(weightOp).key; !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// weightModel is a register per key, every key starting at weight 1 (the imported
// services' weights).
var weightModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range ops {
			k := op.Input.(weightOp).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return 1 },
	Step: func(state, input, output any) (bool, any) {
		in := input.(weightOp)
		if in.write {
			return true, in.value
		}
		return output.(int) == state.(int), state
	},
}

// check runs porcupine over the history and counts the acknowledged writes lost: of a
// key whose history is not linearizable, each acknowledged write that no acknowledged
// write began after and whose value is not the final one.
func (h *writeHistory) check(problem func(string, ...any)) SoakWrites {
	st := h.stats
	st.Linearizable = porcupine.CheckOperations(weightModel, h.ops)
	if st.Linearizable {
		return st
	}
	for _, part := range weightModel.Partition(h.ops) {
		if porcupine.CheckOperations(weightModel, part) {
			continue
		}
		final := -1
		for _, op := range part {
			if !op.Input.(weightOp).write {
				final = op.Output.(int)
			}
		}
		for _, w := range part {
			in := w.Input.(weightOp)
			if !in.write || w.Return == math.MaxInt64 || in.value == final {
				continue
			}
			superseded := slices.ContainsFunc(part, func(o porcupine.Operation) bool {
				return o.Input.(weightOp).write && o.Return != math.MaxInt64 && o.Call > w.Return
			})
			if !superseded {
				st.Lost++
				problem("write %s=%d was acknowledged (answered %v) but the final weight is %d", in.key, in.value, w.Metadata, final)
			}
		}
	}
	return st
}

// Markdown renders the report as the tables of bench/results/soak.md.
func (r *SoakReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Seed %d, %d rounds (%s, the longest %s, %d over the %s budget), %d long-lived connections.\n\n",
		r.Seed, r.Rounds, r.Duration.Round(time.Second), r.MaxRound.Round(time.Millisecond), r.OverBudget, SoakRoundBudget, r.Conns)
	b.WriteString("| fault class | rounds | broken, node and backend survived (goal 0) | broken, backend down | broken, moved after a ring change | stream requests | failed |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.Classes {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d |\n", c.Name, c.Rounds, c.Broken, c.BrokenBackend, c.BrokenMoved, c.Requests, c.FailedRequests)
	}
	w := r.Writes
	fmt.Fprintf(&b, "\nAPI writes: %d sent, %d acknowledged, %d refused (409: a conflict), %d of unknown outcome; "+
		"acknowledged writes lost: %d (goal 0); porcupine: linearizable %v.\n\n", w.Sent, w.Acked, w.Refused, w.Unknown, w.Lost, w.Linearizable)
	b.WriteString("| process | since round (0: the start; else its last start) | RSS | descriptors | threads | goroutines |\n|---|---:|---|---|---|---|\n")
	for _, g := range r.Growth {
		gor := "–"
		if g.Start.Goroutines >= 0 {
			gor = fmt.Sprintf("%d → %d", g.Start.Goroutines, g.End.Goroutines)
		}
		fmt.Fprintf(&b, "| %s | %d | %s → %s | %d → %d | %d → %d | %s |\n", g.Process, g.SinceRound, mib(g.Start.RSS), mib(g.End.RSS),
			g.Start.FDs, g.End.FDs, g.Start.Threads, g.End.Threads, gor)
	}
	if len(r.Problems) > 0 {
		b.WriteString("\nProblems:\n")
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	return b.String()
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
