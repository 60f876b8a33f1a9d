package listen

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// bound is how long a test waits for what must happen; reaching it is the failure.
const bound = 30 * time.Second

func serveHTTP(t *testing.T, h http.Handler, o HTTPOptions) *HTTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := ServeHTTP(ln, h, o)
	t.Cleanup(s.Close)
	return s
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })

// get sends one GET on c and reads its answer, keeping c open.
func get(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(bound))
	if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// A client that never finishes its headers (slow loris) is cut.
func TestHTTPSlowLorisIsCut(t *testing.T) {
	s := serveHTTP(t, hello, HTTPOptions{Timeouts: Timeouts{ReadHeader: 100 * time.Millisecond}})
	c := dialFrom(t, "127.0.0.1", s.Addr())
	if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(bound))
	n, err := c.Read(make([]byte, 512))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server held a client with unfinished headers for %s", bound)
	}
	if n > 0 && err == nil {
		// net/http may answer 408 before it closes; what matters is that it closes
		if _, err = c.Read(make([]byte, 512)); err == nil {
			t.Fatal("the connection stayed open after the answer")
		}
	}
}

// Connections past MaxConns are refused, with a line in the log; a connection past
// MaxConnsPerSource too.
func TestHTTPConnectionLimits(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, nil))
	s := serveHTTP(t, hello, HTTPOptions{Limits: Limits{MaxConns: 3, MaxConnsPerSource: 2}, Log: log})
	a, b := dialFrom(t, "127.0.0.1", s.Addr()), dialFrom(t, "127.0.0.1", s.Addr())
	get(t, a)
	get(t, b)
	if !closedByServer(t, dialFrom(t, "127.0.0.1", s.Addr())) {
		t.Fatal("a third connection from one source was served")
	}
	get(t, dialFrom(t, "127.0.0.2", s.Addr()))
	if !closedByServer(t, dialFrom(t, "127.0.0.3", s.Addr())) {
		t.Fatal("a connection past MaxConns was served")
	}
	if st := s.Stats(); st.RefusedSource != 1 || st.RefusedTotal != 1 || st.Open != 3 {
		t.Fatalf("stats %+v, want 3 open, 1 refused by source, 1 in all", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logged.String(), "connection refused"); n != 2 {
		t.Fatalf("%d refusals logged, want 2:\n%s", n, logged.String())
	}
}

// A client that does not read its answer is cut by the write timeout: the handler's
// write fails instead of blocking for good.
func TestHTTPSlowReaderIsCut(t *testing.T) {
	cut := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				cut <- err
				return
			}
		}
	})
	s := serveHTTP(t, h, HTTPOptions{Timeouts: Timeouts{Write: 200 * time.Millisecond}})
	c := dialFrom(t, "127.0.0.1", s.Addr())
	if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cut:
	case <-time.After(bound):
		t.Fatalf("a client that reads nothing held its connection for %s", bound)
	}
}

// Close ends the server and its connections.
func TestHTTPClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := ServeHTTP(ln, hello, HTTPOptions{})
	c := dialFrom(t, "127.0.0.1", s.Addr())
	get(t, c)
	s.Close()
	if !closedByServer(t, c) {
		t.Fatal("an idle connection outlived Close")
	}
	if _, err := net.DialTimeout("tcp", s.Addr().String(), bound); err == nil {
		t.Fatal("the port still accepts after Close")
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
