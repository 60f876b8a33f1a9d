package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/health"
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

// prober probes every tunnel each interval and keeps each one's state with the health
// checks' rise/fall (health.RiseFall): an answer is a success; while the tunnel is up,
// each whole interval without an answer is a failure, and while it is down, each probe
// lost. So a tunnel is down once no probe has been answered for fall intervals
// (measured on the clock: a late tick does not delay it), and up again after rise
// answers with none lost between. A probe may be answered until fall later ones have left, so a
// tunnel whose probes queue behind bulk traffic on a busy machine is late, not down.
// It owns one goroutine per tunnel (the reader) and one ticker; the run loop learns of
// changes from kick and reads the states.
type prober struct {
	clock    clock.Clock
	interval time.Duration
	states   []*probeState
	kick     chan struct{} // a tunnel changed state; buffered 1, never blocks a sender
	stop     chan struct{}
	wg       sync.WaitGroup
}

type probeState struct {
	conn   *net.UDPConn
	remote *net.UDPAddr

	mu sync.Mutex
	// the last fall probes, by sequence number modulo fall: they may still be answered
	window      []pending
	seq         uint64 // of the latest probe sent
	lastReply   time.Time
	state       health.RiseFall
	sent, lost  uint64
	rtt         time.Duration
	transitions uint64
}

type pending struct {
	seq      uint64
	sentAt   time.Time
	answered bool
}

func newProbeState(rise, fall int) *probeState {
	// a tunnel starts down, not unknown: the first silent interval is no transition
	s := &probeState{window: make([]pending, fall), state: health.RiseFall{Rise: rise, Fall: fall}}
	s.state.Assume(false)
	return s
}

func newProber(tunnels []*tunnel, clk clock.Clock, interval time.Duration, rise, fall int) (*prober, error) {
	p := &prober{clock: clk, interval: interval, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	for _, t := range tunnels {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.local, probePort)))
		if err != nil {
			p.close()
			return nil, fmt.Errorf("tunnel %d: probe socket on %s: %w", t.index, t.local, err)
		}
		st := newProbeState(rise, fall)
		st.conn, st.remote = c, net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.remote, probePort))
		p.states = append(p.states, st)
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
	t := p.clock.NewTicker(p.interval)
	defer t.Stop()
	for {
		for _, s := range p.states {
			if s.send(p.clock.Now(), p.interval) {
				p.changed()
			}
		}
		select {
		case <-p.stop:
			return
		case <-t.C():
		}
	}
}

// send judges the tunnel and sends the next probe; it reports whether the tunnel
// went down.
func (s *probeState) send(now time.Time, interval time.Duration) (changed bool) {
	var seq uint64
	changed, seq = s.sendState(now, interval)
	var b [probeLen]byte
	b[0] = probeRequest
	binary.BigEndian.PutUint64(b[1:], seq)
	// an error (no session yet, the device queue full) is a probe unanswered
	_, _ = s.conn.WriteToUDP(b[:], s.remote)
	return changed
}

// sendState is send's bookkeeping: an up tunnel fails once per whole interval since
// its last answer (down after fall); the probe leaving the window unanswered is lost,
// which for a down tunnel restarts the count toward rise; the next one numbered.
func (s *probeState) sendState(now time.Time, interval time.Duration) (changed bool, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fall := len(s.window)
	if s.state.Up() {
		silent := int(min(now.Sub(s.lastReply)/interval, time.Duration(fall)))
		for s.state.Failures() < silent {
			changed = s.record(false) || changed
		}
	}
	s.seq++
	slot := &s.window[s.seq%uint64(fall)]
	if slot.seq > 0 && !slot.answered {
		s.lost++
		if !s.state.Up() {
			s.record(false) // a down tunnel's failure changes nothing but the count toward rise
		}
	}
	*slot = pending{seq: s.seq, sentAt: now}
	s.sent++
	return changed, s.seq
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
			if s.answer(binary.BigEndian.Uint64(b[1:]), p.clock.Now()) {
				p.changed()
			}
		}
	}
}

// answer takes the reply to probe seq; it reports whether the tunnel came up.
func (s *probeState) answer(seq uint64, now time.Time) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := &s.window[seq%uint64(len(s.window))]
	if slot.seq != seq || slot.answered {
		return false // too late (its slot holds a newer probe), or a duplicate
	}
	slot.answered = true
	s.rtt = now.Sub(slot.sentAt)
	s.lastReply = now
	return s.record(true)
}

// record takes a result into the rise/fall state; it reports whether the tunnel went
// up or down.
func (s *probeState) record(ok bool) (changed bool) {
	if !s.state.Record(ok) {
		return false
	}
	s.transitions++
	return true
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
	return probeView{up: s.state.Up(), seq: s.seq, sent: s.sent, lost: s.lost, trans: s.transitions, rtt: s.rtt}
}
