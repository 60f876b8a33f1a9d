package tunnel

// The connector's side: keep a tunnel to every edge, serve the streams the edges
// open, drain when asked to stop.
//
//	Run ── keep (one goroutine per edge, owned by Run)
//	         dial ─▶ hello ─▶ welcome ─▶ control loop (ping every pingInterval,
//	          ▲                            pong or gone after deadAfter, drain on ctx)
//	          └── backoff with jitter ◀── tunnel ended
//	       acceptStreams (one per tunnel) ─▶ serveStream (one per stream): dial to, ack, proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/quic-go/quic-go"
)

// Reconnection backoff: doubled after each failed attempt, each wait drawn at random
// from its upper half so that connectors cut off together do not come back together.
const (
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 10 * time.Second
	dialTimeout = 10 * time.Second
)

// Connector keeps tunnels to the edges and serves its services through them.
type Connector struct {
	cfg   *ConnectorConfig
	log   *slog.Logger
	clock clock.Clock
	// stalls sees when this process did not run, which the tunnels' failure detectors
	// do not count against their edges (watchdog.go)
	stalls   *clock.StallMeter
	services map[string]ServiceConfig
	quicConf *quic.Config
	notifier // every tunnel up or down

	// protocols are the ALPN names offered, newest first (alpns; a test offers an
	// older version alone)
	protocols []string

	// origin dials the origin of a stream; offers, when set, gives the services to
	// announce and a channel closed when they change (an edge relaying, relay.go).
	// NewConnector sets origin to dialling the service's to.
	origin func(h streamHeader) (net.Conn, error)
	offers func() ([]announcedService, <-chan struct{})

	mu    sync.Mutex
	links map[string]*edgeLink // by edge address

	dials, dialFailures, tlsFailures, refused atomic.Uint64
	streams, originFailures                   atomic.Uint64
	bytesToOrigin, bytesFromOrigin            atomic.Int64
}

// edgeLink is the state of the tunnel to one edge; guarded by Connector.mu but for
// the atomics.
type edgeLink struct {
	edge      string
	conn      tunnelConn // nil while not attached
	tunnel    uint64
	since     time.Time
	draining  bool
	lastError string
	// tcpUntil: an auto connector dials this edge over TCP until then (QUIC had no
	// answer, tcp.go)
	tcpUntil time.Time
	open     atomic.Int64
}

// NewConnector makes a connector of a validated config.
func NewConnector(cfg *ConnectorConfig, log *slog.Logger) *Connector {
	c := &Connector{cfg: cfg, log: log, clock: cfg.Clock, services: map[string]ServiceConfig{}, links: map[string]*edgeLink{}, protocols: alpns}
	if c.clock == nil {
		c.clock = clock.Real()
	}
	c.stalls = clock.NewStallMeter(clock.Real(), stallWatch) // real time, as the control stream's read deadlines
	capacity := 0
	for _, s := range cfg.Services {
		c.services[s.Name] = s
		capacity += s.Capacity
	}
	c.quicConf = &quic.Config{
		MaxIdleTimeout: idleTimeout,
		// QUIC itself holds each edge to the capacity this connector announced.
		MaxIncomingStreams:    int64(capacity),
		MaxIncomingUniStreams: -1,
	}
	for _, edge := range cfg.Edges {
		c.links[edge] = &edgeLink{edge: edge}
	}
	c.origin = c.dialTo
	return c
}

