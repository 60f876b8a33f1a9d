package tunnel

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/quic-go/quic-go"
)

const (
	tokenWeb  = "web-token-0123456789abcdef"
	tokenBoth = "both-token-0123456789abcdef"
	tokenHome = "home-token-0123456789abcdef" // may name the origins home and office
)

const tokensFile = `
- {token: "` + tokenWeb + `", services: [web]}
- {token: "` + tokenBoth + `", services: [web, api]}
- {token: "` + tokenHome + `", services: [web, api], origins: [home, office]}
`

func TestRequestsReachTheOriginThroughATunnel(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		o := startOrigin(t, "a")
		startConnector(t, e.connectorFile(t, "a", tokenWeb,
			"  - {name: web, to: "+o.addr+", capacity: 7}\n"))
		url := "http://" + e.serve(t, "web")
		waitFor(t, &e.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := e.tunnelOf("a"); return ok })

		client := newClient()
		if from, err := get(client, url+"/"); err != nil || from != "a" {
			t.Fatalf("GET through the tunnel: origin %q, error %v", from, err)
		}
		body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB each way
		resp, err := client.Post(url+"/echo", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		echoed, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(echoed, body) {
			t.Fatalf("POST of 1 MiB: got %d bytes back (error %v), want the same MiB", len(echoed), err)
		}

		waitFor(t, &e.notifier, 5*time.Second, "both streams ended", func() bool {
			s, _ := e.tunnelOf("a")
			return s.Streams == 2 && s.StreamsOpen == 0
		})
		s, _ := e.tunnelOf("a")
		if s.BytesToOrigin < int64(len(body)) || s.BytesFromOrigin < int64(len(body)) {
			t.Errorf("tunnel bytes to/from origin %d/%d, want at least %d each way", s.BytesToOrigin, s.BytesFromOrigin, len(body))
		}
		if len(s.Services) != 1 || s.Services[0] != (ServiceStatus{Name: "web", Capacity: 7, Open: 0}) {
			t.Errorf("tunnel services %+v, want web with capacity 7", s.Services)
		}
		if s.Token != fingerprint(tokenWeb) || s.RTT <= 0 || s.Since.IsZero() {
			t.Errorf("tunnel status %+v: want the token's fingerprint, an RTT and a start", s)
		}
		if c := e.Counters(); c.Streams != 2 || c.Attached != 1 {
			t.Errorf("edge counters %+v, want 2 streams over 1 tunnel", c)
		}
	})
}

func TestNewConnectionsAreSharedByCapacity(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		for _, c := range []struct {
			name     string
			capacity string
		}{{"a", "30"}, {"b", "10"}} {
			o := startOrigin(t, c.name)
			startConnector(t, e.connectorFile(t, c.name, tokenWeb,
				"  - {name: web, to: "+o.addr+", capacity: "+c.capacity+"}\n"))
		}
		url := "http://" + e.serve(t, "web") + "/"
		waitFor(t, &e.notifier, 5*time.Second, "connectors a and b attached", func() bool { return len(e.Tunnels()) == 2 })

		client := newClient()
		served := map[string]int{}
		const requests = 200
		for range requests {
			from, err := get(client, url)
			if err != nil {
				t.Fatal(err)
			}
			served[from]++
		}
		// 3:1 by capacity, give or take the streams that had not ended yet when the next
		// connection came (they lower a connector's free capacity for one pick).
		if served["a"] < 140 || served["a"] > 160 || served["a"]+served["b"] != requests {
			t.Errorf("a (capacity 30) served %d, b (capacity 10) %d of %d: want 150 and 50, ±10", served["a"], served["b"], requests)
		}
	})
}

// load sends requests from workers until stop, recording when each started, whether
// it failed and who answered.
type load struct {
	mu      sync.Mutex
	results []result
	stop    chan struct{}
	once    sync.Once
	done    sync.WaitGroup
}

type result struct {
	start time.Time
	from  string
	err   error
}

