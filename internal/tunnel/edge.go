package tunnel

// The edge's side of the tunnels: accept connectors, authenticate them, keep their
// control streams (ping, drain), and forget them when they go.
//
//	Run ── accept QUIC ──▶ attach (one goroutine per tunnel, owned by Run)
//	                         hello → check token, scope, limits → welcome
//	                         control loop: ping → pong, drain → drained, silence → gone
//	                         detach: no new stream picks the tunnel
//	Serve ── accept TCP ──▶ join (one goroutine per client, owned by Serve): balance.go

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/listen"
	"github.com/manifoldlb/manifold/internal/ratelog"
	"github.com/manifoldlb/manifold/internal/secretfile"
)

// Defaults of EdgeConfig's limits.
const (
	DefaultMaxTunnelsPerToken  = 16
	DefaultMaxStreamsPerTunnel = 10000
	DefaultQueueTimeout        = 5 * time.Second
)

// EdgeConfig is what an edge needs to take tunnels.
type EdgeConfig struct {
	Listen            string // host:port where connectors dial in, over QUIC (UDP) and TCP
	CertFile, KeyFile string // the edge's TLS certificate (its chain) and key
	TokensFile        string // see LoadTokens
	// MaxTunnelsPerToken bounds the tunnels attached with one token at once, so that a
	// leaked token cannot take the edge's memory (0: DefaultMaxTunnelsPerToken).
	MaxTunnelsPerToken int
	// MaxStreamsPerTunnel bounds the streams open over one tunnel, whatever capacity
	// its connector announces (0: DefaultMaxStreamsPerTunnel).
	MaxStreamsPerTunnel int
	// QueueTimeout is how long a client connection waits for a connector of its
	// service with free capacity before it is closed (0: DefaultQueueTimeout).
	QueueTimeout time.Duration
	// RelayToken, when set, is the secret the edges of one fleet relay to each other
	// with (relay.go): a tunnel whose hello gives it is another edge, offering the
	// services of its own connectors. Empty: this edge takes no relay.
	RelayToken string
	// IdleTimeout closes a client connection that carried no byte either way for that
	// long, giving its stream back (0: never; the node's default is
	// config.DefaultTunnelIdleTimeout).
	IdleTimeout time.Duration
	// MaxConnsPerSource bounds the connections one client address holds open to one
	// service at once (0: no bound; the node's default is
	// config.DefaultTunnelMaxConnsPerSource).
	MaxConnsPerSource int
	// MaxPendingHellos bounds the connectors' connections that have not finished their
	// hello at once; past it a new one is refused at its first packet
	// (0: config.DefaultTunnelMaxPendingHellos).
	MaxPendingHellos int
	Log              *slog.Logger
	// Clock drives the edge's timers: the idle timeout, the queue timeout, the
	// refusals' log rate (nil: the real one). The network's deadlines (a hello's, a
	// pong's) are the connections' and stay on the real clock.
	Clock clock.Clock
}

// Refusal reasons, the keys of EdgeCounters.Refused.
const (
	RefusedUnknownToken = "unknown_token"
	RefusedOutOfScope   = "out_of_scope"
	RefusedTunnelLimit  = "tunnel_limit"
	RefusedTLS          = "tls"
	RefusedProtocol     = "protocol"
	// RefusedHelloLimit: MaxPendingHellos connections had not said hello yet; refused
	// at the connection's first packet, before its handshake.
	RefusedHelloLimit = "hello_limit"
	// RefusedNoOrigin: the hello announces a service that has origins on this edge
	// without naming one (a version 1 connector cannot).
	RefusedNoOrigin = "no_origin"
	// RefusedUnknownOrigin: the hello names an origin the service does not have here.
	RefusedUnknownOrigin = "unknown_origin"
	// RefusedNoProxyProtocol: the hello announces a service with proxy_protocol over a
	// protocol version that cannot ask for the PROXY header (before 3); or the
	// service got proxy_protocol while such a connector was attached.
	RefusedNoProxyProtocol = "no_proxy_protocol"
)

var refusalReasons = []string{RefusedUnknownToken, RefusedOutOfScope, RefusedTunnelLimit, RefusedTLS, RefusedProtocol, RefusedHelloLimit,
	RefusedNoOrigin, RefusedUnknownOrigin, RefusedNoProxyProtocol}

// maxLoggedString clips what a peer chose (an ALPN name, a message type, a service
// name) in a log line.
const maxLoggedString = 64

