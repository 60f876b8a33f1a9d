package node

import (
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/datapath"
)

// rateInterval is how often the packet and byte counters are sampled for the rates
// of the status (packets/s, bytes/s): short enough to follow a change of traffic,
// long enough to smooth single bursts.
const rateInterval = time.Second

// rateKey names a counter: a service's or a backend's, by data-plane id; or the
// tunnel edge's of a tunnel service (its client connections, as new flows) or of one
// of its origins (the streams opened to it), by name.
type rateKey struct {
	backend        bool
	id             uint32
	tunnel, origin string
}

// rate is per second.
type rate struct{ packets, bytes, newFlows float64 }

type sample struct {
	c  datapath.Counters
	at time.Time
}

// rateMeter turns the data plane's counters into rates. Its goroutine (run) is owned
// by serveAPI, which stops it with the API.
//
// The services' and backends' rates are the difference of the last two snapshots of
// every counter (datapath.CounterSnapshot, slices by id), worked out when asked: a
// pass costs a few bpf() calls and no map of 300 000 entries to fill at 100 000
// services. The tunnel edge's counters, a few, are sampled by name.
type rateMeter struct {
	mu        sync.Mutex
	prev, cur *datapath.CounterSnapshot
	at        time.Time // when cur was read
	seconds   float64   // between prev and cur
	last      map[rateKey]sample
	rates     map[rateKey]rate // the tunnel edge's, by name
}

func newRateMeter() *rateMeter {
	return &rateMeter{last: map[rateKey]sample{}, rates: map[rateKey]rate{}}
}

// run samples every counter of the data plane, and those tunnels gives (nil: none),
// every rateInterval until stop is closed.
func (m *rateMeter) run(lb *datapath.LB, tunnels func() map[rateKey]datapath.Counters, clk clock.Clock, stop <-chan struct{}) {
	t := clk.NewTicker(rateInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C():
			if snap, err := lb.ReadCounters(); err == nil { // else the rates keep their last values
				m.snapshot(snap, now)
			}
			if tunnels != nil {
				m.record(tunnels(), now)
			}
		}
	}
}

// snapshot takes the data plane's counters read at now.
func (m *rateMeter) snapshot(snap *datapath.CounterSnapshot, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil {
		m.seconds = now.Sub(m.at).Seconds()
	}
	m.prev, m.cur, m.at = m.cur, snap, now
}

// record takes a sample of named counters; counters that went backwards start over.
func (m *rateMeter) record(cur map[rateKey]datapath.Counters, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rates := make(map[rateKey]rate, len(cur))
	for k, c := range cur {
		if prev, ok := m.last[k]; ok {
			rates[k] = rateOf(prev.c, c, now.Sub(prev.at).Seconds())
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

// rateOf is the rate from counters a to b, seconds apart; zero when they went
// backwards (an id reused by another service or backend: it starts over).
func rateOf(a, b datapath.Counters, seconds float64) rate {
	if seconds <= 0 || b.Packets < a.Packets || b.Bytes < a.Bytes || b.NewFlows < a.NewFlows {
		return rate{}
	}
	return rate{float64(b.Packets-a.Packets) / seconds, float64(b.Bytes-a.Bytes) / seconds, float64(b.NewFlows-a.NewFlows) / seconds}
}

// get returns the rates of a counter (zero before two samples).
func (m *rateMeter) get(k rateKey) rate {
	if m == nil {
		return rate{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case k.tunnel != "":
		return m.rates[k]
	case m.prev == nil:
		return rate{}
	case k.backend:
		return rateOf(m.prev.Backend(k.id), m.cur.Backend(k.id), m.seconds)
	}
	return rateOf(m.prev.Service(k.id), m.cur.Service(k.id), m.seconds)
}