func startLoad(t *testing.T, url string, workers int) *load {
	l := &load{stop: make(chan struct{})}
	t.Cleanup(func() { l.finish() })
	client := newClient()
	for range workers {
		l.done.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				from, err := get(client, url)
				l.mu.Lock()
				l.results = append(l.results, result{start, from, err})
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *load) served(by string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.results {
		if r.err == nil && r.from == by {
			n++
		}
	}
	return n
}

func (l *load) finish() []result {
	l.once.Do(func() { close(l.stop) })
	l.done.Wait()
	return l.results
}

// waitServed waits until the load has had n more answers from by; the load's
// requests are not announced by a notifier, so this one waits on the edge's.
func waitServed(t *testing.T, e *testEdge, l *load, by string, n int) {
	t.Helper()
	target := l.served(by) + n
	waitFor(t, &e.notifier, 10*time.Second, by+" served more requests", func() bool { return l.served(by) >= target })
}

func TestAKilledConnectorGetsNoNewConnectionWithinASecond(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		oa, ob := startOrigin(t, "a"), startOrigin(t, "b")
		child := startChildConnector(t, e.connectorFile(t, "a", tokenWeb, web(oa)))
		startConnector(t, e.connectorFile(t, "b", tokenWeb, web(ob)))
		url := "http://" + e.serve(t, "web") + "/"
		waitFor(t, &e.notifier, 10*time.Second, "connectors a and b attached", func() bool { return len(e.Tunnels()) == 2 })

		l := startLoad(t, url, 2)
		waitServed(t, e, l, "a", 5)
		// over TCP, the kernel of a killed connector resets its connection, which the
		// edge sees at once: a frozen one (as unplugged) is the one only pings tell
		if transportOf(t) == TransportTCP {
			if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// stopped for sure before the clock starts, as a killed one is reaped
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(child.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
				t.Fatalf("waiting for the connector to stop: %v, status %v", err, ws)
			}
		} else {
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = child.Wait()
		}
		killed := time.Now()
		waitFor(t, &e.notifier, time.Second, "connector a, killed, still takes new connections", func() bool {
			_, ok := e.tunnelOf("a")
			return !ok
		})
		gone := time.Now()
		t.Logf("connector a gone from the edge %s after it was killed", gone.Sub(killed).Round(time.Millisecond))
		waitServed(t, e, l, "b", 20)
		for _, r := range l.finish() {
			switch {
			case r.start.After(killed) && r.err != nil:
				t.Errorf("request started %s after the kill failed: %v", r.start.Sub(killed).Round(time.Millisecond), r.err)
			case r.start.After(gone) && r.from != "b":
				t.Errorf("request started %s after connector a was gone was answered by %q", r.start.Sub(gone).Round(time.Millisecond), r.from)
			}
		}
		if c := e.Counters(); c.Gone != 1 {
			t.Errorf("edge counted %d tunnels gone, want 1", c.Gone)
		}
	})
}

func TestADrainingConnectorFailsNoRequest(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		oa, ob := startOrigin(t, "a"), startOrigin(t, "b")
		a := startConnector(t, e.connectorFile(t, "a", tokenWeb, web(oa)))
		startConnector(t, e.connectorFile(t, "b", tokenWeb, web(ob)))
		base := "http://" + e.serve(t, "web")
		waitFor(t, &e.notifier, 5*time.Second, "connectors a and b attached", func() bool { return len(e.Tunnels()) == 2 })

		// Requests held open by the origins while a drains: they must complete.
		client := newClient()
		held := make(chan error, 4)
		for range 4 {
			go func() { _, err := get(client, base+"/hold"); held <- err }()
		}
		waitFor(t, &e.notifier, 5*time.Second, "a holds a request", func() bool {
			s, _ := e.tunnelOf("a")
			return s.StreamsOpen > 0
		})
		l := startLoad(t, base+"/", 4)
		waitServed(t, e, l, "a", 5)

		stopped := make(chan struct{})
		go func() { a.stop(); close(stopped) }()
		waitFor(t, &e.notifier, 5*time.Second, "a draining at the edge", func() bool {
			s, ok := e.tunnelOf("a")
			return !ok || s.Draining
		})
		drained := time.Now()
		waitServed(t, e, l, "b", 20)
		select {
		case <-stopped:
			t.Fatal("connector a left with held requests open")
		default:
		}
		oa.releaseHeld()
		ob.releaseHeld()
		for range 4 {
			if err := <-held; err != nil {
				t.Errorf("a request held over the drain failed: %v", err)
			}
		}
		<-stopped
		waitServed(t, e, l, "b", 20)
		results := l.finish()
		for _, r := range results {
			if r.err != nil {
				t.Errorf("request started %s after the drain began failed: %v", r.start.Sub(drained).Round(time.Millisecond), r.err)
			}
		}
		if _, ok := e.tunnelOf("a"); ok {
			t.Error("connector a's tunnel is still attached after it left")
		}
		t.Logf("%d requests, none failed", len(results))
	})
}

