package health

import (
	"context"
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

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The checks run against real TCP and HTTP servers on loopback; their intervals run on
// a fake clock that the tests advance, so a test waits for the checks it causes (an
// event, an accepted connection, a prober waiting again), never for time to pass.

const (
	interval = time.Second // on the fake clock
	// wait bounds every wait for a behaviour; it is generous so the tests are not flaky
	// on a loaded machine with the race detector, and only spent when a test fails.
	wait = 10 * time.Second
)

var (
	loopback = netip.MustParseAddr("127.0.0.1")
	epoch    = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) // the fake clock's start
)

// harness is a Checker on a fake clock, used by one test goroutine.
type harness struct {
	*Checker
	clock   *clock.Fake
	backlog []Event // events nextEvent read while it looked for another target's
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	fc := clock.NewFake(epoch)
	h := &harness{Checker: NewWithClock(nil, fc), clock: fc}
	t.Cleanup(h.Close)
	return h
}

// probers counts the targets that run checks, with the longest interval among them.
func (h *harness) probers() (n int, longest time.Duration) {
	for _, s := range h.Status() {
		if probed(s.Target.Check.Kind) {
			n++
			iv, _ := timing(s.Target.Check)
			longest = max(longest, iv)
		}
	}
	return n, longest
}

// blockUntil returns once n probers wait for their next check: every check started
// before has been recorded and its event queued.
func (h *harness) blockUntil(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := h.clock.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("%d probers waiting for their next check after %v, want %d", h.clock.Waiters(), wait, n)
	}
}

// tick runs one more check of every prober: it waits until all of them wait, moves the
// clock past their next check (a wait is at most an interval plus 10% of jitter; one
// Advance fires each prober's timer once, as a prober arms the next one only after it
// has run the check), and returns when all of them have run it and wait again.
func (h *harness) tick(t *testing.T) {
	t.Helper()
	n, longest := h.probers()
	h.blockUntil(t, n)
	h.clock.Advance(longest + longest/10)
	h.blockUntil(t, n)
}

func (h *harness) ticks(t *testing.T, k int) {
	t.Helper()
	for range k {
		h.tick(t)
	}
}

// nextEvent returns the next event of target tg; events of other targets are kept
// for later calls.
func (h *harness) nextEvent(t *testing.T, tg Target) Event {
	t.Helper()
	if i := slices.IndexFunc(h.backlog, func(ev Event) bool { return ev.Target == tg }); i >= 0 {
		ev := h.backlog[i]
		h.backlog = slices.Delete(h.backlog, i, i+1)
		return ev
	}
	timeout := time.After(wait)
	for {
		select {
		case ev, ok := <-h.Events():
			if !ok {
				t.Fatalf("events channel closed while waiting for an event of %v", tg)
			}
			if ev.Target == tg {
				return ev
			}
			h.backlog = append(h.backlog, ev)
		case <-timeout:
			t.Fatalf("timed out after %v waiting for an event of %v", wait, tg)
		}
	}
}

func (h *harness) expectEvent(t *testing.T, tg Target, up bool, reason string) Event {
	t.Helper()
	ev := h.nextEvent(t, tg)
	if ev.Up != up || !strings.Contains(ev.Reason, reason) {
		t.Fatalf("event of %v = {Up: %v, Reason: %q}, want {Up: %v, Reason containing %q}", tg, ev.Up, ev.Reason, up, reason)
	}
	return ev
}

// sentinel is a target of kind none: Set queues its event at once, behind every event
// queued before, and the dispatcher delivers events in the order they were queued.
var sentinel = Target{Addr: netip.MustParseAddr("192.0.2.1"), Check: config.Health{Kind: config.HealthNone}}

// eventsBeforeSentinel returns the events queued so far and not read yet: it adds the
// sentinel to targets, reads events up to the sentinel's, and removes it again.
func (h *harness) eventsBeforeSentinel(t *testing.T, targets ...Target) []Event {
	t.Helper()
	h.Set(append(slices.Clone(targets), sentinel))
	h.nextEvent(t, sentinel)
	evs := h.backlog
	h.backlog = nil
	h.Set(targets)
	return evs
}

func (h *harness) status(t *testing.T, tg Target) Status {
	t.Helper()
	for _, s := range h.Status() {
		if s.Target == tg {
			return s
		}
	}
	t.Fatalf("no status for %v", tg)
	return Status{}
}

