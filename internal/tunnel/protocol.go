package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/manifoldlb/manifold/internal/decode"
)

const (
	alpn            = "manifold-tunnel/1"
	protocolVersion = 1

	// pingInterval and deadAfter make a vanished peer gone in under a second: the
	// issue's bound for a connector that disappears. Three pings may be lost first.
	pingInterval = 200 * time.Millisecond
	deadAfter    = 800 * time.Millisecond

	// idleTimeout is QUIC's own backstop behind the pings (quic-go's floor is 5 s).
	idleTimeout = 5 * time.Second
	// helloTimeout bounds how long an edge waits for a new tunnel to say hello once
	// its handshake is done, and the handshake's idle time: a hello takes a round trip
	// or two, and a connection that has not said hello holds one of the edge's
	// MaxPendingHellos slots, which a silent peer should give back soon.
	helloTimeout = 3 * time.Second
	// maxFrame bounds a control message, read before the peer is authenticated.
	maxFrame = 16 << 10

	ackOK     byte = 0
	ackFailed byte = 1

	// Application error codes a tunnel is closed with.
	codeDone    quic.ApplicationErrorCode = 0 // drained, or the side is stopping
	codeRefused quic.ApplicationErrorCode = 1 // the edge refused the connector: the reason follows
	codeGone    quic.ApplicationErrorCode = 2 // no ping or pong for deadAfter
	codeBroken  quic.ApplicationErrorCode = 3 // the peer broke the protocol

	// Stream error codes.
	streamAborted quic.StreamErrorCode = 1
)

// message is every control message; Type says which fields are set.
type message struct {
	Type string `json:"type"` // hello welcome ping pong drain drained

	// hello
	Version  int                `json:"version,omitempty"`
	Token    string             `json:"token,omitempty"`
	Name     string             `json:"name,omitempty"`
	Services []announcedService `json:"services,omitempty"`

	// welcome
	Tunnel uint64 `json:"tunnel,omitempty"` // the edge's id of the tunnel, for logs on both ends

	// ping, pong
	Seq uint64 `json:"seq,omitempty"`
}

type announcedService struct {
	Name     string `json:"name"`
	Capacity int    `json:"capacity"`
}

// controlStream sends and receives the control messages of one tunnel.
type controlStream struct {
	s  *quic.Stream
	mu sync.Mutex // writers: the ping loop, the drain request, the pong answers
}

func (c *controlStream) send(m message) error {
	frame, err := m.frame()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.s.Write(frame)
	return err
}

// receive reads the next message, failing when none arrives before deadline.
func (c *controlStream) receive(deadline time.Time) (message, error) {
	var m message
	if err := c.s.SetReadDeadline(deadline); err != nil {
		return m, err
	}
	return readMessage(c.s)
}

// frame encodes a control message as it is sent: its length, then its JSON.
func (m message) frame() ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	return append(frame, body...), nil
}

// readMessage reads one control message: its length is checked against maxFrame
// before anything is allocated (the peer may not be authenticated yet).
func readMessage(r io.Reader) (message, error) {
	var m message
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return m, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxFrame {
		return m, fmt.Errorf("control message of %d bytes, more than the limit of %d", n, maxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return m, err
	}
	if err := decode.JSONInto(body, maxFrame, &m); err != nil {
		return m, fmt.Errorf("control message: %w", err)
	}
	return m, nil
}

// streamHeader opens every data stream: which service, and for whom.
type streamHeader struct {
	Service string
	Client  string // the client's address, as the edge saw it
}

func (h streamHeader) encode() ([]byte, error) {
	if len(h.Service) > 255 || len(h.Client) > 255 {
		return nil, errors.New("stream header field longer than 255 bytes")
	}
	b := append([]byte{byte(len(h.Service))}, h.Service...)
	b = append(b, byte(len(h.Client)))
	return append(b, h.Client...), nil
}

func readStreamHeader(r io.Reader) (streamHeader, error) {
	service, err := readShortString(r)
	if err != nil {
		return streamHeader{}, err
	}
	client, err := readShortString(r)
	return streamHeader{Service: service, Client: client}, err
}

// readShortString reads a length byte and that many bytes (at most 255: the length
// bounds the allocation).
func readShortString(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	b := make([]byte, n[0])
	_, err := io.ReadFull(r, b)
	return string(b), err
}

// notifier wakes everyone waiting for a change of state (a tunnel attached, a stream
// ended, a tunnel gone): the balancer waiting for free capacity, and tests.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

// changed returns a channel closed at the next change.
func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
