package lab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The active-active topology: a router running BIRD with one eBGP session per LB node,
// N nodes announcing the VIPs, M backends, a client behind the router. The lab tests,
// the demo and the control-plane benchmark all build it from here.
//
//	client ── router (BIRD, ECMP) ──┬── lb1 … lbN   manifold run, bgp → router
//	                                └── be1 … beM   manifold backend + nginx

// VIPs of the active-active topology: the web service on every node, the partial
// service on the first two nodes only.
var (
	WebVIP4     = netip.MustParseAddr("198.51.100.10")
	WebVIP6     = netip.MustParseAddr("2001:db8:100::10")
	PartialVIP4 = netip.MustParseAddr("198.51.100.20")
	PartialVIP6 = netip.MustParseAddr("2001:db8:100::20")
)

// NodeASN is the AS of every LB node (the MetalLB way: one AS for the fleet).
const NodeASN = 65001

// ActiveActiveSpec sizes the topology.
type ActiveActiveSpec struct {
	Prefix, Dir string
	Logf        func(format string, args ...any)
	Manifold    string // path of the manifold binary
	Nodes       int    // LB nodes lb1…
	Backends    int    // backends be1…
	Health      *Health
	HoldTime    time.Duration // of every BGP session
	DrainTime   time.Duration // of every node
	Password    string        // TCP MD5 key of every session; "" for none
	// Router is the routing suite of the router: "bird" (the default), "frr", or
	// "none" (the test starts the router's daemons itself).
	Router string
	// RefusingPeer adds to every node a second peer that refuses the session (the
	// router's IPv6 address on a port nothing listens on).
	RefusingPeer bool
	// BFD, when set, runs BFD with these timers on both sides of the sessions of
	// BFDNodes, or of every node when BFDNodes is empty.
	BFD      *RouterBFD
	BFDNodes []string
	// Fleet, when set, makes the nodes a fleet: an etcd cluster with a member on each
	// of the first three nodes holds the services (both web services and both partial
	// ones, imported with `manifold fleet import`), and the nodes' files name no
	// service.
	Fleet bool
	// APIToken is every node's node.api_token, which NodeAPI sends ("" for none).
	APIToken string
}

// bfdOn reports whether node role runs BFD.
func (s *ActiveActiveSpec) bfdOn(role string) bool {
	return s.BFD != nil && (len(s.BFDNodes) == 0 || slices.Contains(s.BFDNodes, role))
}

// ActiveActive is the running topology.
type ActiveActive struct {
	*Lab
	Spec     ActiveActiveSpec
	Bird     *Bird // when Spec.Router is bird
	FRR      *FRR  // when Spec.Router is frr
	Client   *Host
	Nodes    []*Host
	Backends []*Host
	Configs  map[string]NodeConfig // by node role
	Running  map[string]*Node      // nodes started and not stopped
	Nginx    map[string]*Process   // by backend role; nil while stopped
	Agents   map[string]*Process   // `manifold backend`, by backend role
	API      map[string]*NodeAPI   // by node role
	Etcd     *Etcd                 // when Spec.Fleet is set
}

