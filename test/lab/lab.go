// Package lab builds network-namespace topologies on one machine for manifold's lab
// tests and its demo: a router namespace in the middle and one namespace per host
// around it, each host joined to the router by its own veth pair.
//
//	client ──┐                      ┌── lb1   manifold run: XDP on eth0
//	         │                      ├── lb2
//	         └──── router ──────────┼── be1   manifold backend + nginx
//	        forwards IPv4 and IPv6, ├── be2
//	        static route VIP → LB   └── be3
//
// Namespaces are named <prefix>-<role>. Host i (1-based, in the order of Spec.Hosts)
// has eth0 with 10.0.i.2/24 and fd00:0:i::2/64; the router's end of the pair is named
// after the host's role and has 10.0.i.1 and fd00:0:i::1, the host's default gateway.
//
// A lab of several sites gives each an edge router (kind EdgeRouter, itself a host of
// the router in the middle); the site's hosts hang off it (HostSpec.Via) with the same
// addressing, and the router in the middle routes their subnets to it:
//
//	c-sjc ── r-sjc ── router ── r-ams ── c-ams
//	lb-sjc1 ─┘  │       │         │└─ lb-ams1
//	lb-sjc2 ────┘      be1        └── lb-ams2
//
// Links, addresses and routes are made through netlink handles opened inside each
// namespace; the namespaces themselves with `ip netns add` (so that `ip netns exec`
// finds them); offload settings with ethtool. Sysctls are written from a thread
// switched into the namespace.
//
// Two veth quirks shape the lab, each explained where it is handled: an LB node's
// XDP_TX needs an XDP program on the router's end of its veth (addHost), and packets
// that an XDP program encapsulates must carry complete checksums (the client's).
package lab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	bpflink "github.com/cilium/ebpf/link"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Kind says what a host is for; it decides the host's sysctls and how the router
// treats the link to it.
type Kind int

const (
	Router  Kind = iota // the namespace in the middle; there is one, made by New
	Client              // sends traffic to the VIPs
	LBNode              // runs `manifold run`: forwards; the router's end of its veth takes XDP_TX
	Backend             // runs `manifold backend` and an HTTP server
	// EdgeRouter is a site's router, a host of the router in the middle: the hosts
	// whose HostSpec.Via names it hang off it, and it forwards.
	EdgeRouter
	Gateway  // a site's gateway: runs `manifold link`; its site's hosts sit behind it (AddSiteHost)
	SiteHost // a host of a site, behind its gateway
)

