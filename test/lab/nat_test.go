package lab

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// natBackendPort is where the agentless backend listens; the service is on port 80, so
// the node rewrites the port too.
const natBackendPort = 8080

// natUDPPort is the NAT lab's UDP service's port on the VIP.
const natUDPPort = 5353

// serveRemoteAddr runs a plain HTTP server (net/http, nothing of manifold's) in h's
// namespace on every address, answering each request with the address and port it
// came from, as the server sees them. It stops when the test ends.
func serveRemoteAddr(t *testing.T, h *Host, port uint16) {
	t.Helper()
	serveHTTP(t, h, fmt.Sprintf(":%d", port), func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, r.RemoteAddr)
	})
}

// newNATLab builds a lab with a client, one node (lb1) and backends, starts the server
// serve puts on be1, and runs the node with two services per family whose backend is
// be1, forwarding: nat to natBackendPort: TCP on port 80 and UDP on natUDPPort; the
// router sends the VIPs to the node.
func newNATLab(t *testing.T, serve func(be *Host)) (l *Lab, client, lb, be *Host) {
	t.Helper()
	l = newLab(t, "lb1")
	client, lb, be = l.Host("client"), l.Host("lb1"), l.Host("be1")
	// A real NIC finishes the checksums it sends; a veth leaves them to an offload that
	// never happens, which the node's in-place rewrite would carry on (see lab.go).
	if err := be.Exec(hostprog.Ethtool, "-K", HostLink, "tx", "off"); err != nil {
		t.Fatal(err)
	}
	serve(be)
	cfg := NodeConfig{Name: lb.Role, Address: lb.Addr4, Address6: lb.Addr6}
	for _, f := range families {
		cfg.Services = append(cfg.Services, Service{Name: "nat-" + strings.ToLower(f.name), VIP: f.vip, Port: 80,
			Forwarding: "nat", BackendPort: natBackendPort, Backends: []netip.Addr{f.addr(be)}},
			Service{Name: "nat-udp-" + strings.ToLower(f.name), VIP: f.vip, Port: natUDPPort, Protocol: "udp",
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
	return l, client, lb, be
}

// A backend with no agent (no decapsulation, no VIP on lo), only a plain HTTP server
// on another port, serves the VIP through a node with forwarding: nat: the client gets
// its answers from the VIP, and the backend sees the node's address and a node port
// (1024..32767), never the client's.
func TestNATBackendWithoutAgent(t *testing.T) {
	requireManifold(t)
	_, client, lb, _ := newNATLab(t, func(be *Host) { serveRemoteAddr(t, be, natBackendPort) })
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

// serveBytes runs a plain HTTP server in h's namespace answering a GET with n bytes and
// a POST with the number of bytes it read. It stops when the test ends.
func serveBytes(t *testing.T, h *Host, port uint16, n int) {
	t.Helper()
	body := strings.Repeat("x", n)
	serveHTTP(t, h, fmt.Sprintf(":%d", port), func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			got, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, got)
			return
		}
		fmt.Fprint(w, body)
	})
}

// Path MTU discovery through a NAT node, both ways, over IPv4 and IPv6. Downloads: the
// router's link to the client takes 1300 bytes; the client (MTU 1500) asks for
// full-sized segments, and the backend's 1500-byte replies reach the router translated,
// which answers the VIP with "fragmentation needed" / "packet too big"; the node sends
// that to the backend as an error about its own packet. Uploads: the router's link to
// the backend takes 1300 bytes; the client's translated segments are refused there, the
// router answers the node's address, and the node sends that to the client as an error
// about its packet to the VIP. Either way the sender lowers its path MTU and resends,
// and 200 KB arrive whole. Without the translations both messages ended in the node's
// kernel, which has no socket for them, and every transfer stalled.
func TestNATPathMTUDiscovery(t *testing.T) {
	requireManifold(t)
	const size = 200 << 10
	l, client, lb, be := newNATLab(t, func(be *Host) { serveBytes(t, be, natBackendPort, size) })
	// A veth drops frames longer than its MTU on the way in, so only the router's end
	// of a link is narrowed, and only the link the big packets leave the router by.
	narrow := func(h *Host, mtu int) {
		t.Helper()
		if err := l.Router.Exec(hostprog.IP, "link", "set", "dev", h.RouterLink, "mtu", strconv.Itoa(mtu)); err != nil {
			t.Fatal(err)
		}
	}

	narrow(client, 1300)
	toBackend := eventCount(t, lb, "icmp_to_backend")
	for _, f := range families {
		t.Run("download/"+f.name, func(t *testing.T) {
			body, err := HTTPGet(client.NS, f.url(), 0)
			if err != nil {
				t.Fatalf("GET %s through a 1300-byte link to the client: %v", f.url(), err)
			}
			if len(body) != size {
				t.Fatalf("GET %s: %d bytes, want %d", f.url(), len(body), size)
			}
		})
	}
	if n := eventCount(t, lb, "icmp_to_backend") - toBackend; n == 0 {
		t.Error("no ICMP message went to the backend: the downloads never met the 1300-byte link")
	}

	narrow(client, 1500)
	narrow(be, 1300)
	// the downloads taught the backend a 1300-byte path to the node, which it would
	// advertise to the uploading clients as its MSS: forget it
	for _, args := range [][]string{{"route", "flush", "cache"}, {"-6", "route", "flush", "cache"}} {
		if err := be.Exec(hostprog.IP, args...); err != nil {
			t.Fatal(err)
		}
	}
	toClient := eventCount(t, lb, "nat_icmp_to_client")
	for _, f := range families {
		t.Run("upload/"+f.name, func(t *testing.T) {
			resp, err := HTTPClient(client.NS, RequestTimeout).Post(f.url(), "application/octet-stream", strings.NewReader(strings.Repeat("y", size)))
			if err != nil {
				t.Fatalf("POST %d bytes to %s through a 1300-byte link to the backend: %v", size, f.url(), err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(size) {
				t.Fatalf("POST to %s: the backend read %q bytes (%v), want %d", f.url(), got, err, size)
			}
		})
	}
	if n := eventCount(t, lb, "nat_icmp_to_client") - toClient; n == 0 {
		t.Error("no ICMP message went to the client: the uploads never met the 1300-byte link")
	}
}

// A NAT flow's client that has gone (its UDP socket closed) answers the backend's next
// datagram with "port unreachable" to the VIP. The node sends the message on to the
// backend translated, and the backend's own kernel matches it to the socket that sent
// the datagram: with IP_RECVERR that socket's next read fails with "connection
// refused". The message used to end in the node's kernel, which has no socket for it,
// and the backend went on sending to a client long gone.
func TestNATClientGoneReachesTheBackend(t *testing.T) {
	requireManifold(t)
	_, client, _, be := newNATLab(t, func(*Host) {})
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			srv := listenUDPRecvErr(t, be, netip.AddrPortFrom(f.addr(be), natBackendPort))
			var cl *net.UDPConn
			err := InNamespace(client.NS, func() (err error) {
				cl, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(f.vip, natUDPPort)))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			buf := make([]byte, 64)
			deadline := time.Now().Add(RequestTimeout)
			if _, err := cl.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			_ = srv.SetReadDeadline(deadline)
			_, peer, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("the backend got no datagram through the node: %v", err)
			}
			if _, err := srv.WriteToUDPAddrPort([]byte("answer"), peer); err != nil {
				t.Fatal(err)
			}
			_ = cl.SetReadDeadline(deadline)
			if n, err := cl.Read(buf); err != nil || string(buf[:n]) != "answer" {
				t.Fatalf("the client's answer through the node: %q, %v", buf[:n], err)
			}

			cl.Close() // the client goes: its kernel answers the next datagram "port unreachable"
			if _, err := srv.WriteToUDPAddrPort([]byte("anyone there?"), peer); err != nil {
				t.Fatal(err)
			}
			_ = srv.SetReadDeadline(time.Now().Add(RequestTimeout))
			if _, _, err := srv.ReadFromUDPAddrPort(buf); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("the backend's socket after its client went: %v, want connection refused (the client's port unreachable, translated by the node)", err)
			}
		})
	}
}

// listenUDPRecvErr opens a UDP socket on addr in h's namespace with IP_RECVERR (or
// IPV6_RECVERR), so that an ICMP error about a datagram it sent fails its next read,
// as it would a connected socket's. It is closed when the test ends.
func listenUDPRecvErr(t *testing.T, h *Host, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := InNamespace(h.NS, func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	level, opt := unix.IPPROTO_IP, unix.IP_RECVERR
	if addr.Addr().Is6() {
		level, opt = unix.IPPROTO_IPV6, unix.IPV6_RECVERR
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, 1) }); err != nil || serr != nil {
		t.Fatalf("IP_RECVERR: %v %v", err, serr)
	}
	return c
}