// tcpServer is a real TCP listener that accepts and immediately closes connections,
// reporting each one.
type tcpServer struct {
	ln      net.Listener
	conns   chan string   // the remote address of every accepted connection
	closing chan struct{} // closed by close: the accept loop stops reporting
	done    chan struct{}
}

func listenTCP(t *testing.T, addr string) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &tcpServer{ln: ln, conns: make(chan string, 1024), closing: make(chan struct{}), done: make(chan struct{})}
	go func() { // owned by the test: ends when s.close closes the listener
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			select { // a runaway prober may fill conns: the test fails, and must not hang
			case s.conns <- c.RemoteAddr().String():
			case <-s.closing:
				return
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *tcpServer) close() {
	select {
	case <-s.closing: // closed already (a test closes it, then its cleanup does)
	default:
		close(s.closing)
	}
	s.ln.Close()
	<-s.done
}

func (s *tcpServer) port() uint16 { return uint16(s.ln.Addr().(*net.TCPAddr).Port) }

// expectAccepts waits for n more connections, then checks that there was no other:
// it connects itself and waits for its own connection, as the accept queue is first
// in, first out, and a prober's connect returns once the connection is in the queue.
func (s *tcpServer) expectAccepts(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(wait)
	for i := range n {
		select {
		case <-s.conns:
		case <-timeout:
			t.Fatalf("server accepted %d connections within %v, want %d", i, wait, n)
		}
	}
	own, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	for extra := 0; ; extra++ {
		select {
		case addr := <-s.conns:
			if addr == own.LocalAddr().String() {
				if extra > 0 {
					t.Errorf("server accepted %d connections, want %d", n+extra, n)
				}
				return
			}
		case <-timeout:
			t.Fatalf("server did not accept the test's own connection within %v", wait)
		}
	}
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
	h := newHarness(t)
	tg := tcpTarget(loopback, srv.port(), 3, 2)
	h.Set([]Target{tg})
	h.ticks(t, 1)
	if h.Up(tg) || h.Known(tg) {
		t.Fatalf("after 2 of 3 successes: Up = %v, Known = %v; want neither", h.Up(tg), h.Known(tg))
	}
	h.tick(t)
	h.expectEvent(t, tg, true, "3 consecutive successes")
	if !h.Up(tg) || !h.Known(tg) {
		t.Errorf("after the up event: Up = %v, Known = %v; want both", h.Up(tg), h.Known(tg))
	}
	s := h.status(t, tg)
	if !s.Up || !s.LastOK || s.LastError != "" || s.Checks != 3 || s.Failures != 0 || s.ConsecutiveSuccesses != 3 || !s.LastCheck.Equal(h.clock.Now()) {
		t.Errorf("status = %+v, want up after 3 successful checks, the last one now (%v)", s, h.clock.Now())
	}
	srv.expectAccepts(t, 3)
}

// TestTCPDownAfterFallAndBackUp also checks that the state changes at the fall-th
// failure and the rise-th success, not one check earlier or later.
func TestTCPDownAfterFallAndBackUp(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	port := srv.port()
	h := newHarness(t)
	const fall = 3
	tg := tcpTarget(loopback, port, 2, fall)
	h.Set([]Target{tg})
	h.tick(t)
	h.expectEvent(t, tg, true, "2 consecutive successes")

	srv.close()
	for failed := 1; failed < fall; failed++ {
		h.tick(t)
		if s := h.status(t, tg); !s.Up || s.ConsecutiveFailures != failed {
			t.Fatalf("status after %d failures = %+v, want still up", failed, s)
		}
	}
	h.tick(t)
	addr := "127.0.0.1:" + strconv.Itoa(int(port))
	h.expectEvent(t, tg, false, "3 consecutive failures: dial tcp "+addr+": ")
	if h.Up(tg) {
		t.Error("Up = true after the down event")
	}
	s := h.status(t, tg)
	if s.Up || s.LastOK || s.LastError == "" || s.ConsecutiveFailures != fall || s.Failures != fall || s.Checks != 2+fall {
		t.Errorf("status = %+v, want down after 2 successes and %d failures", s, fall)
	}

	srv2 := listenTCP(t, addr) // restart on the same port
	h.tick(t)
	if h.Up(tg) {
		t.Fatal("Up = true after 1 of 2 successes")
	}
	h.tick(t)
	h.expectEvent(t, tg, true, "2 consecutive successes")
	if !h.Up(tg) {
		t.Error("Up = false after coming back")
	}
	srv2.expectAccepts(t, 2)
}

// TestSchedule checks when checks run: the first at once, the second an interval plus
// a jitter of at most 10% later, then every interval from the start of the previous
// check, and at once after a check that outlasted the interval. It also checks that
// latencies and LastCheck are read on the Checker's clock.
func TestSchedule(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // answer only when the test says so: a check takes what the test advances meanwhile
		case arrived <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t)
	tg := httpTarget(t, srv, "/", 1, 1)
	// check runs one check that takes d on the fake clock, and returns when it began.
	check := func(d time.Duration) time.Time {
		t.Helper()
		select {
		case <-arrived:
		case <-time.After(wait):
			t.Fatalf("no check within %v", wait)
		}
		began := h.clock.Now()
		h.clock.Advance(d)
		select {
		case release <- struct{}{}:
		case <-time.After(wait):
			t.Fatalf("the check did not wait for its answer within %v", wait)
		}
		return began
	}
	// next advances the clock to the next check, and returns how long that was after
	// the start of the previous one.
	next := func(prev time.Time) time.Duration {
		t.Helper()
		h.blockUntil(t, 1)
		at, _ := h.clock.NextDeadline()
		h.clock.Advance(at.Sub(h.clock.Now()))
		return at.Sub(prev)
	}

	h.Set([]Target{tg})
	first := check(300 * time.Millisecond)
	if !first.Equal(epoch) {
		t.Errorf("first check at %v, want at once (%v)", first, epoch)
	}
	if ev := h.expectEvent(t, tg, true, "1 consecutive success"); ev.Latency != 300*time.Millisecond {
		t.Errorf("event latency = %v, want the 300ms the check took", ev.Latency)
	}
	if s := h.status(t, tg); !s.LastCheck.Equal(epoch) || s.LastLatency != 300*time.Millisecond {
		t.Errorf("status = %+v, want the last check at %v taking 300ms", s, epoch)
	}

	if d := next(first); d < interval || d > interval+interval/10 {
		t.Errorf("second check %v after the first, want an interval (%v) plus at most 10%% of jitter", d, interval)
	}
	second := check(interval + 500*time.Millisecond) // outlasts the interval
	third := check(0)                                // so the next one runs at once
	if d := third.Sub(second); d != interval+500*time.Millisecond {
		t.Errorf("third check %v after the second, want at once when the second ended (%v)", d, interval+500*time.Millisecond)
	}
	if d := next(third); d != interval {
		t.Errorf("fourth check %v after the third, want an interval (%v)", d, interval)
	}
	check(0)
	h.blockUntil(t, 1) // the fourth check is recorded
	if s := h.status(t, tg); s.Checks != 4 || !s.Up {
		t.Errorf("status = %+v, want up after 4 checks", s)
	}
}

func TestInitialDownEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	port := freePort(t)
	tg := tcpTarget(loopback, port, 2, 3)
	h.Set([]Target{tg})
	// The first failure makes the initial (down) state known, whatever fall is.
	h.expectEvent(t, tg, false, "1 consecutive failure: dial tcp 127.0.0.1:"+strconv.Itoa(int(port))+": ")
	if h.Up(tg) || !h.Known(tg) {
		t.Errorf("a refused target: Up = %v, Known = %v; want known down", h.Up(tg), h.Known(tg))
	}
	// No more events while the state does not change.
	h.ticks(t, 4)
	if s := h.status(t, tg); s.Checks != 5 || s.ConsecutiveFailures != 5 {
		t.Errorf("status = %+v, want 5 failed checks", s)
	}
	if evs := h.eventsBeforeSentinel(t, tg); len(evs) != 0 {
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
			h := newHarness(t)
			tg := httpTarget(t, srv, "/health", 2, 2)
			h.Set([]Target{tg})
			if tc.up {
				h.tick(t)
			}
			h.expectEvent(t, tg, tc.up, tc.reason)
			if h.Up(tg) != tc.up {
				t.Errorf("Up = %v, want %v", h.Up(tg), tc.up)
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
	h := newHarness(t)
	tg := httpTarget(t, srv, "/", 2, 2)
	h.Set([]Target{tg})
	h.tick(t)
	h.expectEvent(t, tg, true, "2 consecutive successes")

	code.Store(http.StatusInternalServerError)
	h.ticks(t, 2)
	h.expectEvent(t, tg, false, "2 consecutive failures: HTTP status 500")

	// Keep-alives are disabled: every check opened its own connection (the server sees
	// a connection before it answers on it).
	if n, checks := newConns.Load(), h.status(t, tg).Checks; checks != 4 || n != 4 {
		t.Errorf("%d connections for %d checks, want 4 of each", n, checks)
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers: the check's own (wall-clock) timeout must end it
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t)
	tg := httpTarget(t, srv, "/", 1, 1)
	tg.Check.Timeout = 30 * time.Millisecond
	h.Set([]Target{tg})
	h.expectEvent(t, tg, false, "1 consecutive failure: ")
	if s := h.status(t, tg); s.LastOK || !strings.Contains(s.LastError, "deadline exceeded") {
		t.Errorf("status = %+v, want a timeout error", s)
	}
	if h.Up(tg) {
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
	h := newHarness(t)
	good := httpTarget(t, srv, "/healthz", 1, 1)
	bad := httpTarget(t, srv, "/other", 1, 1)
	h.Set([]Target{good, bad})
	h.expectEvent(t, good, true, "1 consecutive success")
	h.expectEvent(t, bad, false, "HTTP status 404")

	mu.Lock()
	defer mu.Unlock()
	if slices.Sort(paths); !slices.Equal(paths, []string{"/healthz", "/other"}) {
		t.Errorf("paths requested = %v, want /healthz and /other once each", paths)
	}
}

func TestNoneUpImmediately(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	h := newHarness(t)
	tg := Target{Addr: loopback, Check: config.Health{
		Kind: config.HealthNone, Port: srv.port(), Interval: interval, Timeout: interval, Rise: 2, Fall: 2,
	}}
	h.Set([]Target{tg})
	if !h.Up(tg) {
		t.Fatal("kind none target is not up right after Set")
	}
	h.expectEvent(t, tg, true, "no health check")
	if s := h.status(t, tg); !s.Up || s.Checks != 0 {
		t.Errorf("status = %+v, want up with no checks", s)
	}
	// A prober would connect at once, then wait for its next check on the clock.
	if n := h.clock.Waiters(); n != 0 {
		t.Errorf("%d timers armed for a kind none target", n)
	}
	srv.expectAccepts(t, 0)
}

// TestDedupAndIdempotentSet counts connections: one prober makes one per check, a
// second prober, or a prober restarted by a Set, would make more.
func TestDedupAndIdempotentSet(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	h := newHarness(t)
	tg := tcpTarget(loopback, srv.port(), 1, 1)
	same := tg // an identical target, as another service would ask for
	h.Set([]Target{tg, same})
	h.expectEvent(t, tg, true, "1 consecutive success")
	if got := len(h.Status()); got != 1 {
		t.Errorf("%d statuses for two identical targets, want 1", got)
	}
	h.Set([]Target{same}) // the same set again: nothing restarts
	h.Set([]Target{tg, same})
	h.blockUntil(t, 1)
	if n := h.clock.Waiters(); n != 1 {
		t.Errorf("%d probers wait for their next check, want 1", n)
	}
	h.ticks(t, 2)
	srv.expectAccepts(t, 3)
	if s := h.status(t, tg); s.Checks != 3 || !s.Up {
		t.Errorf("status = %+v, want up after exactly 3 checks (the immediate one and 2 ticks)", s)
	}
}

func TestSetRemovesAndKeepsState(t *testing.T) {
	t.Parallel()
	srvA := listenTCP(t, "127.0.0.1:0")
	srvB := listenTCP(t, "127.0.0.1:0")
	h := newHarness(t)
	a := tcpTarget(loopback, srvA.port(), 2, 2)
	b := tcpTarget(loopback, srvB.port(), 2, 2)
	h.Set([]Target{a, b})
	h.tick(t)
	h.expectEvent(t, a, true, "2 consecutive successes")
	h.expectEvent(t, b, true, "2 consecutive successes")

	// a stays: it keeps its state (no reset to down, no new event); b goes.
	h.Set([]Target{a})
	if !h.Up(a) {
		t.Fatal("a is down right after a Set that keeps it")
	}
	if h.Up(b) {
		t.Error("Up(b) = true after b was removed")
	}
	if st := h.Status(); len(st) != 1 || st[0].Target != a {
		t.Errorf("Status after removing b = %+v, want only a", st)
	}
	// When Set returns b's prober has returned: only a's waits for its next check.
	if n := h.clock.Waiters(); n != 1 {
		t.Errorf("%d probers wait for their next check after b was removed, want 1", n)
	}
	h.ticks(t, 3)
	srvB.expectAccepts(t, 2) // its two checks before it was removed, none after
	srvA.expectAccepts(t, 5)
	if s := h.status(t, a); s.Checks != 5 || s.ConsecutiveSuccesses != 5 {
		t.Errorf("status of a = %+v, want its 2 checks before and 3 after kept", s)
	}
	if evs := h.eventsBeforeSentinel(t, a); len(evs) != 0 {
		t.Fatalf("unexpected events %+v", evs)
	}

	// Re-adding b starts it afresh: down until it passes rise checks again.
	h.Set([]Target{a, b})
	if h.Up(b) {
		t.Error("a re-added target starts up")
	}
	h.tick(t)
	h.expectEvent(t, b, true, "2 consecutive successes")
}

// A target whose timing alone changed (a reload with a new interval) keeps the
// backend's state: a healthy backend must not drop out of the ring for a moment.
func TestTimingChangeKeepsState(t *testing.T) {
	t.Parallel()
	srv := listenTCP(t, "127.0.0.1:0")
	h := newHarness(t)
	old := tcpTarget(loopback, srv.port(), 2, 2)
	h.Set([]Target{old})
	h.tick(t)
	h.expectEvent(t, old, true, "2 consecutive successes")

	retimed := old
	retimed.Check.Interval *= 2
	retimed.Check.Rise = 5
	h.Set([]Target{retimed})
	if !h.Up(retimed) {
		t.Error("a target that only changed timing starts down")
	}
	// a different port is a different endpoint: it starts down
	moved := old
	moved.Check.Port = freePort(t)
	h.Set([]Target{moved})
	if h.Up(moved) {
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
	fc := clock.NewFake(epoch)
	h := &harness{Checker: newChecker(nil, fc, 1), clock: fc}
	t.Cleanup(h.Close)
	tg := httpTarget(t, srv, "/", 1, 1) // every check is a transition while flapping
	h.Set([]Target{tg})
	// Each tick returns only once the prober waits again, after it queued its event: a
	// prober blocked on the consumer would fail the tick.
	h.ticks(t, 9)
	if s := h.status(t, tg); s.Checks != 10 || s.Up {
		t.Fatalf("status after 10 flapping checks = %+v, want down (the 10th failed)", s)
	}
	flap.Store(0)
	h.tick(t)
	if !h.Up(tg) {
		t.Fatal("Up = false after a successful check")
	}

	got := h.eventsBeforeSentinel(t, tg)
	// At most: one in the channel, one held by the dispatcher, one pending.
	if len(got) == 0 || len(got) > 3 {
		t.Fatalf("got %d events of 11 transitions, want 1 to 3 (coalesced): %+v", len(got), got)
	}
	if last := got[len(got)-1]; !last.Up {
		t.Errorf("last event = %+v, want the latest state (up)", last)
	}
}

func TestIPv6(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		testenv.Missingf(t, "IPv6 loopback not available: %v", err)
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

	h := newHarness(t)
	tcp := tcpTarget(v6, srv.port(), 1, 1)
	web := httpTarget(t, hsrv, "/", 1, 1)
	if web.Addr != v6 {
		t.Fatalf("http server on %v, want ::1", web.Addr)
	}
	h.Set([]Target{tcp, web})
	h.expectEvent(t, tcp, true, "1 consecutive success")
	h.expectEvent(t, web, true, "1 consecutive success")

	port := strconv.Itoa(int(srv.port()))
	srv.close()
	h.tick(t)
	h.expectEvent(t, tcp, false, "dial tcp [::1]:"+port+": ")
}

func TestUnknownTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tg := tcpTarget(loopback, 1, 1, 1)
	if h.Up(tg) {
		t.Error("Up = true for a target never Set")
	}
	bad := tg
	bad.Check.Kind = "udp"
	h.Set([]Target{bad})
	h.expectEvent(t, bad, false, `unsupported health check kind "udp"`)
}

// TestCloseLeavesNoGoroutines runs on the wall clock (New), so that real timers are
// stopped too. It is not parallel: it counts the goroutines of the process.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0")
	hsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	inFlight := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a check in flight at Close
		case inFlight <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	refused := freePort(t)
	before := runtime.NumGoroutine()

	c := New(nil)
	h := &harness{Checker: c}
	up := tcpTarget(loopback, srv.port(), 1, 1)
	web := httpTarget(t, hsrv, "/", 1, 1)
	hanging := httpTarget(t, slow, "/", 1, 1)
	hanging.Check.Timeout = time.Minute
	down := tcpTarget(loopback, refused, 1, 1)
	none := Target{Addr: loopback, Check: config.Health{Kind: config.HealthNone}}
	c.Set([]Target{up, web, hanging, down, none})
	h.expectEvent(t, up, true, "1 consecutive success")
	h.expectEvent(t, web, true, "1 consecutive success")
	h.expectEvent(t, down, false, "1 consecutive failure")
	select {
	case <-inFlight:
	case <-time.After(wait):
		t.Fatalf("the hanging check did not reach its server within %v", wait)
	}
	c.Close() // with unread events
	c.Close() // idempotent
	if !closed(c.Events()) {
		t.Error("Events not closed by Close")
	}
	c.Set([]Target{up}) // no effect after Close
	if len(c.Status()) != 0 {
		t.Error("Status not empty after Close")
	}
	// Close waits for the goroutines of the Checker: none may be left waiting on a
	// check, a timer or a channel. One may still be on its way out — it closed its done
	// channel, which Close waited for, in its last deferred call and has yet to be
	// descheduled (runnable or running): that one is waited for, bounded by wait.
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if !strings.Contains(g, "internal/health.(*Checker)") {
				continue
			}
			if !strings.Contains(g, "[runnable]") && !strings.Contains(g, "[running]") {
				t.Fatalf("a goroutine of the Checker waits after Close:\n%s", g)
			}
			left = append(left, g)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine of the Checker runs %v after Close:\n%s", wait, strings.Join(left, "\n\n"))
		}
		runtime.Gosched()
	}
	slow.Close()
	hsrv.Close()

	// The connections' goroutines of net/http end on their own once their sockets are
	// closed, with no event to wait for: poll their number, bounded by wait.
	deadline = time.Now().Add(wait)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
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