func (k Kind) String() string {
	switch k {
	case Router:
		return "router"
	case Client:
		return "client"
	case LBNode:
		return "lb-node"
	case Backend:
		return "backend"
	case EdgeRouter:
		return "edge-router"
	case Gateway:
		return "gateway"
	case SiteHost:
		return "site-host"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// HostSpec is one host of a topology.
type HostSpec struct {
	Role string // namespace suffix and name of the router's end of the veth; at most 15 bytes
	Kind Kind
	// Via is the role of the EdgeRouter the host hangs off, listed before it; "" for
	// the router in the middle.
	Via string
	// Addr4, when valid, is the host's IPv4 address and prefix on eth0 in place of
	// 10.0.i.2/24, and Gateway4 the router's on the link (the quick starts of the docs
	// run as written, with the addresses of deploy/examples).
	Addr4    netip.Prefix
	Gateway4 netip.Addr
}

// Spec describes a lab.
type Spec struct {
	Prefix string     // namespaces are <Prefix>-<role>
	Hosts  []HostSpec // at most 250
	// Dir holds configs and process logs; it must exist and outlive the lab.
	Dir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

// Lab is a built topology and the processes started in it.
type Lab struct {
	Prefix string
	Dir    string
	Router *Host
	Hosts  []*Host // in the order of Spec.Hosts
	// EtcdArgs are added to the command line of the etcd members StartEtcd starts
	EtcdArgs []string

	logf  func(format string, args ...any)
	procs []*Process // in start order; stopped in reverse order by Close
}

// Host is one namespace of the lab.
type Host struct {
	Role string
	NS   string // network namespace name
	Kind Kind
	// Addr4 and Addr6 are the host's addresses on eth0 (zero for the router).
	Addr4, Addr6 netip.Addr
	// Gateway4 and Gateway6 are the router's addresses on the link to this host.
	Gateway4, Gateway6 netip.Addr
	// Upstream is the router the host hangs off: the one in the middle or its site's
	// edge router (nil for the router in the middle). RouterLink is its end of the veth
	// pair.
	Upstream   *Host
	RouterLink string

	nsh netns.NsHandle
	nl  *netlink.Handle
}

// HostLink is the name of a host's interface toward the router.
const HostLink = "eth0"

// New removes the leftovers of spec.Prefix and builds the topology. On error it tears
// down whatever it had made.
func New(spec Spec) (l *Lab, err error) {
	if spec.Prefix == "" || strings.ContainsAny(spec.Prefix, "/ ") {
		return nil, fmt.Errorf("lab: bad prefix %q", spec.Prefix)
	}
	if len(spec.Hosts) > 250 {
		return nil, fmt.Errorf("lab: %d hosts, at most 250", len(spec.Hosts))
	}
	if _, err := hostprog.Ethtool.Path(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if err := Cleanup(spec.Prefix); err != nil {
		return nil, err
	}
	l = &Lab{Prefix: spec.Prefix, Dir: spec.Dir, logf: spec.Logf}
	if l.logf == nil {
		l.logf = func(string, ...any) {}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
			l = nil
		}
	}()

	if l.Router, err = l.addNamespace("router", Router); err != nil {
		return l, err
	}
	if err := l.Router.Sysctl(map[string]string{
		"net.ipv4.conf.all.forwarding": "1",
		"net.ipv6.conf.all.forwarding": "1",
	}); err != nil {
		return l, err
	}
	for i, hs := range spec.Hosts {
		h, err := l.addHost(i+1, hs)
		if err != nil {
			return l, err
		}
		l.Hosts = append(l.Hosts, h)
	}
	// Wait for the addresses to be usable (see IsLocal), then resolve every gateway, as
	// a network in service would have: the XDP program forwards with bpf_fib_lookup,
	// which needs the router's MAC already known.
	for _, h := range l.Hosts {
		if err := h.WaitLocal(3*time.Second, h.Addr4, h.Addr6); err != nil {
			return l, err
		}
		if err := h.Upstream.WaitLocal(3*time.Second, h.Gateway4, h.Gateway6); err != nil {
			return l, err
		}
		if err := h.resolveGateways(); err != nil {
			return l, err
		}
	}
	l.logf("lab %s: router + %d hosts ready", l.Prefix, len(l.Hosts))
	return l, nil
}

// Host returns the host of the given role, or nil.
func (l *Lab) Host(role string) *Host {
	if role == "router" {
		return l.Router
	}
	for _, h := range l.Hosts {
		if h.Role == role {
			return h
		}
	}
	return nil
}

// HostsOf returns the hosts of a kind, in spec order.
func (l *Lab) HostsOf(k Kind) []*Host {
	var hs []*Host
	for _, h := range l.Hosts {
		if h.Kind == k {
			hs = append(hs, h)
		}
	}
	return hs
}

// roles returns the roles of hosts, in their order.
func roles(hs []*Host) []string {
	var rs []string
	for _, h := range hs {
		rs = append(rs, h.Role)
	}
	return rs
}

// RouteVIP points the router's route for vip (a /32 or /128) at an LB node, replacing
// any previous route.
func (l *Lab) RouteVIP(vip netip.Addr, via *Host) error {
	gw := via.Addr4
	if vip.Is6() {
		gw = via.Addr6
	}
	r := &netlink.Route{Dst: prefixNet(netip.PrefixFrom(vip, vip.BitLen())), Gw: net.IP(gw.AsSlice())}
	if err := l.Router.nl.RouteReplace(r); err != nil {
		return fmt.Errorf("router: route %s via %s (%s): %w", vip, gw, via.Role, err)
	}
	return nil
}

// Close stops every process the lab started (newest first) and deletes the namespaces.
// It is safe to call more than once.
func (l *Lab) Close() error {
	for _, p := range slices.Backward(l.procs) {
		if err := p.Stop(); err != nil {
			l.logf("lab %s: %s: %v", l.Prefix, p.Name, err)
		}
	}
	races := l.races()
	l.procs = nil
	for _, h := range append(slices.Clone(l.Hosts), l.Router) {
		if h != nil {
			h.close()
		}
	}
	return errors.Join(races, Cleanup(l.Prefix))
}

// raceMarker opens every report of Go's race detector: the lab runs a -race build of
// manifold, so a data race in the daemon fails the test that saw it.
const raceMarker = "WARNING: DATA RACE"

// races returns the race reports in the logs of the lab's processes, if any.
func (l *Lab) races() error {
	var errs []error
	for _, p := range l.procs {
		log := p.Log()
		if i := strings.Index(log, raceMarker); i >= 0 {
			errs = append(errs, fmt.Errorf("%s: the race detector reported a data race:\n%s", p.Name, tail(log[i:], 60)))
		}
	}
	return errors.Join(errs...)
}

func (l *Lab) addNamespace(role string, kind Kind) (*Host, error) {
	h := &Host{Role: role, NS: l.Prefix + "-" + role, Kind: kind}
	if out, err := hostprog.Command(hostprog.IP, "netns", "add", h.NS).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", h.NS, err, strings.TrimSpace(string(out)))
	}
	var err error
	if h.nsh, err = netns.GetFromName(h.NS); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", h.NS, err)
	}
	if h.nl, err = netlink.NewHandleAt(h.nsh); err != nil {
		h.close()
		return nil, fmt.Errorf("netlink in %s: %w", h.NS, err)
	}
	if err := h.linkUp("lo"); err != nil {
		h.close()
		return nil, err
	}
	// "default" settings are copied into interfaces created afterwards. DAD off: the
	// addresses are ours alone, and a tentative address would delay the first test.
	// rp_filter off: DSR replies leave backends with the VIP as source, and the
	// router's route to the VIP points elsewhere.
	err = h.Sysctl(map[string]string{
		"net.ipv4.conf.all.rp_filter":      "0",
		"net.ipv4.conf.default.rp_filter":  "0",
		"net.ipv6.conf.all.accept_dad":     "0",
		"net.ipv6.conf.default.accept_dad": "0",
	})
	if err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (l *Lab) addHost(i int, hs HostSpec) (*Host, error) {
	if hs.Role == "" || hs.Role == "router" || len(hs.Role) > 15 || l.Host(hs.Role) != nil {
		return nil, fmt.Errorf("lab: bad or duplicate role %q", hs.Role)
	}
	up := l.Router
	if hs.Via != "" {
		if up = l.Host(hs.Via); up == nil || up.Kind != EdgeRouter {
			return nil, fmt.Errorf("lab: %s: via %q, which is not an edge router listed before it", hs.Role, hs.Via)
		}
	}
	h, err := l.addNamespace(hs.Role, hs.Kind)
	if err != nil {
		return nil, err
	}
	h.Upstream = up
	h.RouterLink = hs.Role
	h.Addr4 = netip.AddrFrom4([4]byte{10, 0, byte(i), 2})
	h.Gateway4 = netip.AddrFrom4([4]byte{10, 0, byte(i), 1})
	bits4 := 24
	if hs.Addr4.IsValid() {
		h.Addr4, h.Gateway4, bits4 = hs.Addr4.Addr(), hs.Gateway4, hs.Addr4.Bits()
	}
	h.Addr6 = netip.MustParseAddr(fmt.Sprintf("fd00:0:%x::2", i))
	h.Gateway6 = netip.MustParseAddr(fmt.Sprintf("fd00:0:%x::1", i))

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: h.RouterLink},
		PeerName:      HostLink,
		PeerNamespace: netlink.NsFd(h.nsh),
	}
	if err := up.nl.LinkAdd(veth); err != nil {
		h.close()
		return nil, fmt.Errorf("veth %s:%s ↔ %s:%s: %w", up.Role, h.RouterLink, h.NS, HostLink, err)
	}
	steps := []func() error{
		func() error { return up.addAddr(h.RouterLink, h.Gateway4, bits4) },
		func() error { return up.addAddr(h.RouterLink, h.Gateway6, 64) },
		func() error { return h.addAddr(HostLink, h.Addr4, bits4) },
		func() error { return h.addAddr(HostLink, h.Addr6, 64) },
		func() error { return up.linkUp(h.RouterLink) },
		func() error { return h.linkUp(HostLink) },
		func() error { return h.addDefaultRoute(h.Gateway4) },
		func() error { return h.addDefaultRoute(h.Gateway6) },
	}
	if up != l.Router {
		// the router in the middle reaches the site's hosts through the edge router
		steps = append(steps,
			func() error { return l.Router.addRoute(netip.PrefixFrom(h.Gateway4, bits4).Masked(), up.Addr4) },
			func() error { return l.Router.addRoute(netip.PrefixFrom(h.Gateway6, 64).Masked(), up.Addr6) },
		)
	}
	if hs.Kind == EdgeRouter {
		steps = append(steps, func() error {
			return h.Sysctl(map[string]string{"net.ipv4.conf.all.forwarding": "1", "net.ipv6.conf.all.forwarding": "1"})
		})
	}
	if hs.Kind == Client {
		// Off a wire, packets carry complete checksums; between veths the kernel leaves
		// them to an "offload" that never happens (CHECKSUM_PARTIAL). An XDP program
		// sees no skb, so a packet it encapsulates would reach the backend with the
		// checksum unfinished and be dropped there. Make the client finish its own.
		steps = append(steps, func() error { return h.Exec(hostprog.Ethtool, "-K", HostLink, "tx", "off") })
	}
	if hs.Kind == LBNode {
		// no forwarding sysctls: manifold run enables forwarding on its interfaces itself
		steps = append(steps,
			// XDP_TX out of a veth needs NAPI on the peer, which GRO gives it ...
			func() error { return up.Exec(hostprog.Ethtool, "-K", h.RouterLink, "gro", "on") },
			// ... but the veth driver kicks the peer's NAPI after XDP_TX only when the
			// peer has an XDP program of its own (veth_xdp_flush): with GRO alone the
			// frames wait in the peer's ring until something else polls it.
			func() error { return up.attachXDPPass(h.RouterLink) },
		)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			h.close()
			return nil, err
		}
	}
	return h, nil
}

