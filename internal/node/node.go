// Package node is the LB node daemon, `manifold run`: a thin runner. It sets up the
// host, loads and attaches the data plane, starts the parts, and drives the controller
// (internal/reconcile) from one loop; the decisions are the controller's, and so are
// the writes to the kernel (maps, neighbours, the tunnel VIPs on lo) and to BGP.
//
//	config file ─► store.Source ──(start, SIGHUP, API writes)─┐
//	etcd ─► fleet.Source ──(the fleet's services, steered)────┤  (fleet.go)
//	Kubernetes API ─► kubesource.Source ──(Services, slices)──┤
//	health events ────────────────────────────────────────────┤
//	tunnel edge: connectors attached ─────────────────────────┼─► run loop ─► reconcile.Controller
//	neighbour refresh (every 5 s) ────────────────────────────┘      (maps, health targets,
//	SIGTERM / SIGINT ─► Controller.Stop (withdraw, drain) ─► detach      neighbours, lo, BGP)
//
// Beside the loop: the tunnel edge's listeners, started and stopped after each change
// (tunnels.go), the fleet record published every second (fleet.go; its RTTs smoothed by
// steer.RTTs), and the API with the status (api.go, status.go, rates.go).
//
// The run loop is the only goroutine that calls the controller but for its View; the
// API reads the View and the data plane's counters (status.go).
package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/bgp"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/fleet"
	"github.com/manifoldlb/manifold/internal/health"
	"github.com/manifoldlb/manifold/internal/kubesource"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/store"
	"github.com/manifoldlb/manifold/internal/sysctl"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// neighbourRefresh is how often next hops of backends are re-checked (routes change).
const neighbourRefresh = 5 * time.Second

// The stall watch: a node that did not run for stallAfter (SIGSTOP then SIGCONT, a
// paused VM, a starved machine) has health states and a fleet revision of before, while
// its BGP and BFD sessions come back at once. It holds its VIPs back until it has
// caught up (resumed). A second is longer than any pause of a running Go process and
// than BFD's detection time (then the routers have moved the traffic away already);
// stallWatch, the watch's wake-up, bounds how late a stall is seen.
const (
	stallAfter = time.Second
	stallWatch = 100 * time.Millisecond
)

// bgpPort is where the node accepts sessions from its peers (it also connects to them).
const bgpPort = 179

// Node is a running LB node.
type Node struct {
	log *slog.Logger
	// cfg is the config the node started with; its node section, and the bgp
	// section's AS and router id, hold for the node's life (a reload that changes them
	// is refused). Services and the rest of the bgp section live in the controller.
	cfg     *config.Config
	lb      *datapath.LB
	ctrl    *reconcile.Controller
	checker *health.Checker
	neigh   *datapath.Neighbours
	lo      *datapath.Loopback // the tunnel VIPs, written by the controller; nil without a tunnels section
	sysctls *sysctl.Changes
	file    *store.Source
	// fleet is the fleet store (nil without a fleet section); etcd its client. With a
	// fleet, the services and the API's writes are the fleet's.
	fleet *fleet.Source
	etcd  *clientv3.Client
	// kube is the cluster's Services as a source (nil without a kubernetes section).
	kube    *kubesource.Source
	speaker bgp.Speaker // nil without a bgp section
	edge    *edge       // the tunnel edge; nil without a tunnels section
	// modes is the XDP mode of each interface, written before the API serves.
	modes map[string]string
	rates *rateMeter
	api   *api.Server
	// requests carries work that must run on the run loop (the sources' updates).
	requests chan func()
	// stopping is closed when the node starts to stop: updates are refused from then on.
	stopping chan struct{}
}

