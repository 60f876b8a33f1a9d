package tunnel

// The bounds of the edge's listeners against clients that do not play along: out of
// descriptors, idle connections, many connections from one address, silent QUIC peers.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

const emfileChildEnv = "TUNNEL_TEST_EMFILE_CHILD"

// A service goes on accepting after its process ran out of file descriptors: the
// accept error (EMFILE) is waited out, not the end of the service. The descriptors
// run out for real, in a child process (this test in the test binary again) whose
// limit the test lowers, so that the other tests keep theirs.
func TestAServiceOutlivesRunningOutOfDescriptors(t *testing.T) {
	if os.Getenv(emfileChildEnv) == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := hostprog.CommandContext(ctx, hostprog.Built(os.Args[0]), "-test.run=^"+t.Name()+"$", "-test.v")
		cmd.Env = append(os.Environ(), emfileChildEnv+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("in the child process: %v\n%s", err, out)
		}
		return
	}
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	o := startOrigin(t, "a")
	startConnector(t, e.connectorFile(t, "a", tokenWeb, web(o)))
	waitFor(t, &e.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := e.tunnelOf("a"); return ok })
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &acceptErrors{Listener: raw, errs: make(chan error, 1)}

	// The client's connection waits in the backlog, nothing accepts it yet; then no
	// descriptor is left for the accept.
	client, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	release := exhaustDescriptors(t)
	ctx, cancel := context.WithCancel(context.Background())
	var serveErr error
	stopped := make(chan struct{})
	go func() { serveErr = e.Serve(ctx, "web", ln); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	select {
	case err := <-ln.errs:
		if !errors.Is(err, syscall.EMFILE) {
			release()
			t.Fatalf("accept failed with %v, want EMFILE", err)
		}
	case <-stopped:
		release()
		t.Fatalf("Serve returned before an accept failed: %v", serveErr)
	}
	release()

	answer := make(chan string, 1)
	go func() {
		_ = client.SetDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.WriteString(client, "GET / HTTP/1.0\r\n\r\n")
		body, err := io.ReadAll(bufio.NewReader(client))
		if err != nil {
			answer <- "error: " + err.Error()
			return
		}
		answer <- string(body)
	}()
	select {
	case <-stopped:
		t.Fatalf("the service stopped at EMFILE: %v", serveErr)
	case got := <-answer:
		if !strings.Contains(got, "hello from a") {
			t.Fatalf("the connection waiting through EMFILE got %q, want the origin's answer", got)
		}
	}
}

// acceptErrors passes on its listener's accepts, and the first error one returns.
type acceptErrors struct {
	net.Listener
	errs chan error
}

func (l *acceptErrors) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		select {
		case l.errs <- err:
		default:
		}
	}
	return c, err
}

// exhaustDescriptors lowers the process's limit of open files a little above the
// descriptors it has and opens files until none is left; release closes them.
func exhaustDescriptors(t *testing.T) (release func()) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	highest := 0
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			highest = max(highest, fd)
		}
	}
	lowered := limit
	lowered.Cur = uint64(highest + 64)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return func() {
		for _, f := range files {
			f.Close()
		}
		files = nil
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit)
	}
}

// Clients that connect and say nothing hold a connector's whole capacity only until
// the idle timeout: then they are closed, their streams given back, and a real
// request goes through.
func TestIdleClientsAreClosedAndTheirStreamsGivenBack(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		clk := clock.NewFake(time.Unix(0, 0))
		const timeout = 340 * time.Second
		const queue = 300 * time.Millisecond
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{IdleTimeout: timeout, Clock: clk, QueueTimeout: queue})
		o := startOrigin(t, "a")
		startConnector(t, e.connectorFile(t, "a", tokenWeb, "  - {name: web, to: "+o.addr+", capacity: 10}\n"))
		addr := e.serve(t, "web")
		waitFor(t, &e.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := e.tunnelOf("a"); return ok })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal("the service has no idle timeout's ticker")
		}

		var idle []net.Conn
		for range 10 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			idle = append(idle, c)
		}
		waitFor(t, &e.notifier, 5*time.Second, "the 10 idle clients took the connector's 10 streams", func() bool {
			s, _ := e.tunnelOf("a")
			return s.StreamsOpen == 10
		})
		client, url := newClient(), "http://"+addr+"/"
		// The request waits for a stream, QueueTimeout long on the edge's clock. The idle
		// clients' own queue timers (armed at 0, due at QueueTimeout, stopped once their
		// streams were acked) may still be armed: the request's is told apart by arming it
		// later, and theirs are fired before it is counted.
		clk.Advance(queue / 3)
		refused := make(chan error, 1)
		go func() { _, err := get(client, url); refused <- err }()
		clk.Advance(queue - queue/3)                          // fires whatever is left of the idle clients' timers
		if err := clk.BlockUntilContext(ctx, 2); err != nil { // the idle ticker, the request's queue timer
			t.Fatal("the request did not wait for a stream")
		}
		clk.Advance(queue) // past the request's deadline, armed at queue/3 or at queue
		if err := <-refused; err == nil {
			t.Fatal("a request went through a connector whose capacity idle clients hold")
		}

		clk.Advance(timeout + timeout/idleTicksPerTimeout*2)
		waitFor(t, &e.notifier, 10*time.Second, "the idle clients closed", func() bool { return e.Counters().ClientsIdle == 10 })
		for i, c := range idle {
			if !closedByEdge(t, c) {
				t.Fatalf("idle client %d is still connected", i)
			}
		}
		if from, err := get(client, url); err != nil || from != "a" {
			t.Fatalf("a request after the idle clients were closed: origin %q, error %v", from, err)
		}
	})
}

