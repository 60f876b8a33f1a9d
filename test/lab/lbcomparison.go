package lab

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// The load-balancer comparison topology: manifold and three conventional load
// balancers side by side, each on a VIP of its own, in front of the same backends, all
// running at once, so that one client can measure them in turn without restarting
// anything. The HTTP benchmark and its lab test build it from here.
//
//	client ── router ──┬── lb            manifold run, XDP on eth0     ComparisonVIPs[0]
//	                   ├── proxy         nftables DNAT                 [1]
//	                   │                 HAProxy, TCP mode             [2]  on lo
//	                   │                 nginx stream                  [3]  on lo
//	                   ├── web-server-1  manifold backend (decap) + nginx
//	                   └── web-server-2
//
// The conventional load balancers run on a host of their own, with no XDP program on
// either end of its link, as they would run in production. On a veth, an XDP program
// is not the near-free XDP_PASS it is on a NIC: the driver then receives through NAPI
// and hands the program each packet as an XDP buffer, copying packets that lack its
// headroom. Measured on this lab, passing DNAT's packets through manifold's program
// (and the pass program the router's end of an LB node's link carries, see addHost)
// cost 5–15% of its requests/s. manifold's own traffic still carries both, a bias
// against manifold. Every host is a namespace of the same machine: none has cores of
// its own.
//
// Backends are named web-server-N, 12 bytes, so that their nginx answers with a
// 13-byte body (the name and a newline, see StartNginx): the body of the study the
// HTTP benchmark follows.

// Names of the ways a client reaches the backends in the comparison topology.
const (
	ModeDirect      = "direct"
	ModeManifold    = "manifold (DSR)"
	ModeDNAT        = "nftables DNAT"
	ModeHAProxy     = "HAProxy (TCP mode)"
	ModeNginxStream = "nginx stream"
)

// ComparisonVIPs are the VIPs of manifold, nftables DNAT, HAProxy and nginx stream,
// in that order.
var ComparisonVIPs = []netip.Addr{
	netip.MustParseAddr("198.51.100.10"),
	netip.MustParseAddr("198.51.100.11"),
	netip.MustParseAddr("198.51.100.12"),
	netip.MustParseAddr("198.51.100.13"),
}

// LBComparisonSpec sizes the topology.
type LBComparisonSpec struct {
	Prefix, Dir string
	Logf        func(format string, args ...any)
	Manifold    string // path of the manifold binary
	Backends    int    // web-server-1 …; at least 1
	// ProxyWorkers is HAProxy's thread count and nginx stream's worker count.
	ProxyWorkers int
}

// LBComparison is the running topology.
type LBComparison struct {
	*Lab
	Client   *Host
	LB       *Host // runs manifold
	Proxy    *Host // runs nftables DNAT, HAProxy and nginx stream
	Backends []*Host
	// Modes are the ways to reach the backends, direct first, each with the
	// addresses a client connects to on port 80.
	Modes []LBMode
}

// LBMode is one way of reaching the backends.
type LBMode struct {
	Name string
	// Addrs is the mode's VIP, or for direct every backend's address.
	Addrs []netip.Addr
}