// Sysctl writes net.* sysctls of the host's namespace.
func (h *Host) Sysctl(settings map[string]string) error {
	return InNamespace(h.NS, func() error {
		for _, k := range slices.Sorted(maps.Keys(settings)) {
			path := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(path, []byte(settings[k]), 0); err != nil {
				return fmt.Errorf("%s: sysctl %s=%s: %w", h.NS, k, settings[k], err)
			}
		}
		return nil
	})
}

// SysctlValue reads a setting inside the host's namespace (net.ipv4.conf.eth0.forwarding).
func (h *Host) SysctlValue(name string) (string, error) {
	var v string
	err := InNamespace(h.NS, func() error {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

// Exec runs a short command inside the host's namespace and returns its error with its
// output.
func (h *Host) Exec(prog hostprog.Program, args ...string) error {
	_, err := h.Output(prog, args...)
	return err
}

// Output runs a short command inside the host's namespace and returns its combined
// output.
func (h *Host) Output(prog hostprog.Program, args ...string) (string, error) {
	out, err := hostprog.InNetns(context.Background(), h.NS, prog, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %s %s: %w: %s", h.NS, prog.Name(), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// LinkStats returns the counters of one of the host's interfaces.
func (h *Host) LinkStats(name string) (*netlink.LinkStatistics, error) {
	link, err := h.nl.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("%s: link %s: %w", h.NS, name, err)
	}
	if link.Attrs().Statistics == nil {
		return nil, fmt.Errorf("%s: link %s: no statistics", h.NS, name)
	}
	return link.Attrs().Statistics, nil
}

// XDPProgID returns the id of the XDP program attached to an interface, 0 if none.
func (h *Host) XDPProgID(name string) (uint32, error) {
	link, err := h.nl.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("%s: link %s: %w", h.NS, name, err)
	}
	if x := link.Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId, nil
	}
	return 0, nil
}

// TCXIngress returns the programs attached to an interface's tcx ingress hook, as
// "name (id N)": `tc filter show` does not list them.
func (h *Host) TCXIngress(name string) ([]string, error) {
	link, err := h.nl.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("%s: link %s: %w", h.NS, name, err)
	}
	var res *bpflink.QueryResult
	// The ifindex is looked up in the calling thread's namespace.
	err = InNamespace(h.NS, func() error {
		res, err = bpflink.QueryPrograms(bpflink.QueryOptions{Target: link.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: tcx ingress of %s: %w", h.NS, name, err)
	}
	var progs []string
	for _, p := range res.Programs {
		desc := fmt.Sprintf("id %d", p.ID)
		if prog, err := ebpf.NewProgramFromID(p.ID); err == nil {
			if info, err := prog.Info(); err == nil {
				desc = fmt.Sprintf("%s (id %d)", info.Name, p.ID)
			}
			prog.Close()
		}
		progs = append(progs, desc)
	}
	return progs, nil
}

// IsLocal reports whether every one of addrs is an address of the host that it
// accepts packets for: configured, and with its local route in place. (An IPv6
// address's local route is added by a kernel worker a moment after the address, even
// without DAD; until then packets to it are dropped.)
func (h *Host) IsLocal(addrs ...netip.Addr) (bool, error) {
	for _, a := range addrs {
		routes, err := h.nl.RouteGet(net.IP(a.AsSlice()))
		if err != nil {
			return false, fmt.Errorf("%s: route get %s: %w", h.NS, a, err)
		}
		if len(routes) == 0 || routes[0].Type != unix.RTN_LOCAL {
			return false, nil
		}
	}
	return true, nil
}

// WaitLocal waits until IsLocal(addrs...) holds.
func (h *Host) WaitLocal(timeout time.Duration, addrs ...netip.Addr) error {
	return Eventually(timeout, 10*time.Millisecond, func() error {
		ok, err := h.IsLocal(addrs...)
		if err == nil && !ok {
			err = fmt.Errorf("%s: %v not all local yet", h.NS, addrs)
		}
		return err
	})
}

// attachXDPPass attaches a program that passes every packet to an interface, in native
// mode, through the legacy netlink attachment: it stays with the interface after the
// program's file descriptor is closed, and goes with it.
func (h *Host) attachXDPPass(name string) error {
	link, err := h.nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: link %s: %w", h.NS, name, err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "lab_xdp_pass",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("load XDP pass program: %w", err)
	}
	defer prog.Close()
	// netlink's XDP call has no Handle variant: its socket is made in the calling
	// thread's namespace.
	err = InNamespace(h.NS, func() error {
		return netlink.LinkSetXdpFdWithFlags(link, prog.FD(), nl.XDP_FLAGS_DRV_MODE)
	})
	if err != nil {
		return fmt.Errorf("%s: XDP pass program on %s: %w", h.NS, name, err)
	}
	return nil
}

func (h *Host) linkUp(name string) error {
	link, err := h.nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: link %s: %w", h.NS, name, err)
	}
	if err := h.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s: link %s up: %w", h.NS, name, err)
	}
	return nil
}

func (h *Host) addAddr(name string, a netip.Addr, bits int) error {
	link, err := h.nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: link %s: %w", h.NS, name, err)
	}
	addr := &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(a, bits))}
	if a.Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := h.nl.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("%s: address %s/%d on %s: %w", h.NS, a, bits, name, err)
	}
	return nil
}