// Run runs the daemon until ctx is done. Errors before the data plane is attached
// are returned; later ones are logged and the node keeps serving.
func Run(ctx context.Context, path string, log *slog.Logger) error {
	st, err := store.Open(path)
	if err != nil {
		return err
	}
	cfg := st.Config()
	n := &Node{
		log: log, cfg: cfg, checker: health.New(log), neigh: datapath.NewNeighbours(log),
		sysctls: sysctl.New(log), modes: map[string]string{}, rates: newRateMeter(),
		requests: make(chan func()), stopping: make(chan struct{}),
	}
	defer n.close()
	if err := n.prepareHost(); err != nil {
		return err
	}
	if n.lb, err = datapath.LoadLB(datapath.Options{
		NodeAddr4:     cfg.Node.SourceFor(false),
		NodeAddr6:     cfg.Node.SourceFor(true),
		FlowTableSize: cfg.Node.FlowTableSize,
		MaxServices:   cfg.Node.MaxServices,
		MaxBackends:   cfg.Node.MaxBackends,
	}); err != nil {
		return err
	}
	if err := n.startSpeaker(); err != nil {
		return err
	}
	o := reconcile.Options{
		Dataplane: n.lb, Settings: cfg.Node, Speaker: n.speaker, BGP: cfg.BGP,
		Health: n.checker, Neighbours: n.neigh, Clock: clock.Real(), Log: log,
	}
	if cfg.Tunnels != nil {
		// without an edge nothing listens on a tunnel service's VIP: it stays off lo
		n.lo = datapath.NewLoopback(nil, log)
		o.Loopback = n.lo
	}
	n.ctrl = reconcile.NewController(o)
	n.file = store.NewSource(st, n, log)
	if k := cfg.Kubernetes; k != nil {
		// the client only: the cluster is read once the node runs (a node does not
		// wait for the API server to serve its file's services)
		cluster, err := kubesource.Connect(*k)
		if err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
		n.kube = kubesource.NewSource(cluster, *k, cfg.Node, n, log)
	}

	// maps first, then attach: the first packet already finds every service
	if err := n.ctrl.Submit(n.file.Initial()); err != nil {
		return fmt.Errorf("program services: %w", err)
	}
	if cfg.Fleet != nil {
		if err := n.joinFleet(ctx); err != nil {
			return err
		}
	}
	for _, iface := range cfg.Node.Interfaces {
		mode, err := n.lb.Attach(iface, string(cfg.Node.XDPMode))
		if err != nil {
			return err
		}
		if cfg.Node.XDPMode == config.XDPAuto && mode != datapath.ModeNative {
			log.Warn("native XDP unavailable, using generic XDP (slower)", "interface", iface)
		}
		n.modes[iface] = mode
		log.Info("XDP attached", "interface", iface, "mode", mode)
	}
	n.ctrl.Attached()
	if cfg.Tunnels != nil {
		stopEdge, err := n.startEdge(ctx)
		if err != nil {
			return err
		}
		defer stopEdge()
	}
	n.syncTunnels()

	stopAPI, err := n.serveAPI()
	if err != nil {
		return err
	}
	defer stopAPI()

	sources, stopSources := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// owned by Run: stopped and waited for before Run returns
	wg.Go(func() {
		if err := n.file.Run(sources); err != nil {
			log.Error("config file source stopped", "err", err)
		}
	})
	// the stall watch (below): when the node did not run, which the fleet source does
	// not count against the store
	stalls := clock.NewStallMeter(clock.Real(), stallWatch)
	if n.fleet != nil {
		n.fleet.SetStallMeter(stalls)
		// owned by Run, as the file source
		wg.Go(func() {
			if err := n.fleet.Run(sources); err != nil {
				log.Error("fleet source stopped", "err", err)
			}
		})
		wg.Go(func() { n.fleet.Publish(sources, n.recorder()) })
	}
	if n.kube != nil {
		// owned by Run, as the file source
		wg.Go(func() {
			if err := n.kube.Run(sources); err != nil {
				log.Error("kubernetes source stopped", "err", err)
			}
		})
	}
	// owned by Run, as the sources: stopped by stopSources
	wg.Go(func() {
		stalls.Watch(sources.Done(), stallAfter, func(gap time.Duration) { n.resumed(sources, gap) })
	})
	defer wg.Wait()
	defer stopSources()

	log.Info("node running", "node", cfg.Node.Name, "services", len(n.ctrl.View().Services), "config", path)
	return n.loop(ctx)
}

func (n *Node) loop(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	refresh := time.NewTicker(neighbourRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			close(n.stopping)
			n.ctrl.Stop(nil)
			n.log.Info("stopping: detaching XDP", "interfaces", strings.Join(n.cfg.Node.Interfaces, ","))
			return nil
		case <-hup:
			n.file.Reload()
		case fn := <-n.requests:
			fn()
		case ev := <-n.checker.Events():
			n.log.Info("backend health changed", "backend", ev.Target.Addr, "check", ev.Target.String(), "up", ev.Up, "reason", ev.Reason)
			n.ctrl.HealthChanged()
		case <-refresh.C:
			n.ctrl.Refresh()
		}
	}
}