func TestRefusals(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		p := newPKI(t)
		e := startEdge(t, p, tokensFile, EdgeConfig{})
		edges := []string{e.Addr().String()}
		o := startOrigin(t, "a")
		api := "  - {name: api, to: " + o.addr + "}\n"
		unknownToken := "not-a-token-of-this-edge-0123"

		for _, tc := range []struct {
			name, token, services, caFile string
			edgeRefusal                   string // the edge counts this reason
			connectorSays                 string // in the connector's last error
			tlsFailure                    bool
		}{
			{name: "unknown token", token: unknownToken, services: web(o), caFile: p.caFile,
				edgeRefusal: RefusedUnknownToken, connectorSays: "unknown token " + fingerprint(unknownToken)},
			{name: "out of scope", token: tokenWeb, services: web(o) + api, caFile: p.caFile,
				edgeRefusal: RefusedOutOfScope, connectorSays: `may not serve "api"`},
			{name: "wrong CA", token: tokenWeb, services: web(o), caFile: newPKI(t).caFile,
				connectorSays: "certificate signed by unknown authority", tlsFailure: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := e.Counters()
				c := startConnector(t, connectorFile(t, "refused", tc.token, tc.caFile, edges, tc.services))
				waitFor(t, &c.notifier, 5*time.Second, "the connector's first attempt", func() bool {
					return c.Links()[0].LastError != ""
				})
				link, counters := c.Links()[0], c.Counters()
				if link.Up || !strings.Contains(link.LastError, tc.connectorSays) {
					t.Errorf("connector link %+v: want down, last error saying %q", link, tc.connectorSays)
				}
				if tc.tlsFailure && counters.TLSFailures == 0 {
					t.Errorf("connector counters %+v: want a TLS failure", counters)
				}
				if !tc.tlsFailure && counters.Refused == 0 {
					t.Errorf("connector counters %+v: want a refusal", counters)
				}
				if tc.edgeRefusal != "" {
					waitFor(t, &e.notifier, 5*time.Second, "the edge counted "+tc.edgeRefusal, func() bool {
						return e.Counters().Refused[tc.edgeRefusal] > before.Refused[tc.edgeRefusal]
					})
				}
				if n := len(e.Tunnels()); n != 0 {
					t.Errorf("%d tunnels attached, want none", n)
				}
			})
		}

		t.Run("a TLS peer that is no connector", func(t *testing.T) {
			before := e.Counters().Refused[RefusedTLS]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := quic.DialAddr(ctx, e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}}, nil)
			if err == nil {
				conn.CloseWithError(0, "")
				t.Fatal("the edge completed a handshake with a peer offering ALPN h3 only")
			}
			if got := e.Counters().Refused[RefusedTLS]; got != before+1 {
				t.Errorf("edge counted %d TLS refusals, want %d", got, before+1)
			}
		})

		logs := e.logs.String()
		for _, secret := range []string{unknownToken, tokenWeb, tokenBoth} {
			if strings.Contains(logs, secret) {
				t.Errorf("the edge's log gives away a token:\n%s", logs)
			}
		}
	})
}

