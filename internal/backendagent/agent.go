// Package backendagent is `manifold backend`: it makes a host a DSR backend. It
// attaches the decapsulation program (IPIP, and GUE on backend.gue_port) at tc ingress
// or, with backend.hook: xdp, as native XDP, puts the VIPs on lo so the host
// accepts (and answers from) them, and stops the host from answering ARP for them on
// the wire. Everything it changes it records and undoes on exit.
//
// On a Kubernetes Node (a kubernetes section) it also decapsulates the VIPs of the
// Services its Node is a backend of, learnt from the API (internal/kubesource); those
// do not go on lo: the cluster's service proxy (kube-proxy, or the CNI) takes
// VIP:port to a pod, as it does for any LoadBalancer address.
package backendagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/kubesource"
	"github.com/manifoldlb/manifold/internal/sysctl"
)

// arpSysctls keep a host with a VIP on lo from answering ARP for it (the LB nodes own
// the VIP on the wire): reply only for addresses of the receiving interface
// (arp_ignore=1), and never use a lo address as ARP source (arp_announce=2).
func arpSysctls(iface string) map[string]string {
	return map[string]string{
		"net/ipv4/conf/all/arp_ignore":             "1",
		"net/ipv4/conf/all/arp_announce":           "2",
		"net/ipv4/conf/" + iface + "/arp_ignore":   "1",
		"net/ipv4/conf/" + iface + "/arp_announce": "2",
	}
}

// Agent is a running backend agent.
type Agent struct {
	log     *slog.Logger
	decap   *datapath.Decap
	addedLo []*netlink.Addr
	sysctls *sysctl.Changes
}

// Run runs the agent until ctx is done, then undoes its changes.
func Run(ctx context.Context, path string, log *slog.Logger) error {
	cfg, err := config.LoadBackend(path)
	if err != nil {
		return err
	}
	a := &Agent{log: log, sysctls: sysctl.New(log)}
	defer a.undo()
	var cluster *kubesource.Cluster
	if k := cfg.Kubernetes; k != nil {
		if cluster, err = kubesource.Connect(*k); err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
	}
	if err := a.setup(cfg); err != nil {
		return err
	}
	log.Info("backend agent running", "interface", cfg.Interface, "hook", cfg.Hook, "vips", fmt.Sprint(cfg.VIPs), "gue_port", cfg.GUEPort)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if cluster != nil {
		go func() {
			for range hup {
				log.Warn("reload (SIGHUP): with a kubernetes section the agent reloads nothing; restart it to apply a changed file", "file", path)
			}
		}()
		return followCluster(ctx, cluster, *cfg.Kubernetes, cfg.VIPs, a.decap, log)
	}
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping: detaching decapsulation, removing VIPs from lo")
			return nil
		case <-hup:
			if next, err := a.reload(path, cfg); err != nil {
				log.Error("reload (SIGHUP) refused; the running VIPs are kept", "file", path, "err", err)
			} else {
				cfg = next
				log.Info("reloaded (SIGHUP)", "file", path, "vips", fmt.Sprint(cfg.VIPs))
			}
		}
	}
}

