package lab

// The client runs inside the test process: a socket belongs to the network namespace
// of the thread that created it, so a goroutine locks its thread, switches it into the
// namespace, creates the socket and switches back. The socket stays in the namespace
// and is then used from any goroutine like any other.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// RequestTimeout bounds one dial or one request/response exchange of the client.
const RequestTimeout = 3 * time.Second

// InNamespace runs fn on a thread switched into the network namespace ns (a name under
// /run/netns). fn must not start goroutines that expect to be in ns.
func InNamespace(ns string, fn func() error) error {
	target, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	defer target.Close()
	// A goroutine of its own: if switching back fails it exits still locked, and the
	// runtime throws its thread away instead of reusing it in the wrong namespace.
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter namespace %s: %w", ns, err)
			return
		}
		err = fn()
		if rerr := netns.Set(orig); rerr != nil {
			done <- errors.Join(err, fmt.Errorf("leave namespace %s: %w", ns, rerr))
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// DialTCP opens a TCP connection from inside namespace ns to addr ("ip:port"), from
// local port localPort (0 = any).
//
// Every socket it makes has SO_REUSEADDR. The kernel gives a connect()-chosen port to
// several sockets with distinct peers (an IPv4 and an IPv6 connection often share one),
// and re-dialling a flow's 5-tuple binds that port explicitly: without SO_REUSEADDR on
// both sockets, the bind fails with EADDRINUSE while the other family's connection is
// open, though the two 5-tuples differ.
func DialTCP(ns, addr string, localPort int) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: RequestTimeout, Control: reuseAddr}
	if localPort != 0 {
		d.LocalAddr = &net.TCPAddr{Port: localPort}
	}
	var c net.Conn
	err := InNamespace(ns, func() error {
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// reuseAddr sets SO_REUSEADDR on a socket before it binds (see DialTCP).
func reuseAddr(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}); err != nil {
		return err
	}
	return serr
}

// KeepAliveConn is a persistent HTTP/1.1 connection opened from inside a namespace:
// every Do sends GET on the same TCP connection, so the connection keeps its 5-tuple.
type KeepAliveConn struct {
	conn *net.TCPConn
	br   *bufio.Reader
	req  *http.Request
}

// DialKeepAlive connects to the host of rawURL (http only, port 80 unless given) from
// inside ns, from local port localPort (0 = any). Do requests rawURL's path.
func DialKeepAlive(ns, rawURL string, localPort int) (*KeepAliveConn, error) {
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme != "http" {
		return nil, fmt.Errorf("%s: only http URLs", rawURL)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	req.Header.Set("User-Agent", "manifold-lab")
	conn, err := DialTCP(ns, addr, localPort)
	if err != nil {
		return nil, fmt.Errorf("GET %s from %s: %w", rawURL, ns, err)
	}
	return &KeepAliveConn{conn: conn, br: bufio.NewReader(conn), req: req}, nil
}

// Do sends one GET on the connection and returns the body of a 200 response.
func (c *KeepAliveConn) Do() (string, error) { return c.DoWithin(RequestTimeout) }

// DoWithin is Do with its own bound on the exchange.
func (c *KeepAliveConn) DoWithin(timeout time.Duration) (string, error) {
	if err := c.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if err := c.req.Write(c.conn); err != nil {
		return "", fmt.Errorf("GET %s from %s: %w", c.req.URL, c.conn.LocalAddr(), err)
	}
	resp, err := http.ReadResponse(c.br, c.req)
	if err != nil {
		return "", fmt.Errorf("GET %s from %s: %w", c.req.URL, c.conn.LocalAddr(), err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", fmt.Errorf("GET %s from %s: body: %w", c.req.URL, c.conn.LocalAddr(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s from %s: %s", c.req.URL, c.conn.LocalAddr(), resp.Status)
	}
	return string(body), nil
}

// LocalPort is the client's port of the connection.
func (c *KeepAliveConn) LocalPort() int { return c.conn.LocalAddr().(*net.TCPAddr).Port }

// Close aborts the connection with a RST (SO_LINGER 0), leaving no TIME_WAIT behind,
// so that the same 5-tuple can be dialled again at once.
func (c *KeepAliveConn) Close() error {
	_ = c.conn.SetLinger(0)
	return c.conn.Close()
}

// HTTPGet sends one GET for rawURL on a new connection from inside ns, from local port
// localPort (0 = any; a fixed port fixes the flow's 5-tuple), and returns the body of a
// 200 response. The connection is then aborted (see KeepAliveConn.Close).
func HTTPGet(ns, rawURL string, localPort int) (string, error) {
	c, err := DialKeepAlive(ns, rawURL, localPort)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.Do()
}

// HTTPClient is an HTTP client whose connections are made inside namespace ns (a
// node's API listens on its loopback, an etcd member on its lab address). No
// keep-alives: a killed daemon leaves no stale connection behind.
func HTTPClient(ns string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			return DialTCP(ns, addr, 0)
		},
	}}
}

// URL returns http://addr:port/, with the brackets an IPv6 address needs.
func URL(addr netip.Addr, port uint16) string {
	return (&url.URL{Scheme: "http", Host: netip.AddrPortFrom(addr, port).String(), Path: "/"}).String()
}