func TestLimits(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		t.Run("tunnels per token", func(t *testing.T) {
			e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{MaxTunnelsPerToken: 1})
			o := startOrigin(t, "a")
			startConnector(t, e.connectorFile(t, "first", tokenWeb, web(o)))
			waitFor(t, &e.notifier, 5*time.Second, "the first connector attached", func() bool { _, ok := e.tunnelOf("first"); return ok })
			second := startConnector(t, e.connectorFile(t, "second", tokenWeb, web(o)))
			waitFor(t, &e.notifier, 5*time.Second, "the second tunnel of the token refused", func() bool {
				return e.Counters().Refused[RefusedTunnelLimit] > 0
			})
			if _, ok := e.tunnelOf("second"); ok {
				t.Error("the second tunnel of a token limited to one attached")
			}
			waitFor(t, &second.notifier, 5*time.Second, "the second connector told why", func() bool {
				return strings.Contains(second.Links()[0].LastError, "tunnels attached already")
			})
		})

		t.Run("streams per tunnel", func(t *testing.T) {
			clk := clock.NewFake(time.Unix(0, 0))
			const queue = 30 * time.Second
			e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{MaxStreamsPerTunnel: 2, QueueTimeout: queue, Clock: clk})
			o := startOrigin(t, "a")
			startConnector(t, e.connectorFile(t, "a", tokenWeb,
				"  - {name: web, to: "+o.addr+", capacity: 10}\n"))
			url := "http://" + e.serve(t, "web") + "/hold"
			waitFor(t, &e.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := e.tunnelOf("a"); return ok })

			client := newClient()
			held := make(chan error, 2)
			for range 2 {
				go func() { _, err := get(client, url); held <- err }()
			}
			for range 2 {
				<-o.held
			}
			// The third connection waits for a free stream, QueueTimeout long on the edge's
			// clock, then is closed. The held requests' own queue timers (armed at 0, due
			// at queue, stopped once their streams were acked) may still be armed: the
			// third's is told apart by arming it later, and theirs are fired before it is
			// counted.
			clk.Advance(queue / 3)
			third := make(chan error, 1)
			go func() { _, err := get(client, url); third <- err }()
			clk.Advance(queue - queue/3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := clk.BlockUntilContext(ctx, 1); err != nil {
				t.Fatal("the third request did not wait for a stream on the edge's clock")
			}
			if c := e.Counters(); c.ClientsRefused != 0 {
				t.Fatalf("edge counters %+v: a client refused before its queue timeout", c)
			}
			clk.Advance(queue) // past its deadline, armed at queue/3 or at queue
			if err := <-third; err == nil {
				t.Error("a third concurrent request went through a tunnel limited to 2 streams")
			}
			if c := e.Counters(); c.ClientsRefused != 1 {
				t.Errorf("edge counters %+v: want 1 client refused", c)
			}
			if s, _ := e.tunnelOf("a"); s.StreamsOpen != 2 || o.served.Load() != 2 {
				t.Errorf("%d streams open, %d requests at the origin: want 2 and 2", s.StreamsOpen, o.served.Load())
			}
			o.releaseHeld()
			for range 2 {
				if err := <-held; err != nil {
					t.Errorf("a request within the limit failed: %v", err)
				}
			}
		})
	})
}

func TestAnUnreachableOriginIsRetriedOnAnotherConnector(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		o := startOrigin(t, "b")
		// a's origin is a port nothing listens on.
		startConnector(t, e.connectorFile(t, "a", tokenWeb, "  - {name: web, to: 127.0.0.1:1, capacity: 1000}\n"))
		startConnector(t, e.connectorFile(t, "b", tokenWeb, "  - {name: web, to: "+o.addr+", capacity: 1}\n"))
		url := "http://" + e.serve(t, "web") + "/"
		waitFor(t, &e.notifier, 5*time.Second, "connectors a and b attached", func() bool { return len(e.Tunnels()) == 2 })

		client := newClient()
		for range 5 {
			if from, err := get(client, url); err != nil || from != "b" {
				t.Fatalf("request answered by %q, error %v: want b, a's origin being down", from, err)
			}
		}
		if c := e.Counters(); c.StreamRetries == 0 {
			t.Errorf("edge counters %+v: want retries, a being picked first (capacity 1000 to 1)", c)
		}
	})
}

