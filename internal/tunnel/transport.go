package tunnel

// The tunnel's transports: QUIC (quic-go's streams) and TLS 1.3 over TCP with the
// multiplexer of mux.go (tcp.go). The protocol above them (hello, control stream,
// stream headers, the edge's balancing) is one, written against tunnelConn and
// tunnelStream; their methods are named as quic-go's so that a QUIC connection is one
// with a thin wrapper.

import (
	"context"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// The transports a connector may use (its config's transport).
const (
	TransportAuto = "auto" // QUIC, TCP where UDP does not pass (tcp.go, "auto")
	TransportQUIC = "quic"
	TransportTCP  = "tcp"
)

// tunnelConn is one tunnel's connection.
type tunnelConn interface {
	// OpenStreamSync opens a stream, waiting for the peer's stream limit over QUIC.
	OpenStreamSync(ctx context.Context) (tunnelStream, error)
	AcceptStream(ctx context.Context) (tunnelStream, error)
	// CloseWithError ends the connection; the peer's calls then fail with a remote
	// *quic.ApplicationError of code and reason, whichever the transport.
	CloseWithError(code quic.ApplicationErrorCode, reason string) error
	// Context is done when the connection has ended; it holds the values of the
	// connection's admission (pendingHello).
	Context() context.Context
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	Protocol() string   // the ALPN name negotiated
	Transport() string  // TransportQUIC or TransportTCP
	RTT() time.Duration // the transport's smoothed RTT
}

// tunnelStream is one stream: a client connection or the control stream.
type tunnelStream interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	// Close ends the sending side; CancelRead and CancelWrite abort.
	Close() error
	CancelRead(quic.StreamErrorCode)
	CancelWrite(quic.StreamErrorCode)
	SetReadDeadline(t time.Time) error
	// SetWriteDeadline bounds a Write's wait for the peer (its flow control);
	// SetDeadline sets both.
	SetWriteDeadline(t time.Time) error
	SetDeadline(t time.Time) error
}

// quicConn is a QUIC connection as a tunnelConn.
type quicConn struct{ *quic.Conn }

func (c quicConn) OpenStreamSync(ctx context.Context) (tunnelStream, error) {
	s, err := c.Conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (c quicConn) AcceptStream(ctx context.Context) (tunnelStream, error) {
	s, err := c.Conn.AcceptStream(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (c quicConn) Protocol() string   { return c.ConnectionState().TLS.NegotiatedProtocol }
func (c quicConn) Transport() string  { return TransportQUIC }
func (c quicConn) RTT() time.Duration { return c.ConnectionStats().SmoothedRTT }