// Edge takes tunnels from connectors and joins client connections to them.
type Edge struct {
	cfg       EdgeConfig
	log       *slog.Logger
	transport *quic.Transport
	ln        *quic.Listener
	tcpLn     *listen.Listener // the same port over TCP (tcp.go)
	tlsConf   *tls.Config
	tokens    tokenSet
	// refusals and clientRefusals log the refused connectors and clients at a bounded
	// rate each: they are anyone's to cause
	refusals, clientRefusals *ratelog.Limiter
	// pendingHellos counts the connections between their first packet and the end of
	// their hello (at most cfg.MaxPendingHellos)
	pendingHellos atomic.Int64
	// stalls sees when this process did not run, which the tunnels' failure detectors
	// do not count against their connectors (watchdog.go)
	stalls *clock.StallMeter

	mu        sync.Mutex
	tunnels   map[uint64]*edgeTunnel
	byService map[string][]*edgeTunnel
	perToken  map[string]int // fingerprint → tunnels attached
	lastID    uint64
	notifier  // every attach, detach, drain, stream taken or released, and refusal

	// origins are the origins of the services that have some (SetServiceOrigins): a
	// connector of one of them must name one of these
	origins map[string][]string
	// shares are the site's steering shares of the services that have some here
	// (SetOriginShares), which pick the origin of each new stream (balance.go);
	// clients and originStreams count the client connections per service and the
	// streams per origin, steering's demand and load (steering.go)
	shares        map[string]*originShares
	clients       map[string]uint64
	originStreams map[serviceOrigin]uint64
	// proxyProtocols are the PROXY header versions of the services that have one
	// (SetProxyProtocols), read at every client's connection without e.mu
	proxyProtocols atomic.Pointer[map[string]config.ProxyProtocol]

	// the services' listeners (Serve), for their counters; those closed are added up
	// in listenersGone
	listeners     map[*listen.Listener]bool
	listenersGone listen.Stats

	refused         map[string]*atomic.Uint64 // fixed keys: refusalReasons
	clientsIdle     atomic.Uint64
	attached        atomic.Uint64
	gone            atomic.Uint64
	streams         atomic.Uint64
	streamRetries   atomic.Uint64
	clientsRefused  atomic.Uint64
	bytesToOrigin   atomic.Int64
	bytesFromOrigin atomic.Int64
}

// edgeTunnel is one connector's tunnel to this edge. The fields under "balance" are
// guarded by Edge.mu; the rest are set once or atomic.
type edgeTunnel struct {
	id                uint64
	connector, remote string
	token             string // fingerprint
	conn              tunnelConn
	control           *controlStream
	since             time.Time
	version           int // the protocol version negotiated (ALPN)

	// relay: the tunnel is another edge's (relay.go), used only when no connector's
	// own tunnel of the service has free capacity
	relay bool

	// balance
	services map[string]*serviceSlot
	open     int
	draining bool
	gone     bool

	streams                     atomic.Uint64
	bytesToOrigin, bytesFromOrg atomic.Int64
}

// serviceSlot is a tunnel's share of one service.
type serviceSlot struct {
	origin   string // the origin the connector serves it for; "" for none
	capacity int
	open     int
	current  int // smooth weighted round robin's running weight (balance.go)
}