// resumed catches up after the node did not run for gap (the stall watch's report, on
// its goroutine). Whatever happened meanwhile happened without it: backends went down
// or came back, the fleet's services changed; its rings are as they were. Its BGP and
// BFD sessions come back at once, and with them traffic, which the other nodes' rings
// placed: flows the router moves here would go to other backends and break (the chaos
// soak's node-cont rounds). So the VIPs are withdrawn (Hold), every backend is
// checked again (a stale state is decided by one fresh result), the fleet's revision
// read again, and each service is announced again once its backends' health is known
// (Release; the controller's policy for a service not announced). A store that does not
// answer does not keep the node out: it serves what it applied, as it would without
// the stall.
func (n *Node) resumed(ctx context.Context, gap time.Duration) {
	gap = gap.Round(time.Millisecond)
	if !n.onLoop(ctx, func() {
		n.log.Warn("the node did not run for a while (stopped, paused or starved of CPU): VIPs withdrawn until its backends are checked again and it has caught up with the fleet", "gap", gap)
		n.checker.Recheck()
		n.ctrl.Hold(fmt.Sprintf("catching up after %s without running", gap))
	}) {
		return
	}
	if n.fleet != nil {
		if err := n.fleet.CatchUp(ctx); err != nil {
			n.log.Warn("could not catch up with the fleet store after a stall: serving the revision applied", "err", err)
		}
	}
	n.onLoop(ctx, n.ctrl.Release)
}

// onLoop runs fn on the run loop and waits for it; false when the node stops first.
func (n *Node) onLoop(ctx context.Context, fn func()) bool {
	done := make(chan struct{})
	select {
	case n.requests <- func() { defer close(done); fn() }:
	case <-n.stopping:
		return false
	case <-ctx.Done():
		return false
	}
	<-done
	return true
}

// errStopping is what an update gets once the node stops; the API answers 503.
var errStopping = fmt.Errorf("the node is stopping: %w", context.Canceled)

// Submit hands a source's update to the controller on the run loop (reconcile.Sink).
func (n *Node) Submit(ctx context.Context, u reconcile.Update) error {
	var err error
	if !n.onLoop(ctx, func() {
		if err = n.ctrl.Submit(u); err == nil {
			n.syncTunnels()
		}
	}) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errStopping
	}
	return err
}

// startSpeaker starts the BGP speaker of a config with a bgp section.
func (n *Node) startSpeaker() error {
	b := n.cfg.BGP
	if b == nil {
		return nil
	}
	s, err := bgp.Start(bgp.Config{
		ASN: b.ASN, RouterID: b.RouterID,
		NextHop4: n.cfg.Node.SourceFor(false), NextHop6: n.cfg.Node.SourceFor(true),
		Peers: b.Peers, ListenPort: bgpPort,
	}, n.log)
	if err != nil {
		return err
	}
	n.speaker = s
	return nil
}

func (n *Node) close() {
	if n.speaker != nil { // after Controller.Stop a no-op; after a failed start, withdraws at once
		n.speaker.Close()
	}
	n.checker.Close()
	if n.etcd != nil {
		n.etcd.Close()
	}
	if n.lb != nil {
		if err := n.lb.Close(); err != nil {
			n.log.Error("detach", "err", err)
		}
	}
	n.neigh.Release()
	if n.lo != nil { // after the edge's listeners stopped (startEdge's stopper runs first)
		n.lo.Release()
	}
	n.sysctls.Restore()
}

// prepareHost checks the interfaces and turns on what the data plane needs of the
// kernel: bpf_fib_lookup refuses to route a packet that arrived on a device that does
// not forward, so every XDP interface forwards each family the node has an address of
// (a service of a family needs the node's address of that family). What the node
// cannot fix gets one clear sentence instead of silently dropped packets.
func (n *Node) prepareHost() error {
	node := &n.cfg.Node
	for _, iface := range node.Interfaces {
		if _, err := net.InterfaceByName(iface); err != nil {
			return fmt.Errorf("node.interfaces: %s: %w", iface, err)
		}
		for _, family := range []struct {
			on   bool
			name string
		}{{node.SourceFor(false).IsValid(), "net/ipv4/conf/" + iface + "/forwarding"},
			{node.SourceFor(true).IsValid(), "net/ipv6/conf/" + iface + "/forwarding"}} {
			if !family.on {
				continue
			}
			if err := n.sysctls.Set(family.name, "1", "XDP forwarding needs it on the interface"); err != nil {
				return fmt.Errorf("node.interfaces: %s: %w (manifold run needs root, or CAP_NET_ADMIN and a writable /proc/sys)", iface, err)
			}
		}
	}
	return nil
}
