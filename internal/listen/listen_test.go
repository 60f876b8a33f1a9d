package listen

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// serve accepts from l into a channel until it is closed.
func serve(t *testing.T, l net.Listener) <-chan net.Conn {
	t.Helper()
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { l.Close() })
	return accepted
}

func dialFrom(t *testing.T, src string, to net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c without a byte.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func newListener(t *testing.T, limits Limits) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return Limit(ln, limits)
}

func TestPerSourceLimit(t *testing.T) {
	l := newListener(t, Limits{MaxConnsPerSource: 2})
	accepted := serve(t, l)
	a1, a2 := dialFrom(t, "127.0.0.1", l.Addr()), dialFrom(t, "127.0.0.1", l.Addr())
	s1, s2 := <-accepted, <-accepted
	third := dialFrom(t, "127.0.0.1", l.Addr())
	if !closedByServer(t, third) {
		t.Fatal("a third connection from one source was not closed")
	}
	// Another source has slots of its own.
	other := dialFrom(t, "127.0.0.2", l.Addr())
	so := <-accepted
	if got := so.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.2" {
		t.Fatalf("accepted %s, want the connection from 127.0.0.2", got)
	}
	// A closed connection gives its slot back, once.
	s1.Close()
	s1.Close()
	dialFrom(t, "127.0.0.1", l.Addr())
	<-accepted
	fourth := dialFrom(t, "127.0.0.1", l.Addr())
	if !closedByServer(t, fourth) {
		t.Fatal("a closed connection gave back more than its slot")
	}
	if st := l.Stats(); st.Open != 3 || st.RefusedSource != 2 || st.RefusedTotal != 0 {
		t.Fatalf("stats %+v, want 3 open, 2 refused by source", st)
	}
	_, _, _, _ = a1, a2, s2, other
}

func TestTotalLimit(t *testing.T) {
	l := newListener(t, Limits{MaxConns: 1})
	accepted := serve(t, l)
	dialFrom(t, "127.0.0.1", l.Addr())
	s := <-accepted
	if !closedByServer(t, dialFrom(t, "127.0.0.2", l.Addr())) {
		t.Fatal("a connection past MaxConns was not closed")
	}
	s.Close()
	dialFrom(t, "127.0.0.3", l.Addr())
	if c := <-accepted; c == nil {
		t.Fatal("no connection accepted after the slot was given back")
	}
	if st := l.Stats(); st.RefusedTotal != 1 {
		t.Fatalf("stats %+v, want 1 refused in total", st)
	}
}

// failing returns err from its first n Accepts, then the listener's own.
type failing struct {
	net.Listener
	n   int
	err error
}

func (f *failing) Accept() (net.Conn, error) {
	if f.n > 0 {
		f.n--
		return nil, f.err
	}
	return f.Listener.Accept()
}

// An accept error that passes (EMFILE: out of descriptors) is waited out: the listener
// goes on accepting, where returning it would stop the port for good.
func TestTemporaryAcceptErrorIsWaitedOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limit(&failing{Listener: ln, n: 3, err: &net.OpError{Op: "accept", Err: syscall.EMFILE}}, Limits{})
	accepted := serve(t, l)
	dialFrom(t, "127.0.0.1", l.Addr())
	if c := <-accepted; c == nil {
		t.Fatal("the listener stopped at a temporary accept error")
	}
	if st := l.Stats(); st.AcceptErrors != 3 {
		t.Fatalf("stats %+v, want 3 accept errors", st)
	}
}

// A lasting error ends Accept, and Close ends one that waits out an error.
func TestAcceptEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limit(&failing{Listener: ln, n: 1, err: errors.New("broken")}, Limits{})
	if _, err := l.Accept(); err == nil || err.Error() != "broken" {
		t.Fatalf("Accept: %v, want the lasting error", err)
	}
	l = Limit(&failing{Listener: ln, n: 1 << 30, err: &net.OpError{Op: "accept", Err: syscall.EMFILE}}, Limits{})
	done := make(chan error)
	go func() { _, err := l.Accept(); done <- err }()
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

// The accepted connection keeps what a proxy uses of a TCP connection.
func TestConnKeepsHalfClose(t *testing.T) {
	l := newListener(t, Limits{MaxConns: 4})
	accepted := serve(t, l)
	c := dialFrom(t, "127.0.0.1", l.Addr())
	s := <-accepted
	if err := s.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if !closedByServer(t, c) {
		t.Fatal("CloseWrite did not reach the client as end of stream")
	}
	if _, ok := s.(interface{ NetConn() net.Conn }).NetConn().(*net.TCPConn); !ok {
		t.Fatal("NetConn is not the TCP connection")
	}
}