// The client's half-close reaches the origin, and the origin's answer still comes back.
func TestHalfCloseCrossesTheTunnel(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		ln := listenEcho(t)
		startConnector(t, e.connectorFile(t, "a", tokenBoth,
			"  - {name: api, to: "+ln+"}\n"))
		addr := e.serve(t, "api")
		waitFor(t, &e.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := e.tunnelOf("a"); return ok })

		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if err := closeWrite(conn); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(conn)
		if err != nil || string(got) != "ping" {
			t.Fatalf("echo after half-close: %q, %v; want \"ping\" then EOF", got, err)
		}
	})
}

func TestTheConnectorReconnectsToARestartedEdge(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		p := newPKI(t)
		first := startEdge(t, p, tokensFile, EdgeConfig{})
		o := startOrigin(t, "a")
		c := startConnector(t, first.connectorFile(t, "a", tokenWeb, web(o)))
		waitFor(t, &first.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := first.tunnelOf("a"); return ok })

		first.stop()
		waitFor(t, &c.notifier, 5*time.Second, "the connector saw the edge go", func() bool { return !c.Links()[0].Up })
		second := startEdge(t, p, tokensFile, EdgeConfig{Listen: first.Addr().String()})
		url := "http://" + second.serve(t, "web") + "/"
		waitFor(t, &second.notifier, 5*time.Second, "connector a attached to the restarted edge", func() bool { _, ok := second.tunnelOf("a"); return ok })
		if from, err := get(newClient(), url); err != nil || from != "a" {
			t.Fatalf("request through the new tunnel: origin %q, error %v", from, err)
		}
		if n := c.Counters().Dials; n < 2 {
			t.Errorf("the connector dialled %d times, want at least 2", n)
		}
	})
}

// An edge with no connector of a service relays its clients to an edge that has one,
// over the tunnel that edge keeps to it; a wrong relay token is refused like any.
func TestAnEdgeWithoutAConnectorRelaysToOneWithIt(t *testing.T) {
	p := newPKI(t)
	const relayToken = "fleet-relay-token-0123456789"
	near := startEdge(t, p, tokensFile, EdgeConfig{RelayToken: relayToken}) // the connector's
	far := startEdge(t, p, tokensFile, EdgeConfig{RelayToken: relayToken})  // the client's
	other := startEdge(t, p, tokensFile, EdgeConfig{RelayToken: "another-fleet-token-0123"})
	o := startOrigin(t, "a")
	headers := make(chan streamHeader, 3) // what connector a is told of each client
	a := startConnectorWith(t, near.connectorFile(t, "a", tokenWeb, "  - {name: web, to: "+o.addr+", capacity: 7}\n"), func(c *Connector) {
		dial := c.origin
		c.origin = func(h streamHeader) (net.Conn, error) {
			headers <- h
			return dial(h)
		}
	})
	waitFor(t, &near.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := near.tunnelOf("a"); return ok })

	cas, err := LoadCAs(p.caFile)
	if err != nil {
		t.Fatal(err)
	}
	relay := NewRelay(near.Edge, RelayConfig{Name: "near", Token: relayToken, CAs: cas, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); relay.Wait() }()
	relay.SetPeers(ctx, []string{far.Addr().String(), other.Addr().String()})
	waitFor(t, &far.notifier, 5*time.Second, "near's relay offers web to far", func() bool { return far.Connected()["web"] })
	waitFor(t, &other.notifier, 5*time.Second, "other refuses a relay token of another fleet", func() bool {
		return other.Counters().Refused[RefusedUnknownToken] > 0
	})

	client := newClient()
	at := far.serve(t, "web")
	url := "http://" + at
	for range 3 {
		if from, err := get(client, url+"/"); err != nil || from != "a" {
			t.Fatalf("GET through far, relayed by near: origin %q, error %v", from, err)
		}
		// the client and the VIP it reached at far, not the relay's own addresses
		if h := <-headers; h.VIP.String() != at || !h.Client.Addr().IsLoopback() || h.Client.Port() == 0 || h.Client.Port() == h.VIP.Port() {
			t.Errorf("connector a was told of client %s at %s, want the client's loopback address and %s", h.Client, h.VIP, at)
		}
	}
	waitFor(t, &near.notifier, 5*time.Second, "3 relayed streams ended on a's tunnel", func() bool {
		s, _ := near.tunnelOf("a")
		return s.Streams == 3 && s.StreamsOpen == 0 && s.BytesFromOrigin > 0
	})
	if s, ok := far.tunnelOf("near"); !ok || !s.Relay || len(s.Services) != 1 || s.Services[0].Capacity != 7 {
		t.Errorf("far's view of near's relay: %+v (attached %v), want a relay offering web's capacity 7", s, ok)
	}

	// the connector leaves near: the offer goes with it, and far has nothing to serve
	a.stop()
	waitFor(t, &far.notifier, 5*time.Second, "near's offer withdrawn", func() bool { return !far.Connected()["web"] })
}

