package tunnel

// Relays between the edges of a fleet: an edge with connectors keeps a tunnel to
// every other edge, as a connector would, and offers on it the services of its own
// connectors. An edge that a client reaches with no connector of the client's service
// (or none with free capacity) opens the stream over that relay tunnel instead; the
// relaying edge joins it to one of its connectors' tunnels. One hop at most: a relay
// offers only its own connectors, and a relayed stream goes to those only.
//
//	edge A (no connector) ══ relay tunnel (dialled by B, token: the fleet's relay token) ══ edge B ══ tunnel ══ connector
//	                         offer: B's services and their capacity, sent at every change

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/manifoldlb/manifold/internal/secretfile"
)

// RelayConfig is how an edge relays to the other edges of its fleet.
type RelayConfig struct {
	Name  string         // this edge's name, as the others show its relay tunnel
	Token string         // the fleet's relay token (the others' EdgeConfig.RelayToken)
	CAs   *x509.CertPool // the other edges' certificates must chain to one of these
	Log   *slog.Logger
}

// Relay keeps a relay tunnel from an edge to each of its peers.
type Relay struct {
	edge *Edge
	cfg  RelayConfig

	mu    sync.Mutex
	peers map[string]context.CancelFunc // by peer address
	wg    sync.WaitGroup
}

// NewRelay relays the services of e's connectors to the peers SetPeers names.
func NewRelay(e *Edge, cfg RelayConfig) *Relay {
	return &Relay{edge: e, cfg: cfg, peers: map[string]context.CancelFunc{}}
}

// SetPeers makes the relay keep a tunnel to each of peers (host:port of their
// tunnels.listen) and to no other; a peer dropped drains its tunnel.
func (r *Relay) SetPeers(ctx context.Context, peers []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, cancel := range r.peers {
		if !slices.Contains(peers, addr) {
			cancel()
			delete(r.peers, addr)
		}
	}
	for _, addr := range peers {
		if _, ok := r.peers[addr]; ok {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		r.peers[addr] = cancel
		c := NewConnector(&ConnectorConfig{Name: r.cfg.Name, Edges: []string{addr}, Token: r.cfg.Token, CAs: r.cfg.CAs,
			DrainTime: r.edge.cfg.QueueTimeout + ackTimeout}, r.cfg.Log.With("relay_to", addr))
		c.quicConf.MaxIncomingStreams = int64(r.edge.cfg.MaxStreamsPerTunnel)
		c.origin = r.edge.relayed
		c.offers = r.edge.localOffer
		// owned by the relay: ends when its peer is dropped or ctx is done; Wait waits
		r.wg.Go(func() { _ = c.Run(pctx) })
	}
}

// Wait returns once every relay tunnel has ended (after ctx of SetPeers is done).
func (r *Relay) Wait() { r.wg.Wait() }

// localOffer is what a relay tunnel offers: the services of this edge's connectors
// (not of other relays) with their capacity added up, and a channel closed at the
// edge's next change.
func (e *Edge) localOffer() ([]announcedService, <-chan struct{}) {
	changed := e.changed()
	e.mu.Lock()
	defer e.mu.Unlock()
	capacity := map[string]int{}
	for _, t := range e.tunnels {
		if t.relay || t.draining || t.gone {
			continue
		}
		for name, slot := range t.services {
			capacity[name] += slot.capacity
		}
	}
	out := make([]announcedService, 0, len(capacity))
	for name, c := range capacity {
		out = append(out, announcedService{Name: name, Capacity: c})
	}
	slices.SortFunc(out, func(a, b announcedService) int { return strings.Compare(a.Name, b.Name) })
	return out, changed
}

// relayed joins a stream another edge relayed to one of this edge's connectors:
// the relay tunnel's "origin".
func (e *Edge) relayed(h streamHeader) (net.Conn, error) {
	// the client's first bytes, if the header carried any, go through the stream
	// this returns (serveStream writes them to its "origin"), not twice
	h.Data = nil
	t, slot, s := e.connect(context.Background(), h, false)
	if t == nil {
		return nil, errors.New("no connector of the service with free capacity on this edge")
	}
	return &streamConn{tunnelStream: s, tunnel: t, release: func() { e.release(t, slot) }}, nil
}

// streamConn is a stream to a connector seen as the connection a relay tunnel's
// stream is joined to; its bytes count on the connector's tunnel.
type streamConn struct {
	tunnelStream
	tunnel   *edgeTunnel
	release  func()
	once     sync.Once
	finished atomic.Bool // CloseWrite came first: Close ends nothing in flight
}

func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.tunnelStream.Read(b)
	c.tunnel.bytesFromOrg.Add(int64(n))
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) {
	n, err := c.tunnelStream.Write(b)
	c.tunnel.bytesToOrigin.Add(int64(n))
	return n, err
}

func (c *streamConn) CloseWrite() error {
	c.finished.Store(true)
	return c.tunnelStream.Close()
}

func (c *streamConn) Close() error {
	c.once.Do(func() {
		if !c.finished.Load() {
			c.tunnelStream.CancelWrite(streamAborted)
		}
		c.tunnelStream.CancelRead(streamAborted)
		c.release()
	})
	return nil
}

func (c *streamConn) LocalAddr() net.Addr  { return c.tunnel.conn.LocalAddr() }
func (c *streamConn) RemoteAddr() net.Addr { return c.tunnel.conn.RemoteAddr() }

// LoadCAs reads a PEM file of CA certificates (an edge's tunnels.ca_file).
func LoadCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// LoadRelayToken reads the fleet's relay token from a file (surrounding whitespace
// trimmed); it must be at least MinTokenLen long. A file that others may read is
// warned of on log.
func LoadRelayToken(path string, log *slog.Logger) (string, error) {
	data, err := secretfile.Read(path, log)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if len(token) < MinTokenLen {
		return "", fmt.Errorf("%s holds no token of at least %d characters", path, MinTokenLen)
	}
	return token, nil
}
