// Package node is the LB node daemon, `manifold run`: it owns the data plane, the
// reconciler, the health checker and the API, and drives them from one loop.
//
//	config file ──(start, SIGHUP)──┐
//	health events ─────────────────┼─► run loop ─► reconcile.Apply ─► BPF maps
//	                               │            └─► neighbours.ensure
//	SIGTERM / SIGINT ──────────────┘─► detach XDP, release neighbours, exit
//
// The run loop is the only goroutine that touches the reconciler and the current
// config; the API reads through a snapshot it publishes (status.go).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/bgp"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/health"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/store"
)

// neighbourRefresh is how often next hops of backends are re-checked (routes change).
const neighbourRefresh = 5 * time.Second

// Node is a running LB node.
type Node struct {
	log     *slog.Logger
	path    string
	cfg     *config.Config
	lb      *datapath.LB
	rec     *reconcile.Reconciler
	checker *health.Checker
	neigh   *neighbours
	modes   map[string]string // interface → XDP mode in use
	status  *statusBoard
	store   *store.Store // the config file: what cfg was read from, and where API writes go
	// speaker announces the VIPs (nil without a bgp section); attached and stopping
	// are what it needs to know besides health; announce is its last decision.
	speaker  bgp.Speaker
	attached bool
	stopping bool
	announce map[string]announceState // by service name
	// requests carries work that must run on the run loop (API writes): the loop is
	// the only goroutine that touches the reconciler and the current config.
	requests chan func()
}

// Run runs the daemon until ctx is done. Errors before the data plane is attached
// are returned; later ones are logged and the node keeps serving.
func Run(ctx context.Context, path string, log *slog.Logger) error {
	st, err := store.Open(path)
	if err != nil {
		return err
	}
	cfg := st.Config()
	if err := preflight(cfg); err != nil {
		return err
	}
	lb, err := datapath.LoadLB(datapath.Options{
		NodeAddr4:     cfg.Node.SourceFor(false),
		NodeAddr6:     cfg.Node.SourceFor(true),
		FlowTableSize: cfg.Node.FlowTableSize,
	})
	if err != nil {
		return err
	}
	n := &Node{
		log:      log,
		path:     path,
		cfg:      cfg,
		lb:       lb,
		rec:      reconcile.New(lb),
		checker:  health.New(log),
		neigh:    newNeighbours(log),
		modes:    map[string]string{},
		status:   newStatusBoard(),
		store:    st,
		requests: make(chan func()),
	}
	defer n.close()

	// maps first, then attach: the first packet already finds every service
	n.checker.Set(targets(cfg))
	if err := n.rec.Apply(cfg, n.healthy); err != nil {
		return fmt.Errorf("program services: %w", err)
	}
	n.neigh.ensure(backendAddrs(cfg))
	for _, iface := range cfg.Node.Interfaces {
		mode, err := lb.Attach(iface, string(cfg.Node.XDPMode))
		if err != nil {
			return err
		}
		if cfg.Node.XDPMode == config.XDPAuto && mode != datapath.ModeNative {
			log.Warn("native XDP unavailable, using generic XDP (slower)", "interface", iface)
		}
		n.modes[iface] = mode
		log.Info("XDP attached", "interface", iface, "mode", mode)
	}
	n.attached = true
	if err := n.startSpeaker(); err != nil {
		return err
	}
	n.settle()

	stopAPI, err := n.serveAPI()
	if err != nil {
		return err
	}
	defer stopAPI()

	log.Info("node running", "node", cfg.Node.Name, "services", len(cfg.Services), "config", path)
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
			n.stopAnnouncing()
			n.log.Info("stopping: detaching XDP", "interfaces", strings.Join(n.cfg.Node.Interfaces, ","))
			return nil
		case <-hup:
			n.reload()
		case fn := <-n.requests:
			fn()
		case ev := <-n.checker.Events():
			n.log.Info("backend health changed", "backend", ev.Target.Addr, "check", ev.Target.String(), "up", ev.Up, "reason", ev.Reason)
			if err := n.rec.Apply(n.cfg, n.healthy); err != nil {
				n.log.Error("applying health change failed", "err", err)
			}
			n.settle()
		case <-refresh.C:
			n.neigh.ensure(backendAddrs(n.cfg))
			n.publish()
		}
	}
}