// reload applies a changed backend.vips from the file at path: the VIPs it adds are
// decapsulated and put on lo, those it drops are taken off both (a VIP found on lo at
// start stays there). Any other change needs a restart and is refused, as is a bad
// file; a failure half-way undoes what the reload added. Returns the config now run.
func (a *Agent) reload(path string, cur *config.BackendAgent) (*config.BackendAgent, error) {
	next, err := config.LoadBackend(path)
	if err != nil {
		return nil, err
	}
	switch {
	case next.Interface != cur.Interface:
		return nil, fmt.Errorf("backend.interface changed (%s → %s): restart the agent to move it", cur.Interface, next.Interface)
	case next.Hook != cur.Hook:
		return nil, fmt.Errorf("backend.hook changed (%s → %s): restart the agent to change it", cur.Hook, next.Hook)
	case next.GUEPort != cur.GUEPort:
		return nil, fmt.Errorf("backend.gue_port changed (%d → %d): restart the agent to change it (it is a constant of the loaded program)", cur.GUEPort, next.GUEPort)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	var added []netip.Addr
	undo := func() {
		for _, vip := range added {
			_ = a.decap.RemoveVIP(vip)
			a.removeFromLo(lo, vip)
		}
	}
	for _, vip := range next.VIPs {
		if slices.Contains(cur.VIPs, vip) {
			continue
		}
		if err := a.decap.AddVIP(vip); err != nil {
			undo()
			return nil, fmt.Errorf("decapsulate %s: %w", vip, err)
		}
		added = append(added, vip)
		if err := a.addToLo(lo, vip); err != nil {
			undo()
			return nil, err
		}
	}
	if len(cur.VIPs) == 0 && len(next.VIPs) > 0 {
		for name, value := range arpSysctls(next.Interface) {
			if err := a.sysctls.Set(name, value, "a VIP on lo must not be answered for in ARP"); err != nil {
				undo()
				return nil, err
			}
		}
	}
	for _, vip := range cur.VIPs {
		if slices.Contains(next.VIPs, vip) {
			continue
		}
		if err := a.decap.RemoveVIP(vip); err != nil {
			a.log.Error("reload: a VIP dropped from the file is still decapsulated", "vip", vip, "err", err)
		}
		a.removeFromLo(lo, vip)
	}
	return next, nil
}

// removeFromLo takes vip off lo if the agent put it there.
func (a *Agent) removeFromLo(lo netlink.Link, vip netip.Addr) {
	a.addedLo = slices.DeleteFunc(a.addedLo, func(addr *netlink.Addr) bool {
		ip, ok := netip.AddrFromSlice(addr.IP)
		if !ok || ip.Unmap() != vip {
			return false
		}
		if err := netlink.AddrDel(lo, addr); err != nil {
			a.log.Error("remove VIP from lo", "vip", vip, "err", err)
			return false
		}
		a.log.Info("VIP removed from lo", "vip", vip)
		return true
	})
}

func (a *Agent) setup(cfg *config.BackendAgent) error {
	d, err := datapath.LoadDecap(cfg.GUEPort)
	if err != nil {
		return err
	}
	a.decap = d
	for _, vip := range cfg.VIPs {
		if err := d.AddVIP(vip); err != nil {
			return err
		}
	}
	switch cfg.Hook {
	case config.HookXDP:
		// native only: generic XDP runs where tc does, after the skb is built, and
		// saves nothing; an interface with an XDP program already is refused
		if err := d.AttachXDP(cfg.Interface); err != nil {
			return fmt.Errorf("backend.hook xdp: %w", err)
		}
		a.log.Info("decapsulation attached", "interface", cfg.Interface, "hook", "xdp", "mode", "native")
	default:
		mode, err := d.AttachTC(cfg.Interface)
		if err != nil {
			return fmt.Errorf("backend.interface: %w", err)
		}
		a.log.Info("decapsulation attached", "interface", cfg.Interface, "hook", "tc ingress", "mode", mode)
	}

	if len(cfg.VIPs) == 0 {
		return nil // the cluster's VIPs only: nothing on lo, nothing to hide from ARP
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, vip := range cfg.VIPs {
		if err := a.addToLo(lo, vip); err != nil {
			return err
		}
	}
	for name, value := range arpSysctls(cfg.Interface) {
		if err := a.sysctls.Set(name, value, "a VIP on lo must not be answered for in ARP"); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) addToLo(lo netlink.Link, vip netip.Addr) error {
	bits := 32
	if vip.Is6() {
		bits = 128
	}
	addr, err := netlink.ParseAddr(netip.PrefixFrom(vip, bits).String())
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(lo, addr); err != nil {
		if errors.Is(err, unix.EEXIST) {
			a.log.Info("VIP already on lo, leaving it as found", "vip", vip)
			return nil
		}
		return fmt.Errorf("add %s to lo: %w", vip, err)
	}
	a.addedLo = append(a.addedLo, addr)
	a.log.Info("VIP added to lo", "vip", vip)
	return nil
}

// undo reverts every change setup made, in reverse order, whatever failed before.
func (a *Agent) undo() {
	a.sysctls.Restore()
	if lo, err := netlink.LinkByName("lo"); err == nil {
		for _, addr := range a.addedLo {
			if err := netlink.AddrDel(lo, addr); err != nil {
				a.log.Error("remove VIP from lo", "vip", addr.IPNet, "err", err)
			}
		}
	}
	if a.decap != nil {
		if err := a.decap.Close(); err != nil {
			a.log.Error("detach decapsulation", "err", err)
		}
	}
}