// NewEdge reads the certificate and the tokens and listens for connectors; Run
// takes them.
func NewEdge(cfg EdgeConfig) (*Edge, error) {
	if cfg.MaxTunnelsPerToken == 0 {
		cfg.MaxTunnelsPerToken = DefaultMaxTunnelsPerToken
	}
	if cfg.MaxStreamsPerTunnel == 0 {
		cfg.MaxStreamsPerTunnel = DefaultMaxStreamsPerTunnel
	}
	if cfg.QueueTimeout == 0 {
		cfg.QueueTimeout = DefaultQueueTimeout
	}
	if cfg.MaxPendingHellos == 0 {
		cfg.MaxPendingHellos = config.DefaultTunnelMaxPendingHellos
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	cert, err := loadKeyPair(cfg.CertFile, cfg.KeyFile, cfg.Log)
	if err != nil {
		return nil, fmt.Errorf("tunnel certificate %s, key %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	tokens, err := LoadTokens(cfg.TokensFile, cfg.Log)
	if err != nil {
		return nil, err
	}
	e := &Edge{
		cfg:            cfg,
		log:            cfg.Log,
		stalls:         clock.NewStallMeter(clock.Real(), stallWatch), // real time, as the control stream's read deadlines
		tokens:         tokenSet(tokens),
		refusals:       ratelog.New(cfg.Log, cfg.Clock, time.Second, 10),
		clientRefusals: ratelog.New(cfg.Log, cfg.Clock, time.Second, 10),
		tunnels:        map[uint64]*edgeTunnel{},
		byService:      map[string][]*edgeTunnel{},
		perToken:       map[string]int{},
		listeners:      map[*listen.Listener]bool{},
		refused:        map[string]*atomic.Uint64{},
		shares:         map[string]*originShares{},
		clients:        map[string]uint64{},
		originStreams:  map[serviceOrigin]uint64{},
	}
	for _, r := range refusalReasons {
		e.refused[r] = new(atomic.Uint64)
	}
	tlsConf := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// the server's order decides: the newest version both sides speak
		NextProtos:                  alpns,
		DynamicRecordSizingDisabled: true, // TCP: the multiplexer's frames fill whole records
		// Counted here because a failed handshake never reaches Accept.
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if !slices.ContainsFunc(hello.SupportedProtos, func(p string) bool { return versionOf(p) != 0 }) {
				e.refuse(nil, remoteOf(hello), RefusedTLS, fmt.Sprintf("the peer speaks none of %s (ALPN %s)", alpns,
					ratelog.Clip(fmt.Sprintf("%q", hello.SupportedProtos), maxLoggedString)))
				return nil, errors.New("not a manifold tunnel connector")
			}
			return nil, nil
		},
	}
	e.tlsConf = tlsConf
	udp, tcp, err := listenBoth(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("tunnel listen %s: %w", cfg.Listen, err)
	}
	e.tcpLn = listen.Limit(tcp, listen.Limits{})
	// A transport of our own, so that Run's end frees the port at once (a listener
	// of quic.ListenAddr keeps it until its closed connections have drained).
	e.transport = &quic.Transport{Conn: udp, ConnContext: e.admitHello}
	e.ln, err = e.transport.Listen(tlsConf, &quic.Config{
		HandshakeIdleTimeout:  helloTimeout,
		MaxIdleTimeout:        idleTimeout,
		MaxIncomingStreams:    1, // the control stream: the edge opens all the others
		MaxIncomingUniStreams: -1,
	})
	if err != nil {
		udp.Close()
		tcp.Close()
		return nil, fmt.Errorf("tunnel listen %s: %w", cfg.Listen, err)
	}
	return e, nil
}

// loadKeyPair is tls.LoadX509KeyPair with the key read as a secret file: a warning
// on log when others may read it.
func loadKeyPair(certFile, keyFile string, log *slog.Logger) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := secretfile.Read(keyFile, log)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// pendingHello is a connection that counts in Edge.pendingHellos, from its first
// packet until its hello is answered or it closes, whichever comes first.
type pendingHello struct {
	e    *Edge
	once sync.Once
}

type pendingHelloKey struct{}

func (p *pendingHello) done() { p.once.Do(func() { p.e.pendingHellos.Add(-1) }) }

// admitHello is quic-go's ConnContext, called at a new connection's first packet:
// past MaxPendingHellos connections that have not said hello, the new one is refused
// there, before the handshake's work and goroutines.
func (e *Edge) admitHello(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	p, ok := e.admit(info.RemoteAddr.String())
	if !ok {
		return nil, errors.New("too many connections waiting for their hello")
	}
	context.AfterFunc(ctx, p.done) // closed, or the handshake failed, before the hello
	return context.WithValue(ctx, pendingHelloKey{}, p), nil
}

// admit takes a pending hello slot for a new connection from remote, over either
// transport; past MaxPendingHellos it refuses the connection, counted and logged.
func (e *Edge) admit(remote string) (*pendingHello, bool) {
	if e.pendingHellos.Add(1) > int64(e.cfg.MaxPendingHellos) {
		e.pendingHellos.Add(-1)
		e.refuse(nil, remote, RefusedHelloLimit,
			fmt.Sprintf("%d connections have not said hello yet, the limit", e.cfg.MaxPendingHellos))
		return nil, false
	}
	return &pendingHello{e: e}, true
}

// helloDone gives back conn's pending hello slot.
func helloDone(conn tunnelConn) {
	if p, ok := conn.Context().Value(pendingHelloKey{}).(*pendingHello); ok {
		p.done()
	}
}

func remoteOf(hello *tls.ClientHelloInfo) string {
	if hello.Conn != nil {
		return hello.Conn.RemoteAddr().String()
	}
	return ""
}

// Addr is where the edge listens for connectors.
func (e *Edge) Addr() net.Addr { return e.ln.Addr() }

// Run takes tunnels until ctx is done, then closes them all and returns once every
// tunnel's goroutine has ended.
func (e *Edge) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { e.stalls.Run(ctx.Done()) })
	wg.Go(func() { e.acceptTCP(ctx, &wg) })
	defer func() {
		e.ln.Close()
		e.tcpLn.Close()
		wg.Wait()
		e.transport.Close()
		e.transport.Conn.Close()
	}()
	for {
		conn, err := e.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("tunnel accept: %w", err)
		}
		wg.Go(func() { e.attach(ctx, quicConn{conn}) })
	}
}