// closedByEdge reports whether the edge closed c (end of stream or reset) without
// sending a byte.
func closedByEdge(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
}

// A connection that moved a byte since the last tick is not idle; one that moved
// none for the timeout is closed, once.
func TestIdleCutterKeepsTheConnectionsThatMoveBytes(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var cut int
	c := newIdleCutter(clk, 10*time.Second, func() { cut++ }) // a tick of 1s, 10 ticks
	defer c.stop()
	quietEdge, quiet := net.Pipe()
	activeEdge, active := net.Pipe()
	defer quiet.Close()
	defer active.Close()
	q, a := c.add(quietEdge), c.add(activeEdge)

	c.now.Store(5)
	a.touch()
	c.now.Store(10) // quiet: idle for 9 ticks at least, 10 at most
	c.cut()
	if cut != 0 {
		t.Fatal("a connection idle for less than the timeout was closed")
	}
	c.now.Store(11)
	c.cut()
	if cut != 1 {
		t.Fatalf("%d connections closed at tick 11, want the quiet one", cut)
	}
	if _, err := quietEdge.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("the quiet connection reads %v, want it closed", err)
	}
	c.now.Store(15)
	c.cut()
	if cut != 1 {
		t.Fatal("the connection that moved a byte at tick 5 was closed at tick 15")
	}
	c.remove(a)
	c.remove(q)
	c.now.Store(100)
	c.cut()
	if cut != 1 {
		t.Fatal("a connection removed was closed")
	}
}

// One client address holds at most MaxConnsPerSource connections to a service;
// another address is served beside it.
func TestConnectionsPerSourceAreBounded(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{MaxConnsPerSource: 2})
		o := startOrigin(t, "a")
		startConnector(t, e.connectorFile(t, "a", tokenWeb, web(o)))
		addr := e.serve(t, "web")
		waitFor(t, &e.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := e.tunnelOf("a"); return ok })

		held := make(chan error, 2)
		for range 2 {
			go func() { _, err := get(clientFrom("127.0.0.1"), "http://"+addr+"/hold"); held <- err }()
		}
		for range 2 {
			<-o.held
		}
		if _, err := get(clientFrom("127.0.0.1"), "http://"+addr+"/"); err == nil {
			t.Error("a third connection from 127.0.0.1 was served, its address holding 2 already")
		}
		if from, err := get(clientFrom("127.0.0.2"), "http://"+addr+"/"); err != nil || from != "a" {
			t.Errorf("a connection from 127.0.0.2: origin %q, error %v; want it served", from, err)
		}
		if c := e.Counters(); c.ClientsRefusedPerSource != 1 {
			t.Errorf("edge counters %+v: want 1 client refused per source", c)
		}
		o.releaseHeld()
		for range 2 {
			if err := <-held; err != nil {
				t.Errorf("a request within the limit failed: %v", err)
			}
		}
	})
}

// clientFrom is newClient with connections from the address src.
func clientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}, Timeout: 20 * time.Second}
}

