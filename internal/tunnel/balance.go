package tunnel

// Client connections: each is joined to a new stream over the tunnel of one of its
// service's connectors: of an origin chosen by the site's steering shares (when the
// service has some here), then by free capacity within it.
//
//	Serve ── accept ──▶ join: pick (origin, then tunnel) ──▶ openStream (header, wait for the ack) ──▶ proxy
//	                           ▲              │ failed before any client byte was sent
//	                           └── another ───┘ connector, the failed one excluded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/listen"
)

const (
	// originDialTimeout bounds the connector's dial of its origin; ackTimeout, the
	// edge's wait for the connector's answer to a new stream.
	originDialTimeout = 5 * time.Second
	ackTimeout        = originDialTimeout + 5*time.Second
)

// Serve joins the client connections ln accepts to streams of service until ctx is
// done or ln is closed. It returns once every one of them has ended: when ctx is
// done, those still open are cut. The listener's bounds are listen's: an accept error
// that passes (out of descriptors) is waited out, never the end of the service.
//
// A client address holds at most MaxConnsPerSource connections at once, and a
// connection idle for IdleTimeout is closed (idle.go).
func (e *Edge) Serve(ctx context.Context, service string, raw net.Listener) error {
	ln := listen.Limit(raw, listen.Limits{MaxConnsPerSource: e.cfg.MaxConnsPerSource})
	e.addListener(ln)
	defer e.removeListener(ln)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	idle := newIdleCutter(e.cfg.Clock, e.cfg.IdleTimeout, func() {
		e.clientsIdle.Add(1)
		e.notify()
	})
	defer idle.stop() // after every join has ended: defers run last first
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("service %s: accept: %w", service, err)
		}
		wg.Go(func() { e.join(ctx, service, conn, idle) })
	}
}

func (e *Edge) join(ctx context.Context, service string, client net.Conn, idle *idleCutter) {
	defer client.Close()
	stop := context.AfterFunc(ctx, func() { client.Close() })
	defer stop()
	// watched from the start: a connection that waits for a connector is not
	// moving bytes either (QueueTimeout ends that wait far sooner anyway)
	seen := idle.add(client)
	defer idle.remove(seen)
	e.countClient(service)
	h := streamHeader{Service: service, Client: addrPortOf(client.RemoteAddr()), VIP: addrPortOf(client.LocalAddr()), Data: firstBytes(client),
		Proxy: e.proxyProtocolOf(service)}
	t, slot, s := e.connect(ctx, h, true)
	if t == nil {
		return
	}
	toOrigin := byteCounters{&t.bytesToOrigin, &e.bytesToOrigin}
	toOrigin.add(len(h.Data))
	_ = proxy(client, s, toOrigin, byteCounters{&t.bytesFromOrg, &e.bytesFromOrigin}, seen)
	e.release(t, slot)
}

// connect opens a stream of service for a client over a tunnel with free capacity
// (another edge's relay too when relays): it waits up to QueueTimeout for one, and
// tries another when a stream fails before carrying a byte. The caller releases the
// slot once the stream has ended; nil when none could be had.
func (e *Edge) connect(ctx context.Context, h streamHeader, relays bool) (*edgeTunnel, *serviceSlot, tunnelStream) {
	service := h.Service
	tried := map[*edgeTunnel]bool{}
	deadline := e.cfg.Clock.NewTimer(e.cfg.QueueTimeout)
	defer deadline.Stop()
	for {
		t, slot := e.pick(ctx, service, tried, relays, deadline.C())
		if t == nil {
			e.clientsRefused.Add(1)
			e.notify()
			e.clientRefusals.Warn("client refused: no connector with free capacity", "service", service,
				"client", h.Client, "waited", e.cfg.QueueTimeout)
			return nil, nil, nil
		}
		s, err := openStream(t.conn, t.version, h)
		if err != nil {
			e.release(t, slot)
			tried[t] = true
			e.streamRetries.Add(1)
			e.log.Warn("stream failed before the client's first byte: trying another connector",
				"service", service, "tunnel", t.id, "connector", t.connector, "error", err)
			continue
		}
		t.streams.Add(1)
		e.streams.Add(1)
		if slot.origin != "" && !t.relay {
			e.countStream(service, slot.origin)
		}
		return t, slot, s
	}
}