// attach authenticates a new tunnel and serves its control stream until it ends.
func (e *Edge) attach(ctx context.Context, conn tunnelConn) {
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseWithError(codeDone, "edge stopping") })
	defer stop()
	t, hello := e.greet(ctx, conn)
	if t == nil {
		return
	}
	defer e.detach(t)
	e.log.Info("tunnel attached", "tunnel", t.id, "connector", t.connector, "remote", t.remote, "transport", conn.Transport(),
		"token", t.token, "services", hello.Services)
	if err := t.control.send(message{Type: "welcome", Tunnel: t.id}); err != nil {
		return
	}
	e.serveControl(t)
}

// greet waits up to helloTimeout for a new tunnel's hello and registers the tunnel;
// nil when it is refused. The connection holds its pending hello slot until then.
func (e *Edge) greet(ctx context.Context, conn tunnelConn) (*edgeTunnel, message) {
	defer helloDone(conn)
	remote := conn.RemoteAddr().String()
	deadline := time.Now().Add(helloTimeout)
	hctx, cancel := context.WithDeadline(ctx, deadline)
	s, err := conn.AcceptStream(hctx)
	cancel()
	if err != nil {
		e.refuse(conn, remote, RefusedProtocol, "no control stream: "+err.Error())
		return nil, message{}
	}
	control := &controlStream{s: s}
	hello, err := control.receive(deadline)
	version := versionOf(conn.Protocol())
	switch {
	case err != nil:
		e.refuse(conn, remote, RefusedProtocol, "no hello: "+err.Error())
		return nil, hello
	case hello.Type != "hello" || hello.Version != version:
		e.refuse(conn, remote, RefusedProtocol, fmt.Sprintf("expected hello of version %d (negotiated), got %q of version %d", version,
			ratelog.Clip(hello.Type, maxLoggedString), hello.Version))
		return nil, hello
	}
	t, reason, msg := e.register(conn, control, remote, version, hello)
	if t == nil {
		e.refuse(conn, remote, reason, msg)
	}
	return t, hello
}