// QUIC peers that connect and never say hello hold at most MaxPendingHellos
// connections (and their goroutines) of the edge: the others are refused at their
// first packet and counted; a real connector attaches all the same. Refusals are
// logged at a bounded rate, with what the peer chose clipped.
func TestSilentQUICPeersAreBounded(t *testing.T) {
	const limit, peers = 8, 200
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{MaxPendingHellos: limit})
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer udp.Close()
	defer tr.Close()
	dial := func(tlsConf *tls.Config) (*quic.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return tr.Dial(ctx, e.Addr(), tlsConf, nil)
	}

	longALPN := strings.Repeat("evil", 60)
	for range peers / 2 {
		if conn, err := dial(&tls.Config{InsecureSkipVerify: true, NextProtos: []string{longALPN}}); err == nil {
			conn.CloseWithError(0, "")
			t.Fatal("a peer offering another ALPN was taken")
		}
	}
	logs := e.logs.String()
	if lines := strings.Count(logs, "tunnel refused"); lines > peers/4 {
		t.Errorf("%d refusal lines for %d peers, want the rate limit's few", lines, peers/2)
	}
	if strings.Contains(logs, longALPN) {
		t.Errorf("a refusal line holds the peer's ALPN of %d bytes whole", len(longALPN))
	}

	before := runtime.NumGoroutine()
	var silent []*quic.Conn
	for range peers {
		// a peer speaking the protocol, that never opens its control stream
		if conn, err := dial(&tls.Config{InsecureSkipVerify: true, NextProtos: alpns}); err == nil {
			silent = append(silent, conn)
		}
	}
	grown := runtime.NumGoroutine() - before
	t.Logf("%d silent peers connected, %d refused; goroutines %d → %d", len(silent), peers-len(silent), before, before+grown)
	if len(silent) > limit {
		t.Errorf("%d silent peers connected, want at most %d", len(silent), limit)
	}
	if got := e.Counters().Refused[RefusedHelloLimit]; got < peers-limit {
		t.Errorf("%d peers refused for the hello limit, want at least %d", got, peers-limit)
	}
	// a handful per connection on each side: far fewer than one per peer
	if grown > peers/2 {
		t.Errorf("%d silent peers grew the goroutines by %d, want fewer than %d", peers, grown, peers/2)
	}

	o := startOrigin(t, "a")
	startConnector(t, e.connectorFile(t, "a", tokenWeb, web(o)))
	waitFor(t, &e.notifier, 30*time.Second, "connector a attached beside the silent peers", func() bool { _, ok := e.tunnelOf("a"); return ok })
	for _, c := range silent {
		c.CloseWithError(0, "")
	}
}

// The edge's TCP listener for connectors has the bounds of its QUIC one: peers that
// connect and never finish their hello hold at most MaxPendingHellos connections, the
// others closed at accept and counted; a peer that finished TLS but says nothing is
// closed after the hello's deadline; a peer of another protocol is refused at TLS. A
// real connector attaches all the same.
func TestSilentTCPPeersAreBounded(t *testing.T) {
	const limit, peers = 8, 100
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{MaxPendingHellos: limit})
	addr := e.Addr().String() // the same port over TCP

	if _, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}); err == nil {
		t.Fatal("a TCP peer offering another ALPN was taken")
	}
	if got := e.Counters().Refused[RefusedTLS]; got != 1 {
		t.Errorf("%d TCP peers refused at TLS, want 1", got)
	}

	// a peer that speaks TLS and the protocol's ALPN, then nothing
	mute, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: alpns})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	var silent []net.Conn
	for range peers { // peers that do not even start TLS
		c, err := net.Dial("tcp", addr)
		if err != nil { // reset before the connect returned: refused at once
			continue
		}
		defer c.Close()
		silent = append(silent, c)
	}
	waitFor(t, &e.notifier, 10*time.Second, "the peers past the limit refused", func() bool {
		return e.Counters().Refused[RefusedHelloLimit] >= peers-limit
	})
	if got := e.Counters().Refused[RefusedHelloLimit]; got > peers {
		t.Errorf("%d refused for the hello limit, more than the %d peers", got, peers)
	}
	// every silent peer is closed by the edge: at once past the limit, at the hello's
	// deadline within it
	for i, c := range append(silent, mute) {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		var ne net.Error
		if _, err := c.Read(make([]byte, 1)); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("silent peer %d still connected after 20 s", i)
		}
	}
	waitFor(t, &e.notifier, 10*time.Second, "the TLS peer without hello refused", func() bool {
		return e.Counters().Refused[RefusedProtocol] >= 1
	})

	o := startOrigin(t, "a")
	path := connectorFile(t, "a", tokenWeb, e.pki.caFile, []string{addr}, web(o))
	writeFile(t, path, strings.Replace(readFile(t, path), "transport: auto", "transport: tcp", 1))
	startConnector(t, path)
	waitFor(t, &e.notifier, 30*time.Second, "connector a attached over TCP after the silent peers", func() bool {
		s, ok := e.tunnelOf("a")
		return ok && s.Transport == TransportTCP
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