// dialTo dials the origin of the stream's service, the connector's to, and opens the
// connection with the PROXY header when the edge asks for one: before the client's
// first byte (serveStream writes those), in one write as the spec wants. Here, not in
// serveStream: an edge relaying a stream (relay.go) passes the header on to the
// connector that dials the origin.
func (c *Connector) dialTo(h streamHeader) (net.Conn, error) {
	svc, ok := c.services[h.Service]
	if !ok {
		return nil, errors.New("this connector does not serve " + h.Service)
	}
	var header []byte
	if h.Proxy != "" {
		var err error
		if header, err = proxyHeader(h.Proxy, h.Client, h.VIP); err != nil {
			return nil, err
		}
	}
	dialer := net.Dialer{Timeout: originDialTimeout}
	conn, err := dialer.Dial("tcp", svc.To)
	if err != nil || header == nil {
		return conn, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(originDialTimeout))
	if _, err := conn.Write(header); err != nil {
		conn.Close()
		return nil, fmt.Errorf("PROXY header to %s: %w", svc.To, err)
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// announced is what the hello says this connector serves.
func (c *Connector) announced() ([]announcedService, <-chan struct{}) {
	if c.offers != nil {
		return c.offers()
	}
	var out []announcedService
	for _, svc := range c.cfg.Services {
		out = append(out, announcedService{Name: svc.Name, Capacity: svc.Capacity, Origin: svc.Origin})
	}
	return out, nil
}

// Run keeps a tunnel to every edge until ctx is done, then drains: it asks every
// edge for no new stream, waits for the open ones to end (up to DrainTime), closes
// the tunnels and returns.
func (c *Connector) Run(ctx context.Context) error {
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() { // until the tunnels have ended, drains included
		defer close(watched)
		c.stalls.Run(stop)
	}()
	var wg sync.WaitGroup
	for _, edge := range c.cfg.Edges {
		wg.Go(func() { c.keep(ctx, c.links[edge]) })
	}
	wg.Wait()
	close(stop)
	<-watched
	return nil
}

func (c *Connector) keep(ctx context.Context, link *edgeLink) {
	backoff := minBackoff
	for {
		start := c.clock.Now()
		err := c.session(ctx, link)
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		link.lastError = err.Error()
		c.mu.Unlock()
		c.notify()
		if c.clock.Now().Sub(start) > maxBackoff {
			backoff = minBackoff // it was up for a while: this is a new failure, not the same one
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		c.log.Warn("tunnel down; reconnecting", "edge", link.edge, "error", err, "in", wait.Round(time.Millisecond))
		if !clock.Sleep(c.clock, wait, ctx.Done()) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// session dials one edge and serves the tunnel until it ends; when ctx ends first,
// it drains the tunnel and returns nil.
func (c *Connector) session(ctx context.Context, link *edgeLink) error {
	conn, control, tunnelID, err := c.dial(ctx, link)
	if err != nil {
		return err
	}
	version := versionOf(conn.Protocol())
	var streams sync.WaitGroup
	defer func() {
		_ = conn.CloseWithError(codeDone, "connector leaving")
		streams.Wait()
		c.mu.Lock()
		link.conn, link.draining = nil, false
		c.mu.Unlock()
		c.notify()
	}()
	c.mu.Lock()
	link.conn, link.tunnel, link.since, link.lastError = conn, tunnelID, time.Now(), ""
	c.mu.Unlock()
	c.notify()
	c.log.Info("tunnel up", "edge", link.edge, "tunnel", tunnelID, "version", version, "transport", conn.Transport())
	streams.Go(func() { c.acceptStreams(conn, version, link, &streams) })
	return c.control(ctx, conn, control, link)
}

// dial sets up a tunnel: the transport's handshake (tcp.go), hello, welcome.
func (c *Connector) dial(ctx context.Context, link *edgeLink) (tunnelConn, *controlStream, uint64, error) {
	c.dials.Add(1)
	edge := link.edge
	serverName := c.cfg.ServerName
	if serverName == "" {
		serverName, _, _ = net.SplitHostPort(edge)
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.cfg.CAs, ServerName: serverName, NextProtos: c.protocols,
		DynamicRecordSizingDisabled: true}
	conn, err := c.dialTransport(ctx, link, tlsConf)
	if err != nil {
		c.dialFailures.Add(1)
		return nil, nil, 0, fmt.Errorf("dial %s: %w", edge, err)
	}
	fail := func(err error) (tunnelConn, *controlStream, uint64, error) {
		_ = conn.CloseWithError(codeBroken, "")
		var ae *quic.ApplicationError
		if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == codeRefused {
			c.refused.Add(1)
			return nil, nil, 0, fmt.Errorf("edge %s refused this connector: %s", edge, ae.ErrorMessage)
		}
		c.dialFailures.Add(1)
		return nil, nil, 0, fmt.Errorf("edge %s: %w", edge, err)
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(err)
	}
	control := &controlStream{s: s}
	version := versionOf(conn.Protocol())
	hello := message{Type: "hello", Version: version, Token: c.cfg.Token, Name: c.cfg.Name}
	hello.Services, _ = c.announced()
	if version < 2 {
		hello.Services = c.withoutOrigins(edge, hello.Services)
	}
	if err := control.send(hello); err != nil {
		return fail(err)
	}
	welcome, err := control.receive(time.Now().Add(helloTimeout))
	if err != nil {
		return fail(err)
	}
	if welcome.Type != "welcome" {
		return fail(fmt.Errorf("expected welcome, got %q", welcome.Type))
	}
	return conn, control, welcome.Tunnel, nil
}

// withoutOrigins is the services a version 1 hello announces: an edge that speaks
// only version 1 knows no origins (it serves its services without them), so the
// origins are left out, and said so.
func (c *Connector) withoutOrigins(edge string, services []announcedService) []announcedService {
	out := slices.Clone(services)
	for i := range out {
		if out[i].Origin != "" {
			c.log.Warn("the edge speaks protocol version 1: the service's origin is not announced to it", "edge", edge,
				"service", out[i].Name, "origin", out[i].Origin)
			out[i].Origin = ""
		}
	}
	return out
}

// control pings the edge and watches for its pongs; on ctx's end it drains.
func (c *Connector) control(ctx context.Context, conn tunnelConn, control *controlStream, link *edgeLink) error {
	received := make(chan message)
	failed := make(chan error, 1)
	go func() { // owned by the session: ends when conn closes or the edge falls silent
		dog := newWatchdog(clock.Real(), c.stalls, conn) // real time: the stream's read deadlines are
		for {
			m, err := control.receive(dog.deadline())
			switch {
			case err == nil:
				dog.heard()
			case dog.gone(err) || !timedOut(err):
				failed <- err
				return
			default:
				continue // this process stalled, or the pong is behind the tunnel's data, which does arrive
			}
			select {
			case received <- m:
			case <-conn.Context().Done():
				return
			}
		}
	}()
	ping := c.clock.NewTicker(pingInterval)
	defer ping.Stop()
	offered, offerChanged := c.announced()
	var seq uint64
	done := ctx.Done()
	var drainTimeout <-chan time.Time
	for {
		select {
		case <-ping.C():
			seq++
			if err := control.send(message{Type: "ping", Seq: seq}); err != nil {
				return err
			}
		case <-offerChanged:
			var now []announcedService
			if now, offerChanged = c.announced(); !slices.Equal(now, offered) {
				offered = now
				if err := control.send(message{Type: "offer", Services: now}); err != nil {
					return err
				}
			}
		case m := <-received:
			switch m.Type {
			case "pong":
			case "drained":
				c.log.Info("tunnel drained", "edge", link.edge)
				return nil
			default:
				return fmt.Errorf("unexpected control message %q", m.Type)
			}
		case err := <-failed:
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				_ = conn.CloseWithError(codeGone, "no pong")
				return fmt.Errorf("edge %s gone: no pong for %s", link.edge, deadAfter)
			}
			return err
		case <-done:
			done = nil
			c.mu.Lock()
			link.draining = true
			c.mu.Unlock()
			c.notify()
			c.log.Info("draining", "edge", link.edge, "streams_open", link.open.Load(), "drain_time", c.cfg.DrainTime)
			if err := control.send(message{Type: "drain"}); err != nil {
				return err
			}
			drain := c.clock.NewTimer(c.cfg.DrainTime)
			defer drain.Stop()
			drainTimeout = drain.C()
		case <-drainTimeout:
			c.log.Warn("drain time over: closing the tunnel with streams open", "edge", link.edge, "streams_open", link.open.Load())
			return nil
		}
	}
}

func (c *Connector) acceptStreams(conn tunnelConn, version int, link *edgeLink, streams *sync.WaitGroup) {
	for {
		s, err := conn.AcceptStream(context.Background())
		if err != nil {
			return // the tunnel closed
		}
		streams.Go(func() { c.serveStream(s, version, link) })
	}
}

// serveStream connects one stream to its service's origin. A stream that arrives
// while draining is served too: the edge picked it before it learnt of the drain.
func (c *Connector) serveStream(s tunnelStream, version int, link *edgeLink) {
	_ = s.SetReadDeadline(time.Now().Add(helloTimeout))
	h, err := readStreamHeader(s, version)
	if err != nil {
		s.CancelRead(streamAborted)
		s.CancelWrite(streamAborted)
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	origin, err := c.origin(h)
	if err != nil {
		c.originFailures.Add(1)
		c.log.Warn("origin unreachable", "service", h.Service, "client", h.Client, "error", err)
		refuseStream(s, err.Error())
		return
	}
	if _, err := s.Write([]byte{ackOK}); err != nil {
		origin.Close()
		return
	}
	if len(h.Data) > 0 { // the client's first bytes, sent with the header
		if _, err := origin.Write(h.Data); err != nil {
			origin.Close()
			s.CancelRead(streamAborted)
			s.CancelWrite(streamAborted)
			return
		}
		c.bytesToOrigin.Add(int64(len(h.Data)))
	}
	c.streams.Add(1)
	link.open.Add(1)
	defer link.open.Add(-1)
	_ = proxy(origin, s, byteCounters{&c.bytesFromOrigin}, byteCounters{&c.bytesToOrigin}, nil)
}

func refuseStream(s tunnelStream, reason string) {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	_, _ = s.Write(append([]byte{ackFailed, byte(len(reason))}, reason...))
	_ = s.Close()
	s.CancelRead(streamAborted)
}

// EdgeLinkStatus is the connector's view of its tunnel to one edge.
type EdgeLinkStatus struct {
	Edge        string        `json:"edge"`
	Up          bool          `json:"up"`
	Transport   string        `json:"transport,omitempty"` // quic or tcp, while up
	Tunnel      uint64        `json:"tunnel,omitempty"`    // the edge's id of it
	Since       time.Time     `json:"since,omitzero"`
	Draining    bool          `json:"draining"`
	StreamsOpen int64         `json:"streams_open"`
	RTT         time.Duration `json:"rtt_ns"`
	LastError   string        `json:"last_error,omitempty"` // why the last attempt or tunnel ended
}

// ConnectorCounters are a connector's counters since it started.
type ConnectorCounters struct {
	Dials        uint64 `json:"dials"`
	DialFailures uint64 `json:"dial_failures"` // every failed dial or handshake, refusals excepted
	// TLSFailures counts handshakes that failed on TLS: most often an edge whose
	// certificate does not chain to ca_file.
	TLSFailures     uint64 `json:"tls_failures"`
	Refused         uint64 `json:"refused"` // hellos an edge refused (token, scope, limits)
	Streams         uint64 `json:"streams"`
	OriginFailures  uint64 `json:"origin_failures"` // streams whose origin could not be reached
	BytesToOrigin   int64  `json:"bytes_to_origin"`
	BytesFromOrigin int64  `json:"bytes_from_origin"`
}

// Links returns the state of the tunnel to each edge, in the config's order.
func (c *Connector) Links() []EdgeLinkStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []EdgeLinkStatus
	for _, edge := range c.cfg.Edges {
		l := c.links[edge]
		s := EdgeLinkStatus{Edge: edge, Up: l.conn != nil, Draining: l.draining, StreamsOpen: l.open.Load(), LastError: l.lastError}
		if l.conn != nil {
			s.Tunnel, s.Since, s.RTT, s.Transport = l.tunnel, l.since, l.conn.RTT(), l.conn.Transport()
		}
		out = append(out, s)
	}
	return out
}

// Counters returns the connector's counters.
func (c *Connector) Counters() ConnectorCounters {
	return ConnectorCounters{
		Dials: c.dials.Load(), DialFailures: c.dialFailures.Load(), TLSFailures: c.tlsFailures.Load(),
		Refused: c.refused.Load(), Streams: c.streams.Load(), OriginFailures: c.originFailures.Load(),
		BytesToOrigin: c.bytesToOrigin.Load(), BytesFromOrigin: c.bytesFromOrigin.Load(),
	}
}

// RunConnector is `manifold connect`: it reads the config file at path and runs a
// connector until ctx is done, then drains it.
func RunConnector(ctx context.Context, path string, log *slog.Logger) error {
	cfg, err := LoadConnectorConfig(path, log)
	if err != nil {
		return err
	}
	log.Info("connector starting", "name", cfg.Name, "edges", cfg.Edges, "services", len(cfg.Services), "token_file", cfg.TokenFile)
	return NewConnector(cfg, log).Run(ctx)
}