// TestRecheck: after Recheck a target's next check runs at once (the fake clock does not
// move) and decides its state without Fall: a backend that went away while the process
// was stopped is down after one failure, not three intervals later; one that stayed up
// gets an event too, so that the node knows every state is fresh again.
func TestRecheck(t *testing.T) {
	t.Parallel()
	gone := listenTCP(t, "127.0.0.1:0")
	stays := listenTCP(t, "127.0.0.1:0")
	h := newHarness(t)
	tgGone, tgStays := tcpTarget(loopback, gone.port(), 2, 3), tcpTarget(loopback, stays.port(), 2, 3)
	h.Set([]Target{tgGone, tgStays})
	h.tick(t)
	h.expectEvent(t, tgGone, true, "2 consecutive successes")
	h.expectEvent(t, tgStays, true, "2 consecutive successes")

	gone.close()
	h.blockUntil(t, 2) // both wait for their next check, an interval away
	h.Recheck()
	h.expectEvent(t, tgGone, false, "1 consecutive failure")
	h.expectEvent(t, tgStays, true, "1 consecutive success")
	if h.Up(tgGone) || !h.Known(tgGone) || !h.Up(tgStays) || !h.Known(tgStays) {
		t.Fatalf("after the recheck: gone up %v known %v, stays up %v known %v", h.Up(tgGone), h.Known(tgGone), h.Up(tgStays), h.Known(tgStays))
	}
	// an ordinary check again: the target that stayed needs Fall failures to go down
	stays.close()
	h.tick(t)
	if !h.Up(tgStays) {
		t.Fatal("one failure after the recheck took the target down: Fall no longer applies")
	}
}
