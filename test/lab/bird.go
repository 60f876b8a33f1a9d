package lab

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The lab's router speaks BGP with a real BIRD 2 (Debian bird2): one eBGP session per
// LB node, routes from all of them merged into one multipath kernel route per VIP,
// and the kernel hashing flows over its next hops by their 5-tuple.

// RouterASN is the router's AS; LB nodes peer with it from their own AS.
const RouterASN = 65000

// RouterPeer is one BGP neighbour of the router.
type RouterPeer struct {
	Name     string     // protocol name, e.g. the node's role
	Address  netip.Addr // the node's address
	ASN      uint32
	Password string // TCP MD5; "" for none
	BFD      bool   // runs BFD with RouterOptions.BFD's timers
}

// RouterOptions shape the router's BGP.
type RouterOptions struct {
	// HoldTime of every session (BIRD's minimum is 3 s); 0 keeps BIRD's 240 s.
	HoldTime time.Duration
	// BFD, when set, runs BFD on every session with these timers.
	BFD *RouterBFD
	// ASN is the router's own AS (0: RouterASN), and RouterID its BGP identifier (the
	// zero address: 10.255.255.1); routers that peer with each other need their own.
	ASN      uint32
	RouterID netip.Addr
	// Transit are routers this one exchanges every route with (a region's router and
	// the core): it exports them what it learned from its LB nodes and from each
	// other, and imports theirs, which lose to its own nodes' routes by their longer AS
	// path: a region's clients stay on their own site while it announces the VIP.
	Transit []RouterPeer
}

// RouterBFD are the router's BFD timers: the interval it sends at and accepts, and the
// packets missed before a session is down.
type RouterBFD struct {
	Interval   time.Duration
	Multiplier int
}

// Bird is BIRD running in a router's namespace.
type Bird struct {
	*Process
	Socket string
	Router *Host
}

// BirdConfig renders the router's BIRD configuration.
func BirdConfig(peers []RouterPeer, o RouterOptions) string {
	var b strings.Builder
	asn, id := cmp.Or(o.ASN, RouterASN), "10.255.255.1"
	if o.RouterID.IsValid() {
		id = o.RouterID.String()
	}
	b.WriteString(`# manifold lab router: eBGP with every LB node, ECMP into the kernel
log stderr all;
router id ` + id + `;
# since when each session is up, to the millisecond: tests tell a restarted session by it
timeformat protocol iso long ms;

protocol device { scan time 1; }

# "merge paths" installs the equal-cost routes of several BGP neighbours as one
# multipath route: that is what spreads the VIP over the LB nodes.
protocol kernel kernel4 {
	ipv4 { import none; export all; };
	merge paths on;
}
protocol kernel kernel6 {
	ipv6 { import none; export all; };
	merge paths on;
}

`)
	if o.BFD != nil {
		ms := o.BFD.Interval.Milliseconds()
		fmt.Fprintf(&b, "\nprotocol bfd {\n\tinterface \"*\" {\n\t\tmin rx interval %d ms;\n\t\tmin tx interval %d ms;\n\t\tmultiplier %d;\n\t};\n}\n",
			ms, ms, o.BFD.Multiplier)
	}
	b.WriteString(`
template bgp lbnode {
	local as ` + fmt.Sprint(asn) + `;
	connect retry time 1;
	error wait time 1, 4;
`)

	if o.HoldTime > 0 {
		fmt.Fprintf(&b, "\thold time %d;\n\tkeepalive time %d;\n", int(o.HoldTime/time.Second), max(1, int(o.HoldTime/time.Second)/3))
	}
	b.WriteString(`	ipv4 { import all; export none; };
	ipv6 { import all; export none; };
}
`)
	for _, p := range peers {
		fmt.Fprintf(&b, "\nprotocol bgp %s from lbnode {\n\tneighbor %s as %d;\n", p.Name, p.Address, p.ASN)
		if p.Password != "" {
			fmt.Fprintf(&b, "\tpassword %q;\n", p.Password)
		}
		if p.BFD && o.BFD != nil {
			b.WriteString("\tbfd on;\n")
		}
		b.WriteString("}\n")
	}
	for _, p := range o.Transit {
		fmt.Fprintf(&b, "\nprotocol bgp %s from lbnode {\n\tneighbor %s as %d;\n\tipv4 { import all; export all; };\n\tipv6 { import all; export all; };\n}\n",
			p.Name, p.Address, p.ASN)
	}
	return b.String()
}

// StartBird runs BIRD in the router namespace with L4 ECMP hashing switched on, and
// returns once it answers on its control socket.
func (l *Lab) StartBird(peers []RouterPeer, o RouterOptions) (*Bird, error) {
	return l.startBird(l.Router, "bird", peers, o)
}