// register checks a hello and, when it passes, makes the tunnel available to the
// balancer. Otherwise it returns the refusal's reason and message (without the token).
func (e *Edge) register(conn tunnelConn, control *controlStream, remote string, version int, hello message) (*edgeTunnel, string, string) {
	fp := fingerprint(hello.Token)
	relay := e.cfg.RelayToken != "" && subtle.ConstantTimeCompare([]byte(hello.Token), []byte(e.cfg.RelayToken)) == 1
	token, ok := e.tokens.lookup(hello.Token)
	if !ok && !relay {
		return nil, RefusedUnknownToken, "unknown token " + fp
	}
	if len(hello.Name) > 63 {
		return nil, RefusedProtocol, "a connector name of more than 63 bytes"
	}
	if len(hello.Services) == 0 && !relay { // an edge may have no connector yet
		return nil, RefusedProtocol, "the hello announces no service"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if msg := e.cannotWriteProxyHeaders(version, hello.Services); msg != "" && !relay {
		return nil, RefusedNoProxyProtocol, msg
	}
	services, reason, msg := slots(hello.Services, token, fp, relay, version, e.origins)
	if services == nil {
		return nil, reason, msg
	}
	if !relay && e.perToken[fp] >= e.cfg.MaxTunnelsPerToken { // a fleet's edges may be many
		return nil, RefusedTunnelLimit, fmt.Sprintf("token %s has %d tunnels attached already, the limit", fp, e.perToken[fp])
	}
	e.lastID++
	t := &edgeTunnel{
		id: e.lastID, connector: hello.Name, remote: remote, token: fp,
		conn: conn, control: control, since: time.Now(), version: version, services: services, relay: relay,
	}
	e.tunnels[t.id] = t
	e.perToken[fp]++
	for name := range services {
		e.byService[name] = append(e.byService[name], t)
	}
	e.attached.Add(1)
	e.notify()
	return t, "", ""
}

// slots checks the services a hello or an offer announces against the token's scope
// and the origins of the edge's services (another edge's relay may offer any
// service, for no origin) and makes their slots; nil, the refusal's reason and message
// when one does not pass. The caller holds e.mu (origins is e.origins).
func slots(announced []announcedService, token Token, fp string, relay bool, version int, origins map[string][]string) (map[string]*serviceSlot, string, string) {
	services := map[string]*serviceSlot{}
	for _, s := range announced {
		name, origin := ratelog.Clip(s.Name, maxLoggedString), ratelog.Clip(s.Origin, maxLoggedString)
		if !relay && !slices.Contains(token.Services, s.Name) {
			return nil, RefusedOutOfScope, fmt.Sprintf("token %s may not serve %q (its scope: %v)", fp, name, token.Services)
		}
		if s.Capacity < 1 || services[s.Name] != nil {
			return nil, RefusedProtocol, fmt.Sprintf("service %q announced twice or with capacity %d", name, s.Capacity)
		}
		switch {
		case s.Origin != "" && (relay || version < 2):
			return nil, RefusedProtocol, fmt.Sprintf("service %q announced with an origin in a version %d hello or an offer", name, version)
		case relay:
		case s.Origin == "" && len(origins[s.Name]) > 0:
			return nil, RefusedNoOrigin, fmt.Sprintf("service %q has origins here (%v): the connector must name the one it serves (origin: in its services entry, protocol version 2; this tunnel speaks %d)",
				name, origins[s.Name], version)
		case s.Origin != "" && !slices.Contains(token.Origins, s.Origin):
			return nil, RefusedOutOfScope, fmt.Sprintf("token %s may not serve origin %q (its origins: %v)", fp, origin, token.Origins)
		case s.Origin != "" && origins[s.Name] != nil && !slices.Contains(origins[s.Name], s.Origin):
			return nil, RefusedUnknownOrigin, fmt.Sprintf("service %q has no origin %q here (its origins: %v)", name, origin, origins[s.Name])
		}
		services[s.Name] = &serviceSlot{capacity: s.Capacity, origin: s.Origin}
	}
	return services, "", ""
}

// SetServiceOrigins tells the edge which services have origins, and which: a
// connector announcing one of them must name one of its origins. It applies to the
// hellos that follow; a tunnel attached before keeps its services. The edge keeps
// origins: the caller makes a new map for every call.
func (e *Edge) SetServiceOrigins(origins map[string][]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.origins = origins
}

// SetProxyProtocols tells the edge which services' connectors open the connection
// to the origin with a PROXY header, of which version; the streams that follow carry
// it. A connector whose protocol version cannot carry it (before 3) is refused such a
// service: at its hello, and, when it is attached already, now (its tunnel closed
// with the refusal; it dials again and is refused at its hello, saying why), rather
// than serve clients whose address its origin would not learn. The edge keeps
// protocols: the caller makes a new map for every call.
func (e *Edge) SetProxyProtocols(protocols map[string]config.ProxyProtocol) {
	e.mu.Lock() // a hello registered after this sees protocols; one before, below
	e.proxyProtocols.Store(&protocols)
	var refused []*edgeTunnel
	var msgs []string
	for _, t := range e.tunnels {
		if t.relay || t.version >= 3 {
			continue
		}
		var announced []announcedService
		for name := range t.services {
			announced = append(announced, announcedService{Name: name})
		}
		if msg := e.cannotWriteProxyHeaders(t.version, announced); msg != "" {
			refused, msgs = append(refused, t), append(msgs, msg)
		}
	}
	e.mu.Unlock()
	for i, t := range refused {
		e.refuse(t.conn, t.remote, RefusedNoProxyProtocol, msgs[i])
	}
}

// proxyProtocolOf is service's PROXY header version, "" for none.
func (e *Edge) proxyProtocolOf(service string) config.ProxyProtocol {
	if p := e.proxyProtocols.Load(); p != nil {
		return (*p)[service]
	}
	return ""
}

// cannotWriteProxyHeaders says why a connector of version cannot serve the first of
// services that has proxy_protocol; "" when it can serve them all.
func (e *Edge) cannotWriteProxyHeaders(version int, services []announcedService) string {
	if version >= 3 {
		return ""
	}
	for _, s := range services {
		if p := e.proxyProtocolOf(s.Name); p != "" {
			return fmt.Sprintf("service %q has proxy_protocol %s here: its connector must write the PROXY header, which needs protocol version 3 (this tunnel speaks %d; upgrade the connector)",
				ratelog.Clip(s.Name, maxLoggedString), p, version)
		}
	}
	return ""
}

// offer replaces the services a relay tunnel offers (another edge's connectors came
// or went); the streams open keep their slots until they end.
func (e *Edge) offer(t *edgeTunnel, announced []announcedService) error {
	e.mu.Lock()
	services, _, msg := slots(announced, Token{}, t.token, true, t.version, nil)
	if services == nil {
		e.mu.Unlock()
		return errors.New(msg)
	}
	for name, old := range t.services {
		if now, ok := services[name]; ok {
			now.open, now.current = old.open, old.current
		} else if old.open > 0 {
			services[name] = &serviceSlot{open: old.open} // capacity 0: no new stream
		}
	}
	e.unlist(t)
	t.services = services
	for name := range services {
		e.byService[name] = append(e.byService[name], t)
	}
	e.mu.Unlock()
	e.notify()
	return nil
}

// refuse counts and logs (at a bounded rate) a refused peer and closes its
// connection (conn is nil when the connection itself or its handshake is refused).
func (e *Edge) refuse(conn tunnelConn, remote, reason, msg string) {
	e.refused[reason].Add(1)
	e.notify()
	e.refusals.Warn("tunnel refused", "remote", remote, "reason", reason, "detail", msg)
	if conn != nil {
		_ = conn.CloseWithError(codeRefused, reason+": "+msg)
	}
}

// serveControl answers pings and drains until the tunnel closes or falls silent.
func (e *Edge) serveControl(t *edgeTunnel) {
	dog := newWatchdog(clock.Real(), e.stalls, t.conn) // real time: the stream's read deadlines are
	for {
		m, err := t.control.receive(dog.deadline())
		switch {
		case err == nil:
			dog.heard()
		case dog.gone(err):
			e.gone.Add(1)
			e.log.Warn("tunnel gone: no ping", "tunnel", t.id, "connector", t.connector, "for", deadAfter)
			_ = t.conn.CloseWithError(codeGone, "no ping")
			return
		case timedOut(err):
			continue // this process stalled, or the ping is behind the tunnel's data, which does arrive
		default:
			e.log.Info("tunnel closed", "tunnel", t.id, "connector", t.connector, "reason", err)
			return
		}
		switch m.Type {
		case "ping":
			err = t.control.send(message{Type: "pong", Seq: m.Seq})
		case "drain":
			e.drain(t)
		case "offer":
			if !t.relay {
				_ = t.conn.CloseWithError(codeBroken, "an offer from a connector: only edges relay")
				return
			}
			if err = e.offer(t, m.Services); err != nil {
				_ = t.conn.CloseWithError(codeBroken, err.Error())
				return
			}
		default:
			_ = t.conn.CloseWithError(codeBroken, "unexpected control message "+m.Type)
			return
		}
		if err != nil {
			return
		}
	}
}

// drain stops new streams over t and says drained once the open ones have ended.
func (e *Edge) drain(t *edgeTunnel) {
	e.mu.Lock()
	again := t.draining
	t.draining = true
	e.mu.Unlock()
	if again {
		return
	}
	e.notify()
	e.log.Info("tunnel draining", "tunnel", t.id, "connector", t.connector)
	go func() { // owned by the tunnel: ends with its connection at the latest
		for {
			changed := e.changed()
			e.mu.Lock()
			open := t.open
			e.mu.Unlock()
			if open == 0 {
				_ = t.control.send(message{Type: "drained"})
				return
			}
			select {
			case <-changed:
			case <-t.conn.Context().Done():
				return
			}
		}
	}()
}

// unlist takes t out of byService; the caller holds e.mu.
func (e *Edge) unlist(t *edgeTunnel) {
	for name := range t.services {
		e.byService[name] = slices.DeleteFunc(e.byService[name], func(o *edgeTunnel) bool { return o == t })
		if len(e.byService[name]) == 0 {
			delete(e.byService, name)
		}
	}
}

func (e *Edge) detach(t *edgeTunnel) {
	e.mu.Lock()
	t.gone = true
	delete(e.tunnels, t.id)
	if e.perToken[t.token]--; e.perToken[t.token] == 0 {
		delete(e.perToken, t.token)
	}
	e.unlist(t)
	e.mu.Unlock()
	e.notify()
	_ = t.conn.CloseWithError(codeDone, "")
	e.log.Info("tunnel detached", "tunnel", t.id, "connector", t.connector)
}
