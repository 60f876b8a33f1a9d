package reconcile

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// loNS is a network namespace the test creates, and a netlink handle into it.
func loNS(t *testing.T) (*netlink.Handle, netns.NsHandle) {
	t.Helper()
	testenv.NeedRoot(t, "needs root (a network namespace)")
	testenv.Need(t, hostprog.Check(hostprog.IP))
	name := fmt.Sprintf("mfreconcile-lo-%d", os.Getpid())
	if out, err := hostprog.Command(hostprog.IP, "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = hostprog.Command(hostprog.IP, "netns", "del", name).Run() })
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, ns
}

// onLo lists the addresses of lo in the namespace, ::1 and 127.0.0.1 aside.
func onLo(t *testing.T, h *netlink.Handle) []string {
	t.Helper()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := h.AddrList(lo, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		if ip = ip.Unmap(); !ip.IsLoopback() {
			out = append(out, ip.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestTunnelVIPsOnLoThroughTheController: the controller, the one writer of the node's
// kernel state, puts a tunnel service's VIP on lo with the update that serves it and
// takes it off with the one that drops it; an update the kernel refuses leaves lo as it
// was. Before, the node's tunnel code wrote lo beside the controller, outside its
// transaction.
func TestTunnelVIPsOnLoThroughTheController(t *testing.T) {
	h, _ := loNS(t)
	r := newRig(t, false, 0)
	o := Options{Dataplane: r.dp, Health: r.health, Neighbours: r.neigh, Clock: r.clock, Log: r.c.log,
		Loopback: datapath.NewLoopback(h, r.c.log)}
	r.c = NewController(o)
	// an address already on lo is the operator's: the controller never removes it
	lo, _ := h.LinkByName("lo")
	if err := h.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(netip.MustParseAddr("198.51.100.99").AsSlice())}); err != nil {
		t.Fatal(err)
	}
	web := svc("web", vip1, 80, "10.0.1.1")
	home := config.Service{Name: "home", VIP: netip.MustParseAddr(vip2), Port: 443, Protocol: config.TCP, Forwarding: config.Tunnel}
	op := config.Service{Name: "op", VIP: netip.MustParseAddr("198.51.100.99"), Port: 22, Protocol: config.TCP, Forwarding: config.Tunnel}

	r.submit(web, home, op)
	if got, want := onLo(t, h), []string{vip2, "198.51.100.99"}; !slices.Equal(got, want) {
		t.Fatalf("with tunnel services home and op: lo holds %v, want %v", got, want)
	}

	// a refused update (the maps' first write fails) that adds a tunnel service and
	// drops another: lo is as it was
	other := config.Service{Name: "other", VIP: netip.MustParseAddr("198.51.100.12"), Port: 443, Protocol: config.TCP, Forwarding: config.Tunnel}
	r.dp.failFrom = r.dp.writes + 1
	web2 := svc("web", vip1, 80, "10.0.1.1", "10.0.1.2")
	if err := r.c.Submit(Update{Source: "file", Services: []config.Service{web2, other, op}}); err == nil {
		t.Fatal("the update went through a failing data plane")
	}
	if got, want := onLo(t, h), []string{vip2, "198.51.100.99"}; !slices.Equal(got, want) {
		t.Fatalf("after a refused update: lo holds %v, want %v as before", got, want)
	}
	r.dp.failFrom = 0

	r.submit(web)
	if got, want := onLo(t, h), []string{"198.51.100.99"}; !slices.Equal(got, want) {
		t.Fatalf("without tunnel services: lo holds %v, want only the operator's %v", got, want)
	}
}

// A routed service with an origin reached by tunnel has its VIP on lo too (the stack
// takes the local share's packets as its own), is in the XDP program (its routed
// share) and is among the services the edge ends connections of; without the
// tunnelled origin its VIP leaves lo.
func TestMixedServiceVIPOnLo(t *testing.T) {
	h, _ := loNS(t)
	r := newRig(t, false, 0)
	r.c = NewController(Options{Dataplane: r.dp, Health: r.health, Neighbours: r.neigh, Clock: r.clock, Log: r.c.log,
		Loopback: datapath.NewLoopback(h, r.c.log)})
	web := svc("web", vip1, 443, "10.0.1.1")
	web.Origins = []config.Origin{{Name: "dc", Capacity: 10}, {Name: "home", Capacity: 10, Tunnel: true, Weight: 1}}
	web.Backends[0].Origin = "dc"
	r.submit(web)
	if got, want := onLo(t, h), []string{vip1}; !slices.Equal(got, want) {
		t.Fatalf("with a mixed service: lo holds %v, want its vip %v", got, want)
	}
	v := r.c.View()
	if len(v.Edge) != 1 || v.Edge[0].Name != "web" || len(v.Tunnels) != 0 || len(v.Services) != 1 {
		t.Errorf("view: edge %d, tunnels %d, services %d: want the mixed service at the edge and in the data plane, not a tunnel service", len(v.Edge), len(v.Tunnels), len(v.Services))
	}
	if len(r.dp.services) != 1 {
		t.Errorf("the mixed service is not in the XDP program's maps: %v", r.dp.services)
	}
	r.submit(svc("web", vip1, 443, "10.0.1.1"))
	if got := onLo(t, h); len(got) != 0 {
		t.Errorf("without the tunnelled origin: lo holds %v, want nothing", got)
	}
}

// An update whose tunnel VIP lo refuses (IPv6 off on lo) is refused whole, and the VIPs
// of the same update that lo took are taken back: lo is as it was.
func TestTunnelVIPRefusedByLoLeavesLoAsItWas(t *testing.T) {
	h, ns := loNS(t)
	off := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(ns); err != nil {
			off <- err
			return
		}
		off <- os.WriteFile("/proc/sys/net/ipv6/conf/lo/disable_ipv6", []byte("1"), 0)
	}()
	if err := <-off; err != nil {
		t.Fatal(err)
	}
	r := newRig(t, false, 0)
	r.c = NewController(Options{Dataplane: r.dp, Health: r.health, Neighbours: r.neigh, Clock: r.clock, Log: r.c.log,
		Loopback: datapath.NewLoopback(h, r.c.log)})
	tunnel := func(name, vip string) config.Service {
		return config.Service{Name: name, VIP: netip.MustParseAddr(vip), Port: 443, Protocol: config.TCP, Forwarding: config.Tunnel}
	}
	r.submit(tunnel("a", vip1))
	// served in the order of their names: b's VIP goes on lo before c's is refused
	err := r.c.Submit(Update{Source: "file", Services: []config.Service{tunnel("b", vip2), tunnel("c", "2001:db8::10")}})
	var kerr *KernelError
	if !errors.As(err, &kerr) {
		t.Fatalf("an update whose VIP lo refuses: %v, want a KernelError", err)
	}
	if got, want := onLo(t, h), []string{vip1}; !slices.Equal(got, want) {
		t.Fatalf("after the refused update: lo holds %v, want %v as before", got, want)
	}
	if v := r.c.View(); len(v.Tunnels) != 1 || v.Tunnels[0].Name != "a" {
		t.Errorf("the view after the refused update: %+v, want tunnel service a alone", v.Tunnels)
	}
}

// An IPv6 tunnel VIP put on lo is usable at once: the edge binds its listener to it
// right after. Without IFA_F_NODAD the kernel holds the address tentative until its
// duplicate address detection work runs (for lo: skipped, but from a work queue), and
// a bind in between fails with "cannot assign requested address" — the service went
// unserved until the next change.
func TestIPv6TunnelVIPOnLoIsUsableAtOnce(t *testing.T) {
	h, _ := loNS(t)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	l := datapath.NewLoopback(h, slog.New(slog.DiscardHandler))
	for i := range 20 {
		vip := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)})
		if err := l.Set([]netip.Addr{vip}); err != nil {
			t.Fatal(err)
		}
		addrs, err := h.AddrList(lo, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if ip, _ := netip.AddrFromSlice(a.IP); ip == vip && a.Flags&unix.IFA_F_TENTATIVE != 0 {
				t.Fatalf("%s on lo is tentative (flags %#x): a listener cannot bind it yet", vip, a.Flags)
			}
		}
	}
}