// StartEdgeBird runs BIRD on a site's edge router, as StartBird does on the router in
// the middle.
func (l *Lab) StartEdgeBird(router *Host, peers []RouterPeer, o RouterOptions) (*Bird, error) {
	if router.Kind != EdgeRouter {
		return nil, fmt.Errorf("lab: %s is a %s, not an edge router", router.Role, router.Kind)
	}
	return l.startBird(router, "bird-"+router.Role, peers, o)
}

// startBird runs BIRD on router; name names its process and its files.
func (l *Lab) startBird(router *Host, name string, peers []RouterPeer, o RouterOptions) (*Bird, error) {
	// hash flows on the 5-tuple (policy 1), not just the addresses: one client's
	// connections then spread over the nodes
	if err := router.Sysctl(map[string]string{
		"net.ipv4.fib_multipath_hash_policy": "1",
		"net.ipv6.fib_multipath_hash_policy": "1",
	}); err != nil {
		return nil, err
	}
	return l.startBirdConfig(router, name, BirdConfig(peers, o))
}

// StartBirdConfig runs BIRD in the router namespace with the configuration text conf.
func (l *Lab) StartBirdConfig(conf string) (*Bird, error) {
	return l.startBirdConfig(l.Router, "bird", conf)
}

// startBirdConfig runs BIRD on router with the configuration text conf; name names its
// process and its files.
func (l *Lab) startBirdConfig(router *Host, name, conf string) (*Bird, error) {
	path := filepath.Join(l.Dir, name+".conf")
	if err := writeFileAtomic(path, []byte(conf)); err != nil {
		return nil, err
	}
	b := &Bird{Socket: filepath.Join(l.Dir, name+".ctl"), Router: router}
	p, err := l.Start(router, name, hostprog.Bird, "-f", "-c", path, "-s", b.Socket, "-P", filepath.Join(l.Dir, name+".pid"))
	if err != nil {
		return nil, err
	}
	b.Process = p
	if err := p.WaitReady(10*time.Second, func() error { _, err := b.Show("status"); return err }); err != nil {
		return b, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// Show runs `birdc show ARGS` and returns its output.
func (b *Bird) Show(args ...string) (string, error) {
	out, err := hostprog.Command(hostprog.Birdc, append([]string{"-s", b.Socket, "show"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("birdc show %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// NextHops returns the gateways of the router's kernel route to vip (a /32 or /128),
// sorted; none when there is no route. The kernel's route is what forwards, whichever
// routing daemon put it there.
func (l *Lab) NextHops(vip netip.Addr) ([]netip.Addr, error) { return nextHops(l.Router, vip) }

// WaitNextHops waits up to timeout until the router's route to vip has exactly the
// next hops want (none: no route), and returns how long that took.
func (l *Lab) WaitNextHops(vip netip.Addr, want []netip.Addr, timeout time.Duration) (time.Duration, error) {
	return waitNextHops(l.Router, vip, want, timeout)
}

// WaitNextHops waits up to timeout until BIRD's router routes vip over exactly the
// next hops want, and returns how long that took.
func (b *Bird) WaitNextHops(vip netip.Addr, want []netip.Addr, timeout time.Duration) (time.Duration, error) {
	return waitNextHops(b.Router, vip, want, timeout)
}

func nextHops(router *Host, vip netip.Addr) ([]netip.Addr, error) {
	family := "-4"
	if vip.Is6() {
		family = "-6"
	}
	out, err := router.Output(hostprog.IP, "-j", family, "route", "show", "exact", netip.PrefixFrom(vip, vip.BitLen()).String())
	if err != nil {
		return nil, err
	}
	var routes []struct {
		Gateway  string `json:"gateway"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
		} `json:"nexthops"`
	}
	if strings.TrimSpace(out) == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return nil, fmt.Errorf("ip route: %w: %s", err, out)
	}
	var gws []netip.Addr
	add := func(s string) error {
		if s == "" {
			return nil
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return err
		}
		gws = append(gws, a)
		return nil
	}
	for _, r := range routes {
		if err := add(r.Gateway); err != nil {
			return nil, err
		}
		for _, nh := range r.Nexthops {
			if err := add(nh.Gateway); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(gws, netip.Addr.Compare)
	return gws, nil
}

func waitNextHops(router *Host, vip netip.Addr, want []netip.Addr, timeout time.Duration) (time.Duration, error) {
	want = slices.Clone(want)
	slices.SortFunc(want, netip.Addr.Compare)
	start := time.Now()
	var got []netip.Addr
	var err error
	for {
		got, err = nextHops(router, vip)
		if err == nil && slices.Equal(got, want) {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("route to %s: next hops %v after %s, want %v", vip, got, timeout, want)
}

// ProtocolSince returns when BIRD's protocol name last changed state ("2026-11-23
// 17:33:00.123"): a session that restarts gets a new one.
func (b *Bird) ProtocolSince(name string) (string, error) {
	out, err := b.Show("protocols", name)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == name {
			return f[4] + " " + f[5], nil
		}
	}
	return "", fmt.Errorf("birdc show protocols %s: no line of it:\n%s", name, out)
}
