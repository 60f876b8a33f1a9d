package lab

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The dissertation's topology: the nodes peer with a route reflector (GoBGP's daemon,
// Debian gobgpd) that sends every path, not only the best, to the router (BIRD) with
// add-path; BIRD merges them into one multipath route. Both run in the router's
// namespace: BIRD has port 179, the reflector ReflectorPort.

// ReflectorPort is the route reflector's BGP port.
const ReflectorPort = 1790

// reflectorID is the route reflector's router id and cluster id.
const reflectorID = "10.255.255.2"

// ReflectorConfig renders gobgpd's configuration: every client in asn (iBGP), and BIRD
// on the loopback, which gets every path (add-path send).
func ReflectorConfig(asn uint32, clients []netip.Addr) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[global.config]\n  as = %d\n  router-id = %q\n  port = %d\n", asn, reflectorID, ReflectorPort)
	neighbor := func(addr string, addPaths bool) {
		fmt.Fprintf(&b, "\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = %q\n    peer-as = %d\n", addr, asn)
		fmt.Fprintf(&b, "  [neighbors.route-reflector.config]\n    route-reflector-client = true\n    route-reflector-cluster-id = %q\n", reflectorID)
		if addPaths {
			b.WriteString("  [neighbors.transport.config]\n    passive-mode = true\n")
		}
		for _, family := range []string{"ipv4-unicast", "ipv6-unicast"} {
			fmt.Fprintf(&b, "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = %q\n", family)
			if addPaths {
				b.WriteString("    [neighbors.afi-safis.add-paths.config]\n      send-max = 16\n")
			}
		}
	}
	for _, c := range clients {
		neighbor(c.String(), false)
	}
	neighbor("127.0.0.1", true)
	return b.String()
}

// ReflectedBirdConfig renders BIRD's configuration as the reflector's iBGP client with
// add-path receive: every node's path is a route, its next hop (a node, on one of the
// router's links) resolved through the links' direct routes, and the paths merged
// into one multipath route.
func ReflectedBirdConfig(asn uint32) string {
	return fmt.Sprintf(`# manifold lab router: iBGP with the route reflector, every path by add-path
log stderr all;
router id 10.255.255.1;
protocol device { scan time 1; }
# the router's own links, for the next hops of the iBGP routes to resolve against
protocol direct { ipv4; ipv6; }
protocol kernel kernel4 {
	ipv4 { import none; export where source = RTS_BGP; };
	merge paths on;
}
protocol kernel kernel6 {
	ipv6 { import none; export where source = RTS_BGP; };
	merge paths on;
}
protocol bgp reflector {
	local 127.0.0.1 as %d;
	neighbor 127.0.0.1 port %d as %d;
	connect retry time 1;
	error wait time 1, 4;
	ipv4 { import all; export none; add paths rx; };
	ipv6 { import all; export none; add paths rx; };
}
`, asn, ReflectorPort, asn)
}

// StartReflector runs gobgpd in the router namespace and returns once its API answers.
func (l *Lab) StartReflector(asn uint32, clients []netip.Addr) (*Process, error) {
	conf := filepath.Join(l.Dir, "gobgpd.toml")
	if err := writeFileAtomic(conf, []byte(ReflectorConfig(asn, clients))); err != nil {
		return nil, err
	}
	p, err := l.Start(l.Router, "gobgpd", hostprog.GoBGPd, "-f", conf, "-p", "--pprof-disable", "--api-hosts", "127.0.0.1:50051")
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(10*time.Second, func() error { _, err := l.ReflectorShow("neighbor"); return err }); err != nil {
		return p, fmt.Errorf("gobgpd: %w", err)
	}
	return p, nil
}

// ReflectorShow runs the gobgp CLI against the reflector: `gobgp ARGS`.
func (l *Lab) ReflectorShow(args ...string) (string, error) {
	return l.Router.Output(hostprog.GoBGP, append([]string{"-u", "127.0.0.1", "-p", "50051"}, args...)...)
}