// NewLBComparison builds the topology, starts every load balancer and the backends,
// and routes each VIP to the host of its load balancer. It does not wait for the
// modes to serve (see WaitServing).
func NewLBComparison(spec LBComparisonSpec) (c *LBComparison, err error) {
	if spec.Backends < 1 || spec.Backends > 9 {
		return nil, fmt.Errorf("lab: %d backends, 1 to 9", spec.Backends)
	}
	// the proxy host is a plain host to the lab, as a backend is: no XDP, no sysctls
	hosts := []HostSpec{{Role: "client", Kind: Client}, {Role: "lb", Kind: LBNode}, {Role: "proxy", Kind: Backend}}
	for i := 1; i <= spec.Backends; i++ {
		hosts = append(hosts, HostSpec{Role: fmt.Sprintf("web-server-%d", i), Kind: Backend})
	}
	l, err := New(Spec{Prefix: spec.Prefix, Hosts: hosts, Dir: spec.Dir, Logf: spec.Logf})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	c = &LBComparison{Lab: l, Client: l.Host("client"), LB: l.Host("lb"), Proxy: l.Host("proxy")}
	for i := 1; i <= spec.Backends; i++ {
		c.Backends = append(c.Backends, l.Host(fmt.Sprintf("web-server-%d", i)))
	}
	manifoldVIP, dnatVIP, haproxyVIP, streamVIP := ComparisonVIPs[0], ComparisonVIPs[1], ComparisonVIPs[2], ComparisonVIPs[3]
	var addrs []netip.Addr
	var ports []netip.AddrPort
	for _, be := range c.Backends {
		if _, err := l.StartNginx(be); err != nil {
			return nil, err
		}
		// only manifold's VIP reaches the backends: the others are translated or proxied
		if _, err := l.StartBackendAgent(spec.Manifold, be, manifoldVIP); err != nil {
			return nil, err
		}
		addrs = append(addrs, be.Addr4)
		ports = append(ports, netip.AddrPortFrom(be.Addr4, 80))
	}

	_, err = l.StartNode(spec.Manifold, c.LB, NodeConfig{Name: "lb", Address: c.LB.Addr4,
		Services: []Service{{Name: "web", VIP: manifoldVIP, Port: 80, Backends: addrs}}})
	if err != nil {
		return nil, err
	}
	if err := l.ApplyDNAT(c.Proxy, DNAT{VIP: dnatVIP, Port: 80, Backends: addrs}); err != nil {
		return nil, err
	}
	for _, vip := range []netip.Addr{haproxyVIP, streamVIP} {
		if err := c.Proxy.AddLoopbackAddr(vip); err != nil {
			return nil, err
		}
	}
	proxy := TCPProxy{Backends: ports, Workers: spec.ProxyWorkers}
	proxy.Listen = netip.AddrPortFrom(haproxyVIP, 80)
	if _, err := l.StartHAProxy(c.Proxy, proxy); err != nil {
		return nil, err
	}
	proxy.Listen = netip.AddrPortFrom(streamVIP, 80)
	if _, err := l.StartNginxStream(c.Proxy, proxy); err != nil {
		return nil, err
	}
	if err := l.RouteVIP(manifoldVIP, c.LB); err != nil {
		return nil, err
	}
	for _, vip := range []netip.Addr{dnatVIP, haproxyVIP, streamVIP} {
		if err := l.RouteVIP(vip, c.Proxy); err != nil {
			return nil, err
		}
	}
	c.Modes = []LBMode{
		{ModeDirect, addrs},
		{ModeManifold, []netip.Addr{manifoldVIP}},
		{ModeDNAT, []netip.Addr{dnatVIP}},
		{ModeHAProxy, []netip.Addr{haproxyVIP}},
		{ModeNginxStream, []netip.Addr{streamVIP}},
	}
	return c, nil
}

// Mode returns the mode of the given name, or false.
func (c *LBComparison) Mode(name string) (LBMode, bool) {
	i := slices.IndexFunc(c.Modes, func(m LBMode) bool { return m.Name == name })
	if i < 0 {
		return LBMode{}, false
	}
	return c.Modes[i], true
}

// WaitServing waits until every mode has answered on new connections from the
// client with the body of every backend, and fails as soon as an answer is not a
// backend's name: then the mode reaches something else than the backends. Direct
// must answer at each backend's address with that backend's name.
func (c *LBComparison) WaitServing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, m := range c.Modes {
		if err := c.waitServing(m, time.Until(deadline)); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	return nil
}

func (c *LBComparison) waitServing(m LBMode, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	seen := map[string]bool{}
	var lastErr error
	for {
		for i, addr := range m.Addrs {
			body, err := HTTPGet(c.Client.NS, URL(addr, 80), 0)
			if err != nil {
				lastErr = err
				continue
			}
			name := strings.TrimSuffix(body, "\n")
			want := slices.ContainsFunc(c.Backends, func(be *Host) bool { return be.Role == name })
			if m.Name == ModeDirect {
				want = name == c.Backends[i].Role
			}
			if !want || !strings.HasSuffix(body, "\n") {
				return fmt.Errorf("%s answered %q, not the name of a backend it should reach", addr, body)
			}
			seen[name] = true
		}
		if len(seen) == len(c.Backends) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s, answered from %d of %d backends (last error: %v)", timeout, len(seen), len(c.Backends), lastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
