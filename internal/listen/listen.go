// Package listen bounds what a listener takes from clients it does not know: how many
// connections it holds at once, in all and from one source address, and what an accept
// error does to it. Every listener of manifold (the node's API, the link API, the
// steering controller's metrics, the tunnel edge's ports) takes its connections through
// Limit, so a bound added here is one that every listener has.
package listen

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifoldlb/manifold/internal/ratelog"
)

// Limits are a listener's bounds; zero means unbounded.
type Limits struct {
	// MaxConns is the number of connections open at once; a connection past it is
	// closed as soon as it is accepted.
	MaxConns int
	// MaxConnsPerSource is the number open at once from one client address, so that one
	// client cannot take every slot of MaxConns (or of a tunnel's capacity).
	MaxConnsPerSource int
	// Log, when set, gets a line for each refused connection, at its bounded rate.
	Log *ratelog.Limiter
}

// Accept backs off this long after its first temporary error, doubling up to
// maxBackoff: the steps net/http's Server takes, for the same reason — running out of
// file descriptors (EMFILE) is over once some connections close, and a listener that
// returned the error instead would stop serving its port for good.
const (
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = time.Second
)

// A Listener is a net.Listener with Limits. Close closes the listener it wraps; the
// connections it accepted stay open until their own Close.
type Listener struct {
	net.Listener
	limits Limits

	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int

	closed    chan struct{}
	closeOnce sync.Once

	refusedTotal  atomic.Uint64
	refusedSource atomic.Uint64
	acceptErrors  atomic.Uint64
}

// Stats are a Listener's counters since it was made.
type Stats struct {
	Open          int    // connections open now
	RefusedTotal  uint64 // closed at accept: MaxConns were open
	RefusedSource uint64 // closed at accept: MaxConnsPerSource were open from the client's address
	AcceptErrors  uint64 // temporary accept errors waited out
}

// Limit wraps ln with limits.
func Limit(ln net.Listener, limits Limits) *Listener {
	return &Listener{Listener: ln, limits: limits, bySource: map[netip.Addr]int{}, closed: make(chan struct{})}
}

// Accept returns the next connection within the limits. Connections past a limit are
// closed and counted, never returned; a temporary error is waited out with backoff. It
// returns an error only when the listener is closed or fails for good.
func (l *Listener) Accept() (net.Conn, error) {
	backoff := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporary(err) {
				return nil, err
			}
			l.acceptErrors.Add(1)
			backoff = min(max(2*backoff, firstBackoff), maxBackoff)
			select {
			case <-time.After(backoff):
				continue
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
		backoff = 0
		conn, why := l.admit(c)
		if why == "" {
			return conn, nil
		}
		if l.limits.Log != nil {
			l.limits.Log.Warn("connection refused", "listener", l.Addr().String(), "remote", c.RemoteAddr().String(), "why", why)
		}
		c.Close()
	}
}

// Close closes the listener, ending an Accept that waits out an error too.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return Stats{Open: open, RefusedTotal: l.refusedTotal.Load(), RefusedSource: l.refusedSource.Load(),
		AcceptErrors: l.acceptErrors.Load()}
}

// admit returns c counted in the limits, or why it is refused.
func (l *Listener) admit(c net.Conn) (net.Conn, string) {
	src := sourceAddr(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits.MaxConns > 0 && l.open >= l.limits.MaxConns {
		l.refusedTotal.Add(1)
		return nil, fmt.Sprintf("%d connections open, the most this listener holds", l.limits.MaxConns)
	}
	if l.limits.MaxConnsPerSource > 0 && src.IsValid() && l.bySource[src] >= l.limits.MaxConnsPerSource {
		l.refusedSource.Add(1)
		return nil, fmt.Sprintf("%d connections open from this address, the most one source may hold", l.limits.MaxConnsPerSource)
	}
	l.open++
	if src.IsValid() {
		l.bySource[src]++
	}
	return &conn{Conn: c, l: l, src: src}, ""
}

func (l *Listener) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if src.IsValid() {
		if l.bySource[src]--; l.bySource[src] <= 0 {
			delete(l.bySource, src) // the map holds only sources with connections open
		}
	}
}

// sourceAddr is the client's address without its port (an IPv4-mapped IPv6 address as
// IPv4, so that one client is one key on a dual-stack socket); invalid for a listener
// that is not IP (a Unix socket), which then has no per-source limit.
func sourceAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// conn gives its slot back once, on its first Close.
type conn struct {
	net.Conn
	l    *Listener
	src  netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}

// CloseWrite, ReadFrom and WriteTo reach the connection's own, so that a proxy can
// half-close it and io.Copy keeps the kernel's splice on a TCP connection.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

func (c *conn) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.Conn.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, struct{ io.Reader }{c.Conn})
}

// NetConn is the accepted connection itself, as crypto/tls's Conn.NetConn.
func (c *conn) NetConn() net.Conn { return c.Conn }

// temporary reports whether an accept error passes by itself: out of descriptors or
// memory, a connection aborted before it was accepted, an interrupted call.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}