// pick waits for a tunnel of service with free capacity (not in tried) and takes one
// stream of it; nil when ctx is done or timeout fires first.
func (e *Edge) pick(ctx context.Context, service string, tried map[*edgeTunnel]bool, relays bool, timeout <-chan time.Time) (*edgeTunnel, *serviceSlot) {
	for {
		changed := e.changed()
		e.mu.Lock()
		t, slot := e.pickLocked(service, tried, relays)
		e.mu.Unlock()
		if t != nil {
			e.notify()
			return t, slot
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// pickLocked spreads new streams over the tunnels. When the site has shares for the
// service (SetOriginShares), an origin is chosen first, by the shares (pickOrigin),
// then a tunnel of that origin; otherwise any tunnel of the service. Among the
// tunnels it goes by free capacity (smooth weighted round robin, weights = free
// streams now): a connector with twice the free capacity gets twice the new streams,
// a full, draining or gone one none, and the choice is deterministic for a given
// history. Another edge's relay is picked only when no connector's own tunnel (of an
// origin with a share) has room: a hop costs a round trip, and the other edge then
// picks by its own site's shares.
func (e *Edge) pickLocked(service string, tried map[*edgeTunnel]bool, relays bool) (*edgeTunnel, *serviceSlot) {
	origin, steered := e.pickOrigin(service, tried)
	if !steered || origin != "" {
		if t, slot := e.pickAmong(service, tried, false, origin); t != nil {
			return t, slot
		}
	}
	if !relays {
		return nil, nil
	}
	return e.pickAmong(service, tried, true, "")
}

// pickOrigin chooses the origin of a new stream of service by the site's shares:
// smooth weighted round robin over the origins that have a share and a tunnel with
// room, weights = the shares, so that over many streams each origin takes its share
// of them — and the share of an origin without room goes to the others in proportion
// to theirs rather than waiting. steered is false when the service has no shares here
// (any tunnel goes); origin is "" when steered and no origin with a share has room.
// The caller holds e.mu.
func (e *Edge) pickOrigin(service string, tried map[*edgeTunnel]bool) (origin string, steered bool) {
	sh := e.shares[service]
	if sh == nil {
		return "", false
	}
	roomy := map[string]bool{}
	for _, t := range e.byService[service] {
		if e.room(t, service, tried, false) > 0 {
			roomy[t.services[service].origin] = true
		}
	}
	total, best := 0.0, -1
	for i, o := range sh.origins {
		if sh.share[i] <= 0 || !roomy[o] {
			continue
		}
		sh.current[i] += sh.share[i]
		total += sh.share[i]
		if best < 0 || sh.current[i] > sh.current[best] {
			best = i
		}
	}
	if best < 0 {
		return "", true
	}
	sh.current[best] -= total
	return sh.origins[best], true
}

// pickAmong takes a stream of the tunnel of service (of origin, unless "") with the
// most free capacity by smooth weighted round robin; relays: among relay tunnels only,
// else among connectors' only. The caller holds e.mu.
func (e *Edge) pickAmong(service string, tried map[*edgeTunnel]bool, relays bool, origin string) (*edgeTunnel, *serviceSlot) {
	var best *edgeTunnel
	var bestSlot *serviceSlot
	total := 0
	for _, t := range e.byService[service] {
		slot := t.services[service]
		if origin != "" && slot.origin != origin {
			continue
		}
		free := e.room(t, service, tried, relays)
		if free <= 0 {
			continue
		}
		slot.current += free
		total += free
		if best == nil || slot.current > bestSlot.current {
			best, bestSlot = t, slot
		}
	}
	if best != nil {
		bestSlot.current -= total
		bestSlot.open++
		best.open++
	}
	return best, bestSlot
}

// room is how many more streams of service t takes now: 0 when it is draining, gone,
// tried already, full, or not of the kind wanted (a relay's or a connector's). The
// caller holds e.mu.
func (e *Edge) room(t *edgeTunnel, service string, tried map[*edgeTunnel]bool, relays bool) int {
	if t.relay != relays || t.draining || t.gone || tried[t] {
		return 0
	}
	slot := t.services[service]
	return min(slot.capacity-slot.open, e.cfg.MaxStreamsPerTunnel-t.open)
}

// addrPortOf is a TCP connection's address as the stream header carries it (an IPv4
// client of a dual-stack listener as IPv4).
func addrPortOf(a net.Addr) netip.AddrPort {
	if tcp, ok := a.(*net.TCPAddr); ok {
		ap := tcp.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

func (e *Edge) release(t *edgeTunnel, slot *serviceSlot) {
	e.mu.Lock()
	slot.open--
	t.open--
	e.mu.Unlock()
	e.notify()
}

// openStream opens a stream for a client connection and waits for the connector to
// say it reached the origin.
func openStream(conn tunnelConn, version int, h streamHeader) (tunnelStream, error) {
	data := h.Data
	if version == 1 { // no first bytes in its header: they follow the answer
		h.Data = nil
	}
	header, err := h.encode(version)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(conn.Context(), ackTimeout)
	defer cancel()
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	if err := readAck(s, header); err != nil {
		s.CancelRead(streamAborted)
		s.CancelWrite(streamAborted)
		return nil, err
	}
	if version == 1 && len(data) > 0 {
		if _, err := s.Write(data); err != nil {
			s.CancelRead(streamAborted)
			s.CancelWrite(streamAborted)
			return nil, err
		}
	}
	return s, nil
}

func readAck(s tunnelStream, header []byte) error {
	if _, err := s.Write(header); err != nil {
		return err
	}
	if err := s.SetReadDeadline(time.Now().Add(ackTimeout)); err != nil {
		return err
	}
	var ack [1]byte
	if _, err := io.ReadFull(s, ack[:]); err != nil {
		return fmt.Errorf("no answer from the connector: %w", err)
	}
	if ack[0] != ackOK {
		reason, _ := readShortString(s)
		return fmt.Errorf("the connector could not reach the origin: %s", reason)
	}
	return s.SetReadDeadline(time.Time{})
}