// NewActiveActive builds the topology and starts BIRD, the backends' nginx and
// agents; the nodes are started by StartNode.
func NewActiveActive(spec ActiveActiveSpec) (a *ActiveActive, err error) {
	hosts := []HostSpec{{Role: "client", Kind: Client}}
	for i := 1; i <= spec.Nodes; i++ {
		hosts = append(hosts, HostSpec{Role: fmt.Sprintf("lb%d", i), Kind: LBNode})
	}
	for i := 1; i <= spec.Backends; i++ {
		hosts = append(hosts, HostSpec{Role: fmt.Sprintf("be%d", i), Kind: Backend})
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
	a = &ActiveActive{Lab: l, Spec: spec, Client: l.Host("client"), Nodes: l.HostsOf(LBNode), Backends: l.HostsOf(Backend),
		Configs: map[string]NodeConfig{}, Running: map[string]*Node{}, Nginx: map[string]*Process{},
		Agents: map[string]*Process{}, API: map[string]*NodeAPI{}}
	for _, be := range a.Backends {
		if err := a.StartNginx(be.Role); err != nil {
			return nil, err
		}
		if a.Agents[be.Role], err = l.StartBackendAgent(spec.Manifold, be, WebVIP4, WebVIP6, PartialVIP4, PartialVIP6); err != nil {
			return nil, err
		}
	}
	var peers []RouterPeer
	for i, n := range a.Nodes {
		peers = append(peers, RouterPeer{Name: n.Role, Address: n.Addr4, ASN: NodeASN, Password: spec.Password, BFD: spec.bfdOn(n.Role)})
		a.Configs[n.Role] = a.nodeConfig(n, i)
		a.API[n.Role] = &NodeAPI{Host: n, Token: spec.APIToken, client: HTTPClient(n.NS, 10*time.Second)}
	}
	if spec.Fleet {
		if err := a.startFleet(); err != nil {
			return nil, err
		}
	}
	ro := RouterOptions{HoldTime: spec.HoldTime, BFD: spec.BFD}
	switch spec.Router {
	case "", "bird":
		a.Bird, err = l.StartBird(peers, ro)
	case "frr":
		a.FRR, err = l.StartFRR(peers, ro)
	case "none":
	default:
		err = fmt.Errorf("lab: unknown router %q (bird or frr)", spec.Router)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// startFleet starts the etcd cluster, seeds it with the services of the first node's
// config, and leaves every node's config with a fleet section and no services.
func (a *ActiveActive) startFleet() error {
	var err error
	if a.Etcd, err = a.StartEtcd(a.Nodes[:min(3, len(a.Nodes))]...); err != nil {
		return err
	}
	first := a.Nodes[0]
	services := a.Configs[first.Role]
	for _, n := range a.Nodes {
		c := a.Configs[n.Role]
		c.Services, c.Fleet = nil, &Fleet{Endpoints: a.Etcd.Endpoints()}
		a.Configs[n.Role] = c
	}
	services.BGP = nil
	return a.FleetImport(a.Spec.Manifold, first, a.Configs[first.Role], services, false)
}

// nodeConfig is node i's config: the web service, the partial one on nodes 0 and 1.
// Odd nodes list backends in reverse order: the order must not matter.
func (a *ActiveActive) nodeConfig(n *Host, i int) NodeConfig {
	c := NodeConfig{Name: n.Role, Address: n.Addr4, Address6: n.Addr6, APIToken: a.Spec.APIToken, BGP: &BGP{
		ASN: NodeASN, RouterID: n.Addr4, DrainTime: a.Spec.DrainTime,
		Peers: []BGPPeer{{Address: n.Gateway4, ASN: RouterASN, HoldTime: a.Spec.HoldTime, Password: a.Spec.Password}},
	}}
	if b := a.Spec.BFD; a.Spec.bfdOn(n.Role) {
		c.BGP.Peers[0].BFD = &BFD{MinRx: b.Interval, MinTx: b.Interval, Multiplier: b.Multiplier}
	}
	if a.Spec.RefusingPeer {
		c.BGP.Peers = append(c.BGP.Peers, a.RefusingPeer(n))
	}
	type svc struct {
		name string
		vip  netip.Addr
	}
	services := []svc{{"web-v4", WebVIP4}, {"web-v6", WebVIP6}}
	if i < 2 {
		services = append(services, svc{"partial-v4", PartialVIP4}, svc{"partial-v6", PartialVIP6})
	}
	for _, s := range services {
		sv := Service{Name: s.name, VIP: s.vip, Port: 80, Health: a.Spec.Health}
		for j := range a.Backends {
			be := a.Backends[j]
			if i%2 == 1 {
				be = a.Backends[len(a.Backends)-1-j]
			}
			if s.vip.Is4() {
				sv.Backends = append(sv.Backends, be.Addr4)
			} else {
				sv.Backends = append(sv.Backends, be.Addr6)
			}
		}
		c.Services = append(c.Services, sv)
	}
	return c
}

// RefusingPeer is a peer of node n that refuses the session: the router's IPv6
// address on a port nothing listens on.
func (a *ActiveActive) RefusingPeer(n *Host) BGPPeer {
	return BGPPeer{Address: n.Gateway6, ASN: RouterASN, Port: 1179, HoldTime: a.Spec.HoldTime}
}

// StartNode starts `manifold run` on an LB node; it returns once XDP is attached.
func (a *ActiveActive) StartNode(role string) error {
	if a.Running[role] != nil {
		return fmt.Errorf("%s is running", role)
	}
	n, err := a.Lab.StartNode(a.Spec.Manifold, a.Host(role), a.Configs[role])
	if err != nil {
		return err
	}
	a.Running[role] = n
	return nil
}

// StopNode stops a node with sig (SIGTERM: drains; SIGKILL: dies) and waits for it
// to exit.
func (a *ActiveActive) StopNode(role string, sig syscall.Signal) error {
	n := a.Running[role]
	if n == nil {
		return fmt.Errorf("%s is not running", role)
	}
	delete(a.Running, role)
	if err := n.Signal(sig); err != nil {
		return err
	}
	err := n.Wait(a.Spec.DrainTime + 10*time.Second)
	if sig == syscall.SIGKILL && n.ExitErr() != nil && !n.Running() {
		return nil // died as told
	}
	return err
}

// StartNginx (re)starts the HTTP server of a backend.
func (a *ActiveActive) StartNginx(role string) error {
	if a.Nginx[role] != nil {
		return fmt.Errorf("nginx on %s is running", role)
	}
	p, err := a.Lab.StartNginx(a.Host(role))
	if err != nil {
		return err
	}
	a.Nginx[role] = p
	return nil
}

// StopNginx stops the HTTP server of a backend: its health check starts failing.
func (a *ActiveActive) StopNginx(role string) error {
	p := a.Nginx[role]
	if p == nil {
		return fmt.Errorf("nginx on %s is not running", role)
	}
	a.Nginx[role] = nil
	return p.Stop()
}

// NodeAddrs returns the addresses of the family of vip of the given nodes: the next
// hops the router should have for vip when exactly these nodes announce it.
func (a *ActiveActive) NodeAddrs(vip netip.Addr, roles ...string) []netip.Addr {
	var out []netip.Addr
	for _, r := range roles {
		h := a.Host(r)
		if vip.Is4() {
			out = append(out, h.Addr4)
		} else {
			out = append(out, h.Addr6)
		}
	}
	return out
}

// WaitRoutes waits until the router routes every vip over exactly the given nodes (none:
// no route), and returns how long that took.
func (a *ActiveActive) WaitRoutes(vips []netip.Addr, timeout time.Duration, nodes ...string) (time.Duration, error) {
	start := time.Now()
	for _, vip := range vips {
		if _, err := a.WaitNextHops(vip, a.NodeAddrs(vip, nodes...), timeout-time.Since(start)); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// Status asks a node's API for its status.
func (a *ActiveActive) Status(role string) (*wire.Status, error) {
	out, err := a.Host(role).Output(hostprog.Curl, "-sf", "--max-time", "2", "http://127.0.0.1:9100/api/v1/status")
	if err != nil {
		return nil, err
	}
	var st wire.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("%s status: %w", role, err)
	}
	return &st, nil
}

// BackendState returns the state (up, draining, down) a node's status gives a backend
// address in a service.
func BackendState(st *wire.Status, service string, addr netip.Addr) (wire.BackendState, error) {
	if s, ok := st.Service(service); ok {
		if b, ok := s.Backend(addr.String()); ok {
			return b.State, nil
		}
	}
	return "", fmt.Errorf("no backend %s in service %s", addr, service)
}

// Describe summarises the router's view for logs: the next hops of every VIP.
func (a *ActiveActive) Describe() string {
	var b strings.Builder
	for _, vip := range []netip.Addr{WebVIP4, WebVIP6, PartialVIP4, PartialVIP6} {
		nh, err := a.NextHops(vip)
		fmt.Fprintf(&b, "%s → %v", vip, nh)
		if err != nil {
			fmt.Fprintf(&b, " (%v)", err)
		}
		b.WriteString("\n")
	}
	return b.String()
}
