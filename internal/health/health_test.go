package health

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
)

const (
	interval = 25 * time.Millisecond
	// wait bounds every wait for a behaviour; it is generous so the tests are not flaky
	// on a loaded machine with the race detector, and only spent when a test fails.
	wait = 10 * time.Second
)

var loopback = netip.MustParseAddr("127.0.0.1")

// tcpServer is a real TCP listener that accepts and immediately closes connections,
// counting them.
type tcpServer struct {
	ln       net.Listener
	accepted atomic.Int64
	done     chan struct{}
}

func listenTCP(t *testing.T, addr string) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &tcpServer{ln: ln, done: make(chan struct{})}
	go func() { // owned by the test: ends when s.close closes the listener
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *tcpServer) close() {
	s.ln.Close()
	<-s.done
}

func (s *tcpServer) port() uint16 { return uint16(s.ln.Addr().(*net.TCPAddr).Port) }

func newTestChecker(t *testing.T) *Checker {
	t.Helper()
	c := New(nil)
	t.Cleanup(c.Close)
	return c
}

func tcpTarget(addr netip.Addr, port uint16, rise, fall int) Target {
	return Target{Addr: addr, Check: config.Health{
		Kind: config.HealthTCP, Port: port, Interval: interval, Timeout: wait, Rise: rise, Fall: fall,
	}}
}

func httpTarget(t *testing.T, srv *httptest.Server, path string, rise, fall int) Target {
	t.Helper()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	return Target{Addr: ap.Addr(), Check: config.Health{
		Kind: config.HealthHTTP, Port: ap.Port(), Path: path, Interval: interval, Timeout: wait, Rise: rise, Fall: fall,
	}}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", wait, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// backlog keeps the events that nextEvent read while looking for another target's.
var backlog struct {
	sync.Mutex
	m map[*Checker][]Event
}

// nextEvent returns the next event of target tg; events of other targets are kept
// for later calls.
func nextEvent(t *testing.T, c *Checker, tg Target) Event {
	t.Helper()
	backlog.Lock()
	for i, ev := range backlog.m[c] {
		if ev.Target == tg {
			backlog.m[c] = slices.Delete(backlog.m[c], i, i+1)
			backlog.Unlock()
			return ev
		}
	}
	backlog.Unlock()
	timeout := time.After(wait)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatalf("events channel closed while waiting for an event of %v", tg)
			}
			if ev.Target == tg {
				return ev
			}
			backlog.Lock()
			if backlog.m == nil {
				backlog.m = make(map[*Checker][]Event)
			}
			backlog.m[c] = append(backlog.m[c], ev)
			backlog.Unlock()
		case <-timeout:
			t.Fatalf("timed out after %v waiting for an event of %v", wait, tg)
		}
	}
}

