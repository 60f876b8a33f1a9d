package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// probePort is the inner UDP port of the probes (the echo port): it is bound only on
// the link's own inner addresses, so it clashes with nothing on the host.
const probePort = 7

// A probe is 9 bytes: a kind and a sequence number. Each side answers the other's
// requests and judges its tunnels by the answers to its own.
const (
	probeRequest = 'Q'
	probeReply   = 'R'
	probeLen     = 9
)

// prober probes every tunnel each interval and keeps each one's state: up after rise
// answered probes in a row, down after fall missed ones. A probe not answered by the
// time the next one leaves is missed. It owns one goroutine per tunnel (the reader)
// and one ticker; the run loop learns of changes from kick and reads the states.
type prober struct {
	interval   time.Duration
	rise, fall int
	states     []*probeState
	kick       chan struct{} // a tunnel changed state; buffered 1, never blocks a sender
	stop       chan struct{}
	wg         sync.WaitGroup
}

type probeState struct {
	conn   *net.UDPConn
	remote *net.UDPAddr

	mu          sync.Mutex
	seq         uint64
	sentAt      time.Time
	answered    bool
	ok, missed  int // consecutive
	up          bool
	sent, lost  uint64
	rtt         time.Duration
	transitions uint64
}

func newProber(tunnels []*tunnel, interval time.Duration, rise, fall int) (*prober, error) {
	p := &prober{interval: interval, rise: rise, fall: fall, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	for _, t := range tunnels {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.local, probePort)))
		if err != nil {
			p.close()
			return nil, fmt.Errorf("tunnel %d: probe socket on %s: %w", t.index, t.local, err)
		}
		p.states = append(p.states, &probeState{conn: c, remote: net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.remote, probePort))})
	}
	for _, s := range p.states {
		p.wg.Add(1)
		go p.read(s)
	}
	p.wg.Add(1)
	go p.tick()
	return p, nil
}

func (p *prober) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	for _, s := range p.states {
		s.conn.Close()
	}
	p.wg.Wait()
}

func (p *prober) changed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *prober) tick() {
	defer p.wg.Done()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		for _, s := range p.states {
			if s.send(time.Now(), p.fall) {
				p.changed()
			}
		}
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

// send counts the previous probe as missed when unanswered and sends the next one;
// it reports whether the tunnel went down.
func (s *probeState) send(now time.Time, fall int) (changed bool) {
	changed = s.sendState(now, fall)
	var b [probeLen]byte
	b[0] = probeRequest
	binary.BigEndian.PutUint64(b[1:], s.view().seq)
	// an error (no session yet, the device queue full) is a missed probe, found next tick
	_, _ = s.conn.WriteToUDP(b[:], s.remote)
	return changed
}

// sendState is send's bookkeeping: the previous probe judged, the next one numbered.
func (s *probeState) sendState(now time.Time, fall int) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq > 0 && !s.answered {
		s.ok = 0
		s.missed++
		s.lost++
		if s.up && s.missed >= fall {
			s.up, changed = false, true
			s.transitions++
		}
	}
	s.seq++
	s.sentAt, s.answered = now, false
	s.sent++
	return changed
}

// read answers the other side's probes and takes the answers to ours.
func (p *prober) read(s *probeState) {
	defer p.wg.Done()
	var b [64]byte
	for {
		n, from, err := s.conn.ReadFromUDP(b[:])
		if err != nil {
			select {
			case <-p.stop:
				return
			default:
				continue // ICMP errors surface here on Linux; the socket stays usable
			}
		}
		if n != probeLen {
			continue
		}
		switch b[0] {
		case probeRequest:
			b[0] = probeReply
			_, _ = s.conn.WriteToUDP(b[:probeLen], from)
		case probeReply:
			if s.answer(binary.BigEndian.Uint64(b[1:]), time.Now(), p.rise) {
				p.changed()
			}
		}
	}
}

// answer takes the reply to probe seq; it reports whether the tunnel came up.
func (s *probeState) answer(seq uint64, now time.Time, rise int) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq != s.seq || s.answered {
		return false // late: that probe was counted missed already
	}
	s.answered = true
	s.rtt = now.Sub(s.sentAt)
	s.missed = 0
	s.ok++
	if !s.up && s.ok >= rise {
		s.up, changed = true, true
		s.transitions++
	}
	return changed
}

// probeView is a tunnel's probing as the status shows it.
type probeView struct {
	up                     bool
	seq, sent, lost, trans uint64
	rtt                    time.Duration
}

func (s *probeState) view() probeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return probeView{up: s.up, seq: s.seq, sent: s.sent, lost: s.lost, trans: s.transitions, rtt: s.rtt}
}
