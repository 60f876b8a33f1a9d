package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
	"github.com/manifoldlb/manifold/internal/ratelog"
)

// The protocol's versions, negotiated by ALPN (doc.go, "Protocol"): the edge offers
// both and takes the newest the connector offers, so an older connector keeps working.
const (
	alpnV1 = "manifold-tunnel/1"
	alpnV2 = "manifold-tunnel/2" // origins in the hello; addresses and first bytes in the stream header
	alpnV3 = "manifold-tunnel/3" // the PROXY header the connector writes, in the stream header

	protocolVersion = 3 // the newest, which this side speaks by default

	// maxInitialData bounds the client's first bytes a v2 stream header carries: what
	// an edge keeps to retry them on another connector.
	maxInitialData = 64 << 10

	// pingInterval and deadAfter make a vanished peer gone in under a second: the
	// issue's bound for a connector that disappears. Three pings may be lost first.
	pingInterval = 200 * time.Millisecond
	deadAfter    = 800 * time.Millisecond
	// stallWatch is the wake-up of each side's stall meter: a stall of this process
	// longer than two of them is not counted against its peers (watchdog.go).
	stallWatch = 100 * time.Millisecond

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

// alpns are the protocols a side offers, newest first.
var alpns = []string{alpnV3, alpnV2, alpnV1}

// versionOf is the protocol version of a negotiated ALPN name, 0 for none of ours.
func versionOf(alpn string) int {
	switch alpn {
	case alpnV1:
		return 1
	case alpnV2:
		return 2
	case alpnV3:
		return 3
	}
	return 0
}

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
	// Origin (v2) is the origin the connector serves the service for: one of the
	// service's origins on the edge, and of its token's.
	Origin string `json:"origin,omitempty"`
}

// controlStream sends and receives the control messages of one tunnel.
type controlStream struct {
	s  tunnelStream
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
	Client  netip.AddrPort // the client's address and port, as the edge saw it
	// VIP (v2) is the address and port the client connected to; Data (v2), the
	// client's first bytes, sent with the header (at most maxInitialData).
	VIP  netip.AddrPort
	Data []byte
	// Proxy (v3) is the PROXY protocol header the connector writes to the origin
	// before the client's bytes, "" for none: the service's proxy_protocol.
	Proxy config.ProxyProtocol
}

// proxyCodes are the PROXY header versions as a v3 stream header carries them, by
// their byte (0: none).
var proxyCodes = []config.ProxyProtocol{"", config.ProxyV1, config.ProxyV2}

// encode writes the header as version speaks it:
//
//	v1: service (length byte, bytes), client as text "addr:port" (length byte, bytes)
//	v2: service (length byte, bytes), client (address, port), vip (address, port),
//	    initial data (4-byte big-endian length, at most maxInitialData, bytes)
//	v3: v2's, with a byte before the initial data: the PROXY header's version
//	    (0: none, 1, 2)
//
// an address being a family byte (0: none, 4, 6) and its 0, 4 or 16 bytes, a port
// two bytes big-endian. v1 has no VIP and no data, v1 and v2 no PROXY header: a
// header that needs them fails (a connector that cannot write the PROXY header must
// not serve the stream without it).
func (h streamHeader) encode(version int) ([]byte, error) {
	if len(h.Service) > 255 {
		return nil, errors.New("stream header: service name longer than 255 bytes")
	}
	proxy := slices.Index(proxyCodes, h.Proxy)
	switch {
	case proxy < 0:
		return nil, fmt.Errorf("stream header: PROXY protocol version %q", h.Proxy)
	case proxy > 0 && version < 3:
		return nil, fmt.Errorf("stream header: the service has proxy_protocol %s, which a connector of protocol version %d cannot write (version 3 can)", h.Proxy, version)
	}
	b := append(make([]byte, 0, 64+len(h.Data)), byte(len(h.Service)))
	b = append(b, h.Service...)
	if version == 1 {
		if len(h.Data) > 0 {
			return nil, errors.New("stream header: version 1 carries no initial data")
		}
		client := ""
		if h.Client.IsValid() {
			client = h.Client.String()
		}
		b = append(b, byte(len(client)))
		return append(b, client...), nil
	}
	if len(h.Data) > maxInitialData {
		return nil, fmt.Errorf("stream header: %d bytes of initial data, more than the limit of %d", len(h.Data), maxInitialData)
	}
	b = appendAddrPort(b, h.Client)
	b = appendAddrPort(b, h.VIP)
	if version >= 3 {
		b = append(b, byte(proxy))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(h.Data)))
	return append(b, h.Data...), nil
}

func appendAddrPort(b []byte, ap netip.AddrPort) []byte {
	switch a := ap.Addr(); {
	case !a.IsValid():
		b = append(b, 0)
	case a.Is4():
		b = append(b, 4)
		b = append(b, a.AsSlice()...)
	default:
		b = append(b, 6)
		b = append(b, a.WithZone("").AsSlice()...)
	}
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

// readStreamHeader reads a header of version; every length is checked before what
// it sizes is allocated (a service name 255 bytes, the initial data maxInitialData).
func readStreamHeader(r io.Reader, version int) (streamHeader, error) {
	var h streamHeader
	var err error
	if h.Service, err = readShortString(r); err != nil {
		return h, err
	}
	if version == 1 {
		client, err := readShortString(r)
		if err != nil || client == "" {
			return h, err
		}
		if h.Client, err = netip.ParseAddrPort(client); err != nil {
			return h, fmt.Errorf("stream header: client %q: %w", ratelog.Clip(client, maxLoggedString), err)
		}
		return h, nil
	}
	if h.Client, err = readAddrPort(r); err != nil {
		return h, err
	}
	if h.VIP, err = readAddrPort(r); err != nil {
		return h, err
	}
	if version >= 3 {
		var proxy [1]byte
		if _, err := io.ReadFull(r, proxy[:]); err != nil {
			return h, err
		}
		if int(proxy[0]) >= len(proxyCodes) {
			return h, fmt.Errorf("stream header: PROXY protocol version %d, not 0, 1 or 2", proxy[0])
		}
		h.Proxy = proxyCodes[proxy[0]]
	}
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return h, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxInitialData {
		return h, fmt.Errorf("stream header: %d bytes of initial data, more than the limit of %d", n, maxInitialData)
	}
	if n > 0 {
		h.Data = make([]byte, n)
		if _, err := io.ReadFull(r, h.Data); err != nil {
			return h, err
		}
	}
	return h, nil
}

func readAddrPort(r io.Reader) (netip.AddrPort, error) {
	var family [1]byte
	if _, err := io.ReadFull(r, family[:]); err != nil {
		return netip.AddrPort{}, err
	}
	var b [16 + 2]byte
	var size int
	switch family[0] {
	case 0:
	case 4:
		size = 4
	case 6:
		size = 16
	default:
		return netip.AddrPort{}, fmt.Errorf("stream header: address family %d, not 0, 4 or 6", family[0])
	}
	if _, err := io.ReadFull(r, b[:size+2]); err != nil {
		return netip.AddrPort{}, err
	}
	port := binary.BigEndian.Uint16(b[size:])
	if size == 0 {
		if port != 0 {
			return netip.AddrPort{}, errors.New("stream header: a port without an address")
		}
		return netip.AddrPort{}, nil
	}
	a, _ := netip.AddrFromSlice(b[:size])
	return netip.AddrPortFrom(a, port), nil
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