// pendingEvents returns, without waiting, the events not read by nextEvent yet.
func pendingEvents(c *Checker) []Event {
	backlog.Lock()
	evs := backlog.m[c]
	delete(backlog.m, c)
	backlog.Unlock()
	for {
		select {
		case ev := <-c.Events():
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

func expectEvent(t *testing.T, c *Checker, tg Target, up bool, reason string) Event {
	t.Helper()
	ev := nextEvent(t, c, tg)
	if ev.Up != up || !strings.Contains(ev.Reason, reason) {
		t.Fatalf("event of %v = {Up: %v, Reason: %q}, want {Up: %v, Reason containing %q}", tg, ev.Up, ev.Reason, up, reason)
	}
	return ev
}

func status(t *testing.T, c *Checker, tg Target) Status {
	t.Helper()
	for _, s := range c.Status() {
		if s.Target == tg {
			return s
		}
	}
	t.Fatalf("no status for %v", tg)
	return Status{}
}

// freePort returns a loopback port nobody listens on.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func TestTCPUpAfterRise(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	c := newTestChecker(t)
	tg := tcpTarget(loopback, srv.port(), 3, 2)
	c.Set([]Target{tg})

	ev := expectEvent(t, c, tg, true, "3 consecutive successes")
	if ev.Latency <= 0 {
		t.Errorf("event latency = %v, want > 0", ev.Latency)
	}
	if !c.Up(tg) {
		t.Error("Up = false after the up event")
	}
	s := status(t, c, tg)
	if !s.Up || !s.LastOK || s.LastError != "" || s.Checks < 3 || s.Failures != 0 || s.ConsecutiveSuccesses < 3 || s.LastCheck.IsZero() {
		t.Errorf("status = %+v, want up with ≥ 3 successful checks", s)
	}
	// The handshake completes in the kernel before the server's Accept returns.
	eventually(t, "the server to accept 3 connections", func() bool { return srv.accepted.Load() >= 3 })
}

func TestTCPDownAfterFallAndBackUp(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	port := srv.port()
	c := newTestChecker(t)
	tg := tcpTarget(loopback, port, 2, 3)
	c.Set([]Target{tg})
	expectEvent(t, c, tg, true, "2 consecutive successes")

	srv.close()
	addr := "127.0.0.1:" + strconv.Itoa(int(port))
	expectEvent(t, c, tg, false, "3 consecutive failures: dial tcp "+addr+": ")
	if c.Up(tg) {
		t.Error("Up = true after the down event")
	}
	s := status(t, c, tg)
	if s.Up || s.LastOK || s.LastError == "" || s.ConsecutiveFailures < 3 || s.Failures < 3 {
		t.Errorf("status = %+v, want down with ≥ 3 failures", s)
	}

	srv2 := listenTCP(t, addr) // restart on the same port
	expectEvent(t, c, tg, true, "2 consecutive successes")
	if !c.Up(tg) {
		t.Error("Up = false after coming back")
	}
	eventually(t, "the restarted server to accept 2 connections", func() bool { return srv2.accepted.Load() >= 2 })
}

// TestDownWithinFallIntervals checks that a down transition happens within about
// interval×fall + interval of the failure (bounded by a generous multiple of it).
func TestDownWithinFallIntervals(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	c := newTestChecker(t)
	const fall = 3
	tg := tcpTarget(loopback, srv.port(), 1, fall)
	tg.Check.Interval = 50 * time.Millisecond
	c.Set([]Target{tg})
	expectEvent(t, c, tg, true, "1 consecutive success")

	srv.close()
	expected := tg.Check.Interval*fall + tg.Check.Interval
	bound := 50 * expected
	select {
	case ev := <-c.Events():
		if ev.Up || !strings.Contains(ev.Reason, "3 consecutive failures") {
			t.Fatalf("event = %+v, want down after 3 failures", ev)
		}
	case <-time.After(bound):
		t.Fatalf("no down event within %v (expected after about %v)", bound, expected)
	}
}

func TestInitialDownEvent(t *testing.T) {
	t.Parallel()
	c := newTestChecker(t)
	port := freePort(t)
	tg := tcpTarget(loopback, port, 2, 3)
	c.Set([]Target{tg})
	// The first failure makes the initial (down) state known, whatever fall is.
	expectEvent(t, c, tg, false, "1 consecutive failure: dial tcp 127.0.0.1:"+strconv.Itoa(int(port))+": ")
	if c.Up(tg) {
		t.Error("Up = true for a refused target")
	}
	// No more events while the state does not change.
	eventually(t, "a few more checks", func() bool { return status(t, c, tg).Checks >= 5 })
	if evs := pendingEvents(c); len(evs) != 0 {
		t.Fatalf("unexpected events %+v while the target stays down", evs)
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		up     bool
		reason string
	}{
		{"200", http.StatusOK, true, "2 consecutive successes"},
		{"204", http.StatusNoContent, true, "2 consecutive successes"},
		{"302", http.StatusFound, true, "2 consecutive successes"},
		{"404", http.StatusNotFound, false, "1 consecutive failure: HTTP status 404 Not Found"},
		{"500", http.StatusInternalServerError, false, "1 consecutive failure: HTTP status 500 Internal Server Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var followed atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
				if tc.status == http.StatusFound {
					http.Redirect(w, r, "/elsewhere", http.StatusFound)
					return
				}
				w.WriteHeader(tc.status)
			})
			mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
				followed.Add(1)
				w.WriteHeader(http.StatusInternalServerError)
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			c := newTestChecker(t)
			tg := httpTarget(t, srv, "/health", 2, 2)
			c.Set([]Target{tg})
			expectEvent(t, c, tg, tc.up, tc.reason)
			if c.Up(tg) != tc.up {
				t.Errorf("Up = %v, want %v", c.Up(tg), tc.up)
			}
			if n := followed.Load(); n != 0 {
				t.Errorf("redirect followed %d times", n)
			}
		})
	}
}