func (h *Host) addRoute(dst netip.Prefix, gw netip.Addr) error {
	if err := h.nl.RouteAdd(&netlink.Route{Dst: prefixNet(dst), Gw: net.IP(gw.AsSlice())}); err != nil {
		return fmt.Errorf("%s: route %s via %s: %w", h.NS, dst, gw, err)
	}
	return nil
}

func (h *Host) addDefaultRoute(gw netip.Addr) error {
	link, err := h.nl.LinkByName(HostLink)
	if err != nil {
		return fmt.Errorf("%s: link %s: %w", h.NS, HostLink, err)
	}
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(gw.AsSlice())}
	if gw.Is6() {
		r.Family = netlink.FAMILY_V6
	} else {
		r.Family = netlink.FAMILY_V4
	}
	if err := h.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("%s: default route via %s: %w", h.NS, gw, err)
	}
	return nil
}

// resolveGateways sends one datagram to each gateway (the router answers with a port
// unreachable) and waits until both neighbour entries are valid.
func (h *Host) resolveGateways() error {
	link, err := h.nl.LinkByName(HostLink)
	if err != nil {
		return fmt.Errorf("%s: link %s: %w", h.NS, HostLink, err)
	}
	for _, gw := range []netip.Addr{h.Gateway4, h.Gateway6} {
		err := InNamespace(h.NS, func() error {
			c, err := net.Dial("udp", netip.AddrPortFrom(gw, 9).String())
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("lab"))
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: probe gateway %s: %w", h.NS, gw, err)
		}
		family := netlink.FAMILY_V4
		if gw.Is6() {
			family = netlink.FAMILY_V6
		}
		err = Eventually(3*time.Second, 20*time.Millisecond, func() error {
			neighs, err := h.nl.NeighList(link.Attrs().Index, family)
			if err != nil {
				return err
			}
			for _, n := range neighs {
				ip, _ := netip.AddrFromSlice(n.IP)
				if ip.Unmap() == gw && n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0 {
					return nil
				}
			}
			return fmt.Errorf("no neighbour entry for %s", gw)
		})
		if err != nil {
			return fmt.Errorf("%s: resolve gateway: %w", h.NS, err)
		}
	}
	return nil
}

