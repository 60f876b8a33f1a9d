package node

import (
	"net/netip"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/health"
)

// rateInterval is how often the packet and byte counters are sampled for the rates
// of the status (packets/s, bytes/s): short enough to follow a change of traffic,
// long enough to smooth single bursts.
const rateInterval = time.Second

// rateKey names a counter: a service's or a backend's, by data-plane id.
type rateKey struct {
	backend bool
	id      uint32
}

type rate struct{ packets, bytes float64 }

type sample struct {
	c  datapath.Counters
	at time.Time
}

// rateMeter turns the data plane's counters into rates. Its goroutine (run) is owned
// by serveAPI, which stops it with the API.
type rateMeter struct {
	mu    sync.Mutex
	last  map[rateKey]sample
	rates map[rateKey]rate
}

func newRateMeter() *rateMeter {
	return &rateMeter{last: map[rateKey]sample{}, rates: map[rateKey]rate{}}
}

// run samples the counters of b's services every rateInterval until stop is closed.
func (m *rateMeter) run(b *statusBoard, lb *datapath.LB, stop <-chan struct{}) {
	t := time.NewTicker(rateInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			b.mu.Lock()
			services := b.services
			b.mu.Unlock()
			cur := map[rateKey]datapath.Counters{}
			for _, s := range services {
				if c, err := lb.ServiceCounters(s.ID); err == nil {
					cur[rateKey{id: s.ID}] = c
				}
				for _, bk := range s.Backends {
					if c, err := lb.BackendCounters(bk.ID); err == nil {
						cur[rateKey{backend: true, id: bk.ID}] = c
					}
				}
			}
			m.record(cur, now)
		}
	}
}

// record takes a sample; counters that went backwards (an id reused by another
// service or backend) start over.
func (m *rateMeter) record(cur map[rateKey]datapath.Counters, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rates := make(map[rateKey]rate, len(cur))
	for k, c := range cur {
		if prev, ok := m.last[k]; ok && c.Packets >= prev.c.Packets && c.Bytes >= prev.c.Bytes {
			dt := now.Sub(prev.at).Seconds()
			rates[k] = rate{float64(c.Packets-prev.c.Packets) / dt, float64(c.Bytes-prev.c.Bytes) / dt}
		}
		m.last[k] = sample{c, now}
	}
	for k := range m.last {
		if _, ok := cur[k]; !ok {
			delete(m.last, k)
		}
	}
	m.rates = rates
}

// get returns the packets and bytes per second of a counter (0 before two samples).
func (m *rateMeter) get(k rateKey) (pps, bps float64) {
	if m == nil {
		return 0, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rates[k]
	return r.packets, r.bytes
}

// healthChecks returns the checker's state of every target.
func (b *statusBoard) healthChecks() map[health.Target]health.Status {
	out := map[health.Target]health.Status{}
	if b.checker == nil {
		return out
	}
	for _, s := range b.checker.Status() {
		out[s.Target] = s
	}
	return out
}

// healthOf is the health of a backend of a service, as the status shows it.
func healthOf(s *config.Service, addr netip.Addr, checks map[health.Target]health.Status) BackendHealth {
	t := health.Target{Addr: addr, Check: s.Health}
	if s.Health.Kind == config.HealthNone || s.Health.Kind == "" {
		return BackendHealth{Check: "none", Up: true}
	}
	h := BackendHealth{Check: t.String()}
	st, ok := checks[t]
	if !ok {
		return h
	}
	h.Up, h.LastError, h.Checks, h.Failures = st.Up, st.LastError, st.Checks, st.Failures
	h.LatencySeconds = st.LastLatency.Seconds()
	if !st.LastCheck.IsZero() {
		h.LastCheck = st.LastCheck.UTC().Format(time.RFC3339Nano)
	}
	return h
}