// The client's first bytes travel with the stream's header, and go again to another
// connector when the first cannot reach its origin: the origin gets the request whole,
// once. The client connects and speaks before the edge accepts it, so that its bytes
// are there when the edge opens the stream.
func TestTheClientsFirstBytesTravelWithTheStream(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		o := startOrigin(t, "b")
		startConnector(t, e.connectorFile(t, "a", tokenWeb, "  - {name: web, to: 127.0.0.1:1, capacity: 1000}\n"))
		headers := make(chan streamHeader, 10)
		startConnectorWith(t, e.connectorFile(t, "b", tokenWeb, "  - {name: web, to: "+o.addr+", capacity: 1}\n"), func(c *Connector) {
			c.origin = func(h streamHeader) (net.Conn, error) {
				headers <- h
				return c.dialTo(h)
			}
		})
		waitFor(t, &e.notifier, 5*time.Second, "connectors a and b attached", func() bool { return len(e.Tunnels()) == 2 })

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		client, err := net.Dial("tcp", ln.Addr().String()) // in the backlog: not accepted yet
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		request := "GET / HTTP/1.0\r\nHost: web\r\n\r\n"
		if _, err := client.Write([]byte(request)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error)
		go func() { served <- e.Serve(ctx, "web", ln) }()
		defer func() { cancel(); <-served }()

		_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
		response, err := io.ReadAll(client)
		if err != nil || !strings.Contains(string(response), "hello from b") {
			t.Fatalf("response %q, error %v: want b's", response, err)
		}
		if h := <-headers; string(h.Data) != request {
			t.Errorf("the stream's header carried %q, want the client's request %q", h.Data, request)
		}
		if c := e.Counters(); c.StreamRetries != 1 || o.served.Load() != 1 {
			t.Errorf("%d retries, %d requests served: want a tried first (capacity 1000 to 1), the request served once", c.StreamRetries, o.served.Load())
		}
	})
}

// A connector of transport auto dials QUIC where it passes, and TCP for an edge where
// QUIC had no answer a while ago (the choice it remembers): both attach, each shown
// with its transport on both sides.
func TestAutoTransportDialsQUICOrTheRememberedTCP(t *testing.T) {
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	o := startOrigin(t, "a")
	startConnector(t, e.connectorFile(t, "quic", tokenWeb, web(o)))
	remembered := startConnectorWith(t, e.connectorFile(t, "tcp", tokenWeb, web(o)), func(c *Connector) {
		for _, l := range c.links {
			l.tcpUntil = time.Now().Add(time.Hour)
		}
	})
	waitFor(t, &e.notifier, 10*time.Second, "both connectors attached", func() bool { return len(e.Tunnels()) == 2 })
	for name, want := range map[string]string{"quic": TransportQUIC, "tcp": TransportTCP} {
		if s, _ := e.tunnelOf(name); s.Transport != want {
			t.Errorf("connector %s's tunnel over %q, want %s", name, s.Transport, want)
		}
	}
	waitFor(t, &remembered.notifier, 10*time.Second, "the connector's tunnel up", func() bool { return remembered.Links()[0].Up })
	if links := remembered.Links(); len(links) != 1 || links[0].Transport != TransportTCP {
		t.Errorf("the connector's links %+v, want its edge over tcp", links)
	}
}
