package lab

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// transitDst are addresses on be1's lo that the router sends through lb1: what the
// client sends there crosses lb1 as transit traffic, for no VIP and not for lb1.
var transitDst = map[bool]netip.Addr{false: netip.MustParseAddr("10.99.1.1"), true: netip.MustParseAddr("fd00:99::1")}

// eventCount reads manifold_events_total{event} from a node's /metrics.
func eventCount(t *testing.T, node *Host, event string) uint64 {
	t.Helper()
	_, families, err := Scrape(node, "127.0.0.1:9100")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := MetricValue(families, "manifold_events_total", map[string]string{"event": event})
	if !ok {
		t.Fatalf("%s /metrics has no manifold_events_total{event=%q}", node.Role, event)
	}
	return uint64(v)
}

// The node as a router (node.forward_transit: true, no service at all): connections
// from the client to an address behind be1, which the router sends through lb1, reach
// be1's HTTP server, and lb1 routes their packets in XDP (transit_forwarded grows by
// at least the client's packets of every connection but the first few, which may pass
// to the kernel while it resolves the next hop).
func TestTransitThroughNode(t *testing.T) {
	requireManifold(t)
	l := newLab(t, "lb1")
	client, lb, be := l.Host("client"), l.Host("lb1"), l.Host("be1")
	if _, err := l.StartNginx(be); err != nil {
		t.Fatal(err)
	}
	// The router sends the client's packets for the transit addresses to lb1, and what
	// comes back from lb1 on to be1 (a rule on lb1's link; its table 100 has the route).
	for v6, dst := range transitDst {
		if err := be.addAddr("lo", dst, dst.BitLen()); err != nil {
			t.Fatal(err)
		}
		fam, lbAddr, beAddr := "-4", lb.Addr4, be.Addr4
		if v6 {
			fam, lbAddr, beAddr = "-6", lb.Addr6, be.Addr6
		}
		for _, args := range [][]string{
			{fam, "route", "add", dst.String(), "via", lbAddr.String()},
			{fam, "rule", "add", "iif", lb.RouterLink, "table", "100", "priority", "100"},
			{fam, "route", "add", dst.String(), "via", beAddr.String(), "table", "100"},
		} {
			if err := l.Router.Exec(hostprog.IP, args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := l.StartNode(manifoldBin, lb, NodeConfig{Name: lb.Role, Address: lb.Addr4, Address6: lb.Addr6, ForwardTransit: true}); err != nil {
		t.Fatal(err)
	}
	for _, v6 := range []bool{false, true} {
		dst := transitDst[v6]
		t.Run(map[bool]string{false: "IPv4", true: "IPv6"}[v6], func(t *testing.T) {
			const conns = 30
			before := eventCount(t, lb, "transit_forwarded")
			for i := range conns {
				body, err := HTTPGet(client.NS, URL(dst, 80), 0)
				if err != nil {
					t.Fatalf("connection %d to %s through %s: %v", i, dst, lb.Role, err)
				}
				if got := strings.TrimSpace(body); got != be.Role {
					t.Fatalf("connection %d to %s answered %q, want %s", i, dst, got, be.Role)
				}
			}
			// a connection's client sends at least SYN, ACK, the request and its FIN
			routed := eventCount(t, lb, "transit_forwarded") - before
			if min := uint64(4 * (conns - 2)); routed < min {
				t.Errorf("%s routed %d packets in XDP for %d connections, want at least %d", lb.Role, routed, conns, min)
			}
			t.Logf("%d connections to %s through %s: %d packets routed in XDP", conns, dst, lb.Role, routed)
		})
	}
}