func TestHTTPUpThenDown(t *testing.T) {
	t.Parallel()
	var code atomic.Int64
	code.Store(http.StatusOK)
	var newConns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(code.Load()))
		w.Write([]byte(strings.Repeat("x", 64<<10))) // more than the checker reads
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newTestChecker(t)
	tg := httpTarget(t, srv, "/", 2, 2)
	c.Set([]Target{tg})
	expectEvent(t, c, tg, true, "2 consecutive successes")

	code.Store(http.StatusInternalServerError)
	expectEvent(t, c, tg, false, "2 consecutive failures: HTTP status 500")

	// Keep-alives are disabled: every check opened its own connection.
	checks := status(t, c, tg).Checks
	if n := newConns.Load(); uint64(n) < checks {
		t.Errorf("%d connections for %d checks, want one per check", n, checks)
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	c := newTestChecker(t)
	tg := httpTarget(t, srv, "/", 1, 1)
	tg.Check.Timeout = 30 * time.Millisecond
	c.Set([]Target{tg})
	expectEvent(t, c, tg, false, "1 consecutive failure: ")
	if s := status(t, c, tg); s.LastOK || !strings.Contains(s.LastError, "deadline exceeded") {
		t.Errorf("status = %+v, want a timeout error", s)
	}
	if c.Up(tg) {
		t.Error("Up = true for a target that times out")
	}
}

func TestHTTPPath(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if r.URL.Path != "/healthz" || r.Method != http.MethodGet || r.UserAgent() != userAgent {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	c := newTestChecker(t)
	good := httpTarget(t, srv, "/healthz", 1, 1)
	bad := httpTarget(t, srv, "/other", 1, 1)
	c.Set([]Target{good, bad})
	expectEvent(t, c, good, true, "1 consecutive success")
	expectEvent(t, c, bad, false, "HTTP status 404")

	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, p := range paths {
		seen[p] = true
	}
	if !seen["/healthz"] || !seen["/other"] || len(seen) != 2 {
		t.Errorf("paths requested = %v, want only /healthz and /other", seen)
	}
}

func TestNoneUpImmediately(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	c := newTestChecker(t)
	tg := Target{Addr: loopback, Check: config.Health{
		Kind: config.HealthNone, Port: srv.port(), Interval: interval, Timeout: interval, Rise: 2, Fall: 2,
	}}
	c.Set([]Target{tg})
	if !c.Up(tg) {
		t.Fatal("kind none target is not up right after Set")
	}
	expectEvent(t, c, tg, true, "no health check")
	if s := status(t, c, tg); !s.Up || s.Checks != 0 {
		t.Errorf("status = %+v, want up with no checks", s)
	}
	time.Sleep(10 * interval) // give a wrongly started prober time to connect
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("kind none target made %d connections", n)
	}
}