// reload applies the config file again; a file with any problem changes nothing.
func (n *Node) reload() {
	n.status.reloads.Add(1)
	ch, err := n.store.Reread()
	var cfg *config.Config
	if err == nil {
		cfg = ch.Config
	}
	if err == nil && !reflect.DeepEqual(cfg.Node, n.cfg.Node) {
		err = errors.New("node: the node section changed; it takes effect only on restart (services were not reloaded either)")
	}
	if err == nil && !reflect.DeepEqual(cfg.BGP, n.cfg.BGP) {
		err = errors.New("bgp: the bgp section changed; it takes effect only on restart (services were not reloaded either)")
	}
	if err != nil {
		n.status.reloadFailures.Add(1)
		n.log.Error("reload rejected, old config keeps serving", "config", n.path, "err", oneLine(err))
		return
	}
	if err := n.commit(ch); err != nil {
		n.status.reloadFailures.Add(1)
		n.log.Error("reload failed in the kernel, previous state restored", "err", err)
		return
	}
	n.log.Info("config reloaded", "config", n.path, "services", len(cfg.Services), "revision", ch.Revision())
}

// settle brings what follows from the config and the backends' health in line after
// a change: the VIPs announced, then the status the API serves.
func (n *Node) settle() {
	n.syncAnnouncements()
	n.publish()
}

// do runs fn on the run loop and waits for it; it fails when the node is stopping.
func (n *Node) do(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case n.requests <- func() { defer close(done); fn() }:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-done
	return nil
}

func (n *Node) healthy(s *config.Service, b *config.Backend) bool {
	if s.Health.Kind == config.HealthNone || s.Health.Kind == "" {
		return true
	}
	return n.checker.Up(health.Target{Addr: b.Address, Check: s.Health})
}

func (n *Node) close() {
	if n.speaker != nil { // after stopAnnouncing a no-op; after a failed start, withdraws at once
		n.speaker.Close()
	}
	n.checker.Close()
	if err := n.lb.Close(); err != nil {
		n.log.Error("detach", "err", err)
	}
	n.neigh.release()
}

func targets(cfg *config.Config) []health.Target {
	var out []health.Target
	for _, s := range cfg.Services {
		if s.Health.Kind == config.HealthNone || s.Health.Kind == "" {
			continue
		}
		for _, b := range s.Backends {
			out = append(out, health.Target{Addr: b.Address, Check: s.Health})
		}
	}
	return out
}

func backendAddrs(cfg *config.Config) []netip.Addr {
	var out []netip.Addr
	for _, s := range cfg.Services {
		for _, b := range s.Backends {
			out = append(out, b.Address)
		}
	}
	return out
}

// preflight checks what the kernel needs before anything is loaded, so that a
// misconfigured host gets one clear sentence instead of silently dropped packets.
func preflight(cfg *config.Config) error {
	var v4, v6 bool
	for _, s := range cfg.Services {
		v4 = v4 || s.VIP.Is4()
		v6 = v6 || s.VIP.Is6()
	}
	for _, iface := range cfg.Node.Interfaces {
		if _, err := net.InterfaceByName(iface); err != nil {
			return fmt.Errorf("node.interfaces: %s: %w", iface, err)
		}
		// bpf_fib_lookup refuses to route packets that arrive on a non-forwarding device
		if v4 && sysctl("net/ipv4/conf/"+iface+"/forwarding") != "1" {
			return fmt.Errorf("node.interfaces: IPv4 forwarding is off on %s; enable it with: sysctl -w net.ipv4.conf.all.forwarding=1 net.ipv4.conf.%s.forwarding=1", iface, iface)
		}
		if v6 && sysctl("net/ipv6/conf/"+iface+"/forwarding") != "1" {
			return fmt.Errorf("node.interfaces: IPv6 forwarding is off on %s; enable it with: sysctl -w net.ipv6.conf.all.forwarding=1", iface)
		}
	}
	return nil
}

func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// oneLine folds a multi-line error (every problem of a config file) for one log line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
