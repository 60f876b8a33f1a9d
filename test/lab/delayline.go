package lab

// A WAN's distance in user space, the lab having no netem: a delay line relays UDP
// datagrams from ports of a host to their targets and back, each after a fixed delay,
// so that a QUIC connection through it measures a round trip of twice the delay more
// than the wire's.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// DelayLine relays UDP from its ports to their targets, each way after OneWay.
type DelayLine struct {
	Host   *Host
	OneWay time.Duration
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []*net.UDPConn // the listeners and every session's socket, closed by Close
	closed bool
}

// delaySessions bounds the peers a port keeps a socket for (a connector that dials
// again comes from a new port): the datagrams of more are dropped.
const delaySessions = 64

// delayQueue bounds the datagrams in flight each way of a session, as a link's
// buffer would: those past it are dropped.
const delayQueue = 4096

// StartDelayLine listens on h, on every address, at each port of routes, and relays
// what comes in to the port's target, from a socket of its own for each peer, and the
// target's answers back to that peer.
func StartDelayLine(h *Host, oneWay time.Duration, routes map[uint16]netip.AddrPort) (*DelayLine, error) {
	d := &DelayLine{Host: h, OneWay: oneWay, stop: make(chan struct{})}
	for port, target := range routes {
		var ln *net.UDPConn
		err := InNamespace(h.NS, func() error {
			var err error
			ln, err = net.ListenUDP("udp", &net.UDPAddr{Port: int(port)})
			return err
		})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%s: delay line on udp %d: %w", h.Role, port, err), d.Close())
		}
		d.track(ln)
		d.wg.Go(func() { d.relay(ln, target) })
	}
	return d, nil
}

// track keeps c for Close; false (c closed) when the line is closed already.
func (d *DelayLine) track(c *net.UDPConn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		c.Close()
		return false
	}
	d.conns = append(d.conns, c)
	return true
}

// relay reads ln until it is closed: each peer's datagrams go to target from the
// peer's own socket, whose answers go back to the peer.
func (d *DelayLine) relay(ln *net.UDPConn, target netip.AddrPort) {
	toTarget := map[netip.AddrPort]chan<- delayed{}
	buf := make([]byte, 64<<10)
	for {
		n, peer, err := ln.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		q := toTarget[peer]
		if q == nil {
			if len(toTarget) >= delaySessions {
				continue
			}
			var up *net.UDPConn
			err := InNamespace(d.Host.NS, func() error {
				var err error
				up, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(target))
				return err
			})
			if err != nil || !d.track(up) {
				continue
			}
			q = d.line(func(b []byte) { _, _ = up.Write(b) })
			toTarget[peer] = q
			back := d.line(func(b []byte) { _, _ = ln.WriteToUDPAddrPort(b, peer) })
			d.wg.Go(func() { d.read(up, back) })
		}
		d.push(q, buf[:n])
	}
}

// read passes what c receives to q until c is closed.
func (d *DelayLine) read(c *net.UDPConn, q chan<- delayed) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		d.push(q, buf[:n])
	}
}

// delayed is a datagram and when it leaves the line.
type delayed struct {
	due  time.Time
	data []byte
}

// line starts one way of a session: send gets each datagram pushed to the returned
// queue when it is due, in the order they came.
func (d *DelayLine) line(send func([]byte)) chan<- delayed {
	q := make(chan delayed, delayQueue)
	d.wg.Go(func() {
		for {
			select {
			case <-d.stop:
				return
			case p := <-q:
				if wait := time.Until(p.due); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-d.stop:
						t.Stop()
						return
					case <-t.C:
					}
				}
				send(p.data)
			}
		}
	})
	return q
}

// push hands a copy of b to a line's queue, due OneWay from now; dropped when the
// queue is full.
func (d *DelayLine) push(q chan<- delayed, b []byte) {
	select {
	case q <- delayed{time.Now().Add(d.OneWay), append([]byte(nil), b...)}:
	default:
	}
}

// Close stops the line and closes its sockets. It is safe to call more than once.
func (d *DelayLine) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.stop)
	var errs []error
	for _, c := range d.conns {
		errs = append(errs, c.Close())
	}
	d.mu.Unlock()
	d.wg.Wait()
	return errors.Join(errs...)
}