// TestDedupAndIdempotentSet uses a long interval so that every prober makes exactly
// one (immediate) check: the number of connections is the number of probers started.
func TestDedupAndIdempotentSet(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	c := newTestChecker(t)
	tg := tcpTarget(loopback, srv.port(), 1, 1)
	tg.Check.Interval = time.Hour
	same := tg // an identical target, as another service would ask for
	c.Set([]Target{tg, same})
	expectEvent(t, c, tg, true, "1 consecutive success")
	if got := len(c.Status()); got != 1 {
		t.Errorf("%d statuses for two identical targets, want 1", got)
	}
	c.Set([]Target{same}) // the same set again: nothing restarts
	c.Set([]Target{tg, same})
	eventually(t, "the server to accept the connection", func() bool { return srv.accepted.Load() >= 1 })
	time.Sleep(10 * interval) // time for a wrongly started second prober to connect
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("server accepted %d connections, want 1 (one prober, one immediate check)", n)
	}
	if s := status(t, c, tg); s.Checks != 1 || !s.Up {
		t.Errorf("status = %+v, want up after exactly one check", s)
	}
}

func TestSetRemovesAndKeepsState(t *testing.T) {
	t.Parallel()
	srvA := listenTCP(t, "127.0.0.1:0")
	srvB := listenTCP(t, "127.0.0.1:0")
	c := newTestChecker(t)
	a := tcpTarget(loopback, srvA.port(), 2, 2)
	b := tcpTarget(loopback, srvB.port(), 2, 2)
	c.Set([]Target{a, b})
	expectEvent(t, c, a, true, "2 consecutive successes")
	eventually(t, "b up", func() bool { return c.Up(b) })

	// a stays: it keeps its state (no reset to down, no new event); b goes.
	checksBefore := status(t, c, a).Checks
	c.Set([]Target{a})
	if !c.Up(a) {
		t.Fatal("a is down right after a Set that keeps it")
	}
	if c.Up(b) {
		t.Error("Up(b) = true after b was removed")
	}
	if st := c.Status(); len(st) != 1 || st[0].Target != a {
		t.Errorf("Status after removing b = %+v, want only a", st)
	}
	// When Set returns b's prober has stopped; connections it made before may still
	// wait in the accept queue for a moment, then no new one arrives.
	time.Sleep(10 * interval)
	n1 := srvB.accepted.Load()
	time.Sleep(10 * interval)
	if n2 := srvB.accepted.Load(); n2 != n1 {
		t.Errorf("removed target still probed: %d more connections", n2-n1)
	}
	// a kept probing and kept its counters.
	eventually(t, "more checks of a", func() bool { return status(t, c, a).Checks > checksBefore+2 })
	for _, ev := range pendingEvents(c) {
		if ev.Target == a {
			t.Fatalf("unexpected event of a: %+v", ev)
		}
	}

	// Re-adding b starts it afresh: down until it passes rise checks again.
	c.Set([]Target{a, b})
	expectEvent(t, c, b, true, "2 consecutive successes")
}

// A target whose timing alone changed (a reload with a new interval) keeps the
// backend's state: a healthy backend must not drop out of the ring for a moment.
func TestTimingChangeKeepsState(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	c := newTestChecker(t)
	old := tcpTarget(loopback, srv.port(), 2, 2)
	c.Set([]Target{old})
	expectEvent(t, c, old, true, "2 consecutive successes")

	retimed := old
	retimed.Check.Interval *= 2
	retimed.Check.Rise = 5
	c.Set([]Target{retimed})
	if !c.Up(retimed) {
		t.Error("a target that only changed timing starts down")
	}
	// a different port is a different endpoint: it starts down
	moved := old
	moved.Check.Port = freePort(t)
	c.Set([]Target{moved})
	if c.Up(moved) {
		t.Error("a target on another port inherited the old state")
	}
}

