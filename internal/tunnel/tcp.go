package tunnel

// The TCP transport: TLS 1.3 over kernel TCP, the streams multiplexed by mux.go. The
// edge serves it on its listen port beside QUIC (the same port number, TCP and UDP);
// a connector uses it when its transport is tcp, or auto and UDP does not pass.
//
//	connector, transport auto:
//	  QUIC dial, at most autoQUICTimeout ── answered (or refused, or a TLS failure) ──▶ QUIC
//	        │ no answer: UDP blocked somewhere
//	        ▼
//	  TCP dial ── up ──▶ TCP, and the next dials to that edge go to TCP for autoRemember
//
//	edge: accept TCP ── past MaxPendingHellos connections without hello: closed, counted
//	                 └─▶ TLS handshake (helloTimeout) ─▶ mux ─▶ attach, as over QUIC

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

const (
	// autoQUICTimeout is how long an auto connector waits for a QUIC handshake before
	// it takes UDP for blocked and dials TCP: a handshake takes a round trip or two,
	// far less on any path a tunnel is worth running over.
	autoQUICTimeout = 2 * time.Second
	// autoRemember is how long an auto connector keeps dialling an edge over TCP after
	// QUIC failed to reach it, before it tries QUIC again (a network's rules change
	// seldom; a connector reconnecting after each short outage should not pay the
	// QUIC timeout every time).
	autoRemember = 10 * time.Minute
)

// dialTransport dials edge over the connector's transport; for auto, QUIC first and
// TCP where QUIC has no answer.
func (c *Connector) dialTransport(ctx context.Context, link *edgeLink, tlsConf *tls.Config) (tunnelConn, error) {
	switch c.cfg.Transport {
	case TransportTCP:
		return c.dialTCP(ctx, link.edge, tlsConf)
	case TransportQUIC:
		return c.dialQUIC(ctx, link.edge, tlsConf, dialTimeout)
	}
	c.mu.Lock()
	tcpUntil := link.tcpUntil
	c.mu.Unlock()
	if c.clock.Now().Before(tcpUntil) {
		return c.dialTCP(ctx, link.edge, tlsConf)
	}
	conn, err := c.dialQUIC(ctx, link.edge, tlsConf, autoQUICTimeout)
	if err == nil || !udpBlocked(err) || ctx.Err() != nil {
		return conn, err
	}
	conn, tcpErr := c.dialTCP(ctx, link.edge, tlsConf)
	if tcpErr != nil {
		return nil, fmt.Errorf("over QUIC: %w; over TCP: %w", err, tcpErr)
	}
	c.log.Warn("QUIC had no answer from the edge: the tunnel runs over TCP", "edge", link.edge, "quic_error", err,
		"tcp_for", autoRemember)
	c.mu.Lock()
	link.tcpUntil = c.clock.Now().Add(autoRemember)
	c.mu.Unlock()
	return conn, nil
}

// udpBlocked says a QUIC dial failed without an answer from the edge (a timeout, a
// socket error): not a TLS failure or a refusal, which TCP would meet too.
func udpBlocked(err error) bool {
	var te *quic.TransportError
	var ae *quic.ApplicationError
	return !errors.As(err, &te) && !errors.As(err, &ae)
}

func (c *Connector) dialQUIC(ctx context.Context, edge string, tlsConf *tls.Config, timeout time.Duration) (tunnelConn, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := quic.DialAddr(dctx, edge, tlsConf, c.quicConf)
	if err != nil {
		var te *quic.TransportError
		if errors.As(err, &te) && te.ErrorCode >= 0x100 && te.ErrorCode < 0x200 { // a TLS alert
			c.tlsFailures.Add(1)
		}
		return nil, err
	}
	return quicConn{conn}, nil
}

func (c *Connector) dialTCP(ctx context.Context, edge string, tlsConf *tls.Config) (tunnelConn, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	dialer := net.Dialer{}
	raw, err := dialer.DialContext(dctx, "tcp", edge)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, tlsConf)
	if err := conn.HandshakeContext(dctx); err != nil {
		raw.Close()
		var alert tls.AlertError
		var verify *tls.CertificateVerificationError
		if errors.As(err, &alert) || errors.As(err, &verify) {
			c.tlsFailures.Add(1)
		}
		return nil, err
	}
	protocol := conn.ConnectionState().NegotiatedProtocol
	if versionOf(protocol) == 0 {
		raw.Close()
		return nil, fmt.Errorf("the edge negotiated ALPN %q, none of %v", protocol, c.protocols)
	}
	return newMux(context.Background(), conn, true, protocol, int(c.quicConf.MaxIncomingStreams)), nil
}

// listenBoth binds the UDP port of addr and the TCP port of the same number: the
// edge's listen port for both transports. With port 0, the kernel's choice for UDP
// may be taken for TCP: a few other choices are tried.
func listenBoth(addr string) (*net.UDPConn, net.Listener, error) {
	udpAddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, nil, err
	}
	for attempt := 0; ; attempt++ {
		udp, err := net.ListenUDP("udp", udpAddr)
		if err != nil {
			return nil, nil, err
		}
		bound := udp.LocalAddr().(*net.UDPAddr)
		tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: udpAddr.IP, Port: bound.Port, Zone: udpAddr.Zone})
		if err == nil {
			return udp, tcp, nil
		}
		udp.Close()
		if udpAddr.Port != 0 || attempt == 8 {
			return nil, nil, fmt.Errorf("tcp: %w", err)
		}
	}
}

// acceptTCP takes the connectors that dial over TCP until the listener closes; each
// connection's goroutine is on wg.
func (e *Edge) acceptTCP(ctx context.Context, wg interface{ Go(func()) }) {
	for {
		raw, err := e.tcpLn.Accept()
		if err != nil {
			return // closed by Run's end (accept errors that pass are waited out by listen)
		}
		p, ok := e.admit(raw.RemoteAddr().String())
		if !ok {
			if tcp, ok := tcpConn(raw); ok {
				_ = tcp.SetLinger(0) // no TIME_WAIT for a peer flooding the port
			}
			raw.Close()
			continue
		}
		wg.Go(func() {
			conn, err := e.handshakeTCP(ctx, raw, p)
			if err != nil {
				p.done()
				raw.Close()
				return
			}
			e.attach(ctx, conn)
		})
	}
}

// handshakeTCP does the TLS handshake of a connector's TCP connection, within
// helloTimeout, and runs the multiplexer over it; the connection holds its pending
// hello slot p until its hello is answered or it closes.
func (e *Edge) handshakeTCP(ctx context.Context, raw net.Conn, p *pendingHello) (tunnelConn, error) {
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	conn := tls.Server(raw, e.tlsConf)
	if err := conn.HandshakeContext(hctx); err != nil {
		return nil, err
	}
	m := newMux(context.WithValue(context.Background(), pendingHelloKey{}, p), conn, false,
		conn.ConnectionState().NegotiatedProtocol, 1) // the control stream: the edge opens all the others
	context.AfterFunc(m.Context(), p.done)
	return m, nil
}
