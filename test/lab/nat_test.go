package lab

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// natBackendPort is where the agentless backend listens; the service is on port 80, so
// the node rewrites the port too.
const natBackendPort = 8080

// serveRemoteAddr runs a plain HTTP server (net/http, nothing of manifold's) in h's
// namespace on every address, answering each request with the address and port it
// came from, as the server sees them. It stops when the test ends.
func serveRemoteAddr(t *testing.T, h *Host, port uint16) {
	t.Helper()
	var ln net.Listener
	err := InNamespace(h.NS, func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port)) // the socket stays in the namespace
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, r.RemoteAddr)
	}), ReadHeaderTimeout: RequestTimeout}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("HTTP server on %s: %v", h.Role, err)
		}
	})
}

// A backend with no agent (no decapsulation, no VIP on lo), only a plain HTTP server
// on another port, serves the VIP through a node with forwarding: nat: the client gets
// its answers from the VIP, and the backend sees the node's address and a node port
// (1024..32767), never the client's.
func TestNATBackendWithoutAgent(t *testing.T) {
	requireManifold(t)
	l := newLab(t, "lb1")
	client, lb, be := l.Host("client"), l.Host("lb1"), l.Host("be1")
	// A real NIC finishes the checksums it sends; a veth leaves them to an offload that
	// never happens, which the node's in-place rewrite would carry on (see lab.go).
	if err := be.Exec(hostprog.Ethtool, "-K", HostLink, "tx", "off"); err != nil {
		t.Fatal(err)
	}
	serveRemoteAddr(t, be, natBackendPort)

	cfg := NodeConfig{Name: lb.Role, Address: lb.Addr4, Address6: lb.Addr6}
	for _, f := range families {
		cfg.Services = append(cfg.Services, Service{Name: "nat-" + strings.ToLower(f.name), VIP: f.vip, Port: 80,
			Forwarding: "nat", BackendPort: natBackendPort, Backends: []netip.Addr{f.addr(be)}})
	}
	if _, err := l.StartNode(manifoldBin, lb, cfg); err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if err := l.RouteVIP(f.vip, lb); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			ports := map[uint16]bool{}
			const requests = 50
			for i := range requests {
				body, err := HTTPGet(client.NS, f.url(), 0)
				if err != nil {
					t.Fatalf("request %d to %s: %v", i, f.url(), err)
				}
				seen, err := netip.ParseAddrPort(strings.TrimSpace(body))
				if err != nil {
					t.Fatalf("request %d: the backend answered %q", i, body)
				}
				if seen.Addr() != f.addr(lb) {
					t.Fatalf("request %d: the backend saw %s, want the node's address %s (the client is %s)", i, seen, f.addr(lb), f.addr(client))
				}
				if p := seen.Port(); p < 1024 || p > 32767 {
					t.Errorf("request %d: node port %d, want one of 1024..32767", i, p)
				}
				ports[seen.Port()] = true
			}
			// each connection is a flow of its own, with its own node port
			if len(ports) != requests {
				t.Errorf("%d requests came from %d node ports, want one each", requests, len(ports))
			}
		})
	}
	// a kept-alive connection stays on its port through many exchanges
	c, err := DialKeepAlive(client.NS, families[0].url(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := ""
	for i := range 20 {
		body, err := c.Do()
		if err != nil {
			t.Fatalf("exchange %d on one connection: %v", i, err)
		}
		if first == "" {
			first = body
		} else if body != first {
			t.Fatalf("exchange %d seen from %q, the first from %q", i, body, first)
		}
	}
}

// serveBytes runs a plain HTTP server in h's namespace answering every request with n
// bytes. It stops when the test ends.
func serveBytes(t *testing.T, h *Host, port uint16, n int) {
	t.Helper()
	var ln net.Listener
	err := InNamespace(h.NS, func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", n)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	}), ReadHeaderTimeout: RequestTimeout}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("HTTP server on %s: %v", h.Role, err)
		}
	})
}

// Path MTU discovery through a NAT node: the router's link to the client takes 1300
// bytes, the client (MTU 1500) asks for full-sized segments, and a NAT backend's
// 1500-byte replies reach the router translated, which answers the VIP with
// "fragmentation needed" / "packet too big". The node sends that to the backend as an
// error about its own packet; the backend's kernel lowers the route's MTU and resends,
// and a 200 KB answer arrives whole. Without the translation the message reached the
// node's kernel, which has no socket for it, and the transfer stalled.
func TestNATPathMTUDiscovery(t *testing.T) {
	requireManifold(t)
	l := newLab(t, "lb1")
	client, lb, be := l.Host("client"), l.Host("lb1"), l.Host("be1")
	if err := be.Exec(hostprog.Ethtool, "-K", HostLink, "tx", "off"); err != nil {
		t.Fatal(err)
	}
	const size = 200 << 10
	serveBytes(t, be, natBackendPort, size)
	cfg := NodeConfig{Name: lb.Role, Address: lb.Addr4, Address6: lb.Addr6}
	for _, f := range families {
		cfg.Services = append(cfg.Services, Service{Name: "nat-" + strings.ToLower(f.name), VIP: f.vip, Port: 80,
			Forwarding: "nat", BackendPort: natBackendPort, Backends: []netip.Addr{f.addr(be)}})
	}
	if _, err := l.StartNode(manifoldBin, lb, cfg); err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if err := l.RouteVIP(f.vip, lb); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Router.Exec(hostprog.IP, "link", "set", "dev", client.RouterLink, "mtu", "1300"); err != nil {
		t.Fatal(err)
	}
	before := eventCount(t, lb, "icmp_to_backend")
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			body, err := HTTPGet(client.NS, f.url(), 0)
			if err != nil {
				t.Fatalf("GET %s through a 1300-byte link: %v", f.url(), err)
			}
			if len(body) != size {
				t.Fatalf("GET %s: %d bytes, want %d", f.url(), len(body), size)
			}
		})
	}
	if n := eventCount(t, lb, "icmp_to_backend") - before; n == 0 {
		t.Error("no ICMP message went to the backend: the transfers never met the 1300-byte link")
	}
}