// TestSlowConsumer checks that probers never block on a consumer that does not read
// events, and that the latest state is still delivered (coalesced) in the end.
func TestSlowConsumer(t *testing.T) {
	t.Parallel()
	var n, flap atomic.Int64
	flap.Store(1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if flap.Load() == 1 && n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	c := newChecker(nil, 1)
	t.Cleanup(c.Close)
	tg := httpTarget(t, srv, "/", 1, 1) // every check is a transition while flapping
	c.Set([]Target{tg})
	eventually(t, "10 checks without reading events", func() bool { return status(t, c, tg).Checks >= 10 })
	flap.Store(0)
	// A check in flight during the Store may still have flapped: wait for two more.
	after := status(t, c, tg).Checks + 2
	eventually(t, "stably up", func() bool { s := status(t, c, tg); return s.Checks >= after && s.Up })

	var got []Event
	for {
		select {
		case ev := <-c.Events():
			got = append(got, ev)
			continue
		case <-time.After(10 * interval):
		}
		break
	}
	// At most: one in the channel, one held by the dispatcher, one pending.
	if len(got) == 0 || len(got) > 3 {
		t.Fatalf("got %d events, want 1 to 3 (coalesced): %+v", len(got), got)
	}
	if last := got[len(got)-1]; !last.Up {
		t.Errorf("last event = %+v, want the latest state (up)", last)
	}
}

func TestIPv6(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("IPv6 loopback not available: %v", err)
	}
	ln.Close()
	v6 := netip.IPv6Loopback()

	srv := listenTCP(t, "[::1]:0")
	hsrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	hl, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	hsrv.Listener.Close()
	hsrv.Listener = hl
	hsrv.Start()
	t.Cleanup(hsrv.Close)

	c := newTestChecker(t)
	tcp := tcpTarget(v6, srv.port(), 1, 1)
	web := httpTarget(t, hsrv, "/", 1, 1)
	if web.Addr != v6 {
		t.Fatalf("http server on %v, want ::1", web.Addr)
	}
	c.Set([]Target{tcp, web})
	expectEvent(t, c, tcp, true, "1 consecutive success")
	expectEvent(t, c, web, true, "1 consecutive success")

	port := strconv.Itoa(int(srv.port()))
	srv.close()
	expectEvent(t, c, tcp, false, "dial tcp [::1]:"+port+": ")
}

func TestUnknownTarget(t *testing.T) {
	t.Parallel()
	c := newTestChecker(t)
	tg := tcpTarget(loopback, 1, 1, 1)
	if c.Up(tg) {
		t.Error("Up = true for a target never Set")
	}
	bad := tg
	bad.Check.Kind = "udp"
	c.Set([]Target{bad})
	expectEvent(t, c, bad, false, `unsupported health check kind "udp"`)
}

// TestCloseLeavesNoGoroutines is not parallel: it counts the goroutines of the process.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0")
	hsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a check in flight at Close
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	refused := freePort(t)
	before := runtime.NumGoroutine()

	c := New(nil)
	up := tcpTarget(loopback, srv.port(), 1, 1)
	web := httpTarget(t, hsrv, "/", 1, 1)
	hanging := httpTarget(t, slow, "/", 1, 1)
	hanging.Check.Timeout = time.Minute
	down := tcpTarget(loopback, refused, 1, 1)
	none := Target{Addr: loopback, Check: config.Health{Kind: config.HealthNone}}
	c.Set([]Target{up, web, hanging, down, none})
	eventually(t, "checks running", func() bool {
		return c.Up(up) && c.Up(web) && status(t, c, down).Checks > 0
	})
	c.Close() // with unread events
	c.Close() // idempotent
	if !closed(c.Events()) {
		t.Error("Events not closed by Close")
	}
	c.Set([]Target{up}) // no effect after Close
	if len(c.Status()) != 0 {
		t.Error("Status not empty after Close")
	}
	slow.Close()
	hsrv.Close()

	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closed reads ch until it is closed (true) or wait has passed (false).
func closed(ch <-chan Event) bool {
	timeout := time.After(wait)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}
