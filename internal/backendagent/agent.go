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
	if cluster != nil {
		return followCluster(ctx, cluster, *cfg.Kubernetes, cfg.VIPs, a.decap, log)
	}
	<-ctx.Done()
	log.Info("stopping: detaching decapsulation, removing VIPs from lo")
	return nil
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
