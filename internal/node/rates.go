package node

import (
	"maps"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/reconcile"
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
type rateMeter struct {
	mu    sync.Mutex
	last  map[rateKey]sample
	rates map[rateKey]rate
}

func newRateMeter() *rateMeter {
	return &rateMeter{last: map[rateKey]sample{}, rates: map[rateKey]rate{}}
}

// run samples the counters of the services of view, and those tunnels gives (nil:
// none), every rateInterval until stop is closed.
func (m *rateMeter) run(view func() reconcile.View, lb *datapath.LB, tunnels func() map[rateKey]datapath.Counters, clk clock.Clock, stop <-chan struct{}) {
	t := clk.NewTicker(rateInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C():
			// one snapshot of every counter, read in batches: a lookup per service and
			// backend was 300 000 bpf() calls a second at 100 000 services
			snap, err := lb.ReadCounters()
			if err != nil {
				continue // the next tick tries again; the rates keep their last values
			}
			services := view().Services
			cur := make(map[rateKey]datapath.Counters, len(services))
			for _, s := range services {
				cur[rateKey{id: s.ID}] = snap.Service(s.ID)
				for _, bk := range s.Backends {
					cur[rateKey{backend: true, id: bk.ID}] = snap.Backend(bk.ID)
				}
			}
			if tunnels != nil {
				maps.Copy(cur, tunnels())
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
		if prev, ok := m.last[k]; ok && c.Packets >= prev.c.Packets && c.Bytes >= prev.c.Bytes && c.NewFlows >= prev.c.NewFlows {
			dt := now.Sub(prev.at).Seconds()
			rates[k] = rate{float64(c.Packets-prev.c.Packets) / dt, float64(c.Bytes-prev.c.Bytes) / dt, float64(c.NewFlows-prev.c.NewFlows) / dt}
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

// get returns the rates of a counter (zero before two samples).
func (m *rateMeter) get(k rateKey) rate {
	if m == nil {
		return rate{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rates[k]
}