func (h *Host) close() {
	if h.nl != nil {
		h.nl.Close()
		h.nl = nil
	}
	if h.nsh.IsOpen() {
		h.nsh.Close()
	}
}

// Cleanup removes what a lab of this prefix may have left behind, by this process or an
// earlier one: it stops every process running in a <prefix>-* namespace (SIGTERM, then
// SIGKILL after 3s) and deletes those namespaces, and with them their veths.
func Cleanup(prefix string) error {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lab cleanup: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			names = append(names, e.Name())
		}
	}
	var pids []int
	for _, ns := range names {
		out, err := hostprog.Command(hostprog.IP, "netns", "pids", ns).Output()
		if err != nil {
			continue // a half-made namespace: deleting it below is all there is to do
		}
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
	}
	killAll(pids, 3*time.Second)
	var errs []error
	for _, ns := range names {
		if out, err := hostprog.Command(hostprog.IP, "netns", "del", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", ns, err, strings.TrimSpace(string(out))))
		}
	}
	// FRR's files live outside the test's directory (StartFRR says why)
	errs = append(errs, os.RemoveAll(frrDir(prefix)))
	return errors.Join(errs...)
}

// killAll sends SIGTERM to each pid, waits up to grace for them to exit, then SIGKILLs
// the rest.
func killAll(pids []int, grace time.Duration) {
	if len(pids) == 0 {
		return
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	alive := func() []int {
		var left []int
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil && !isZombie(pid) {
				left = append(left, pid)
			}
		}
		return left
	}
	deadline := time.Now().Add(grace)
	for len(alive()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range alive() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// Eventually calls cond every interval until it returns nil or timeout has passed; it
// then returns cond's last error.
func Eventually(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
