package lab

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The parts of the steering lab (docs/steering.md): origins whose backends
// answer the health check after the round-trip time of the checking node's site, the
// steering controllers, and clients that offer a load.

// OriginServer is one backend of an origin: an HTTP server on port 80 (the VIP's, after
// the backend agent's decapsulation) that counts the connections it accepts, and a
// health endpoint on HealthPort that answers after the RTT configured from the
// checking node to the origin.
//
// The lab has no netem (the kernel lacks the qdisc), so an origin's distance is given
// at the application: the health check is an HTTP GET, and its duration, which the node
// averages into the RTT it publishes, is the connect plus the wait. The VIP's traffic
// itself is not delayed.
type OriginServer struct {
	Host    *Host
	rtt     map[netip.Addr]time.Duration // by the checking node's address
	conns   atomic.Uint64
	mu      sync.Mutex
	clients map[netip.Addr]map[netip.Addr]uint64 // connections by the address they reached (the VIP), then by their source
	servers []*http.Server
	done    sync.WaitGroup
}

// HealthPort is where an OriginServer answers the health check.
const HealthPort = 8080

// StartOriginServer serves on h; rtt gives each checking node's wait (a node not named
// gets an answer at once).
func StartOriginServer(h *Host, rtt map[netip.Addr]time.Duration) (*OriginServer, error) {
	o := &OriginServer{Host: h, rtt: rtt, clients: map[netip.Addr]map[netip.Addr]uint64{}}
	serve := http.NewServeMux()
	serve.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "%s\n", h.Role) })
	web := &http.Server{Handler: serve, ConnState: func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.conns.Add(1)
			o.count(c)
		}
	}}
	health := &http.Server{Handler: http.HandlerFunc(o.health)}
	for port, srv := range map[int]*http.Server{80: web, HealthPort: health} {
		var ln net.Listener
		err := InNamespace(h.NS, func() error {
			var err error
			ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return err
		})
		if err != nil {
			return o, errors.Join(fmt.Errorf("%s: listen on %d: %w", h.Role, port, err), o.Close())
		}
		o.servers = append(o.servers, srv)
		o.done.Go(func() { _ = srv.Serve(ln) })
	}
	return o, nil
}

// health answers after the checking node's RTT to this origin: what the wire would
// have taken.
func (o *OriginServer) health(w http.ResponseWriter, r *http.Request) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		select {
		case <-time.After(o.rtt[ap.Addr().Unmap()]):
		case <-r.Context().Done():
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// Conns is how many connections the server has accepted on port 80.
func (o *OriginServer) Conns() uint64 { return o.conns.Load() }

// count tallies a new connection by the address it reached and the one it came from:
// with DSR, a VIP and the client's own address.
func (o *OriginServer) count(c net.Conn) {
	local, err1 := netip.ParseAddrPort(c.LocalAddr().String())
	remote, err2 := netip.ParseAddrPort(c.RemoteAddr().String())
	if err1 != nil || err2 != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.clients[local.Addr().Unmap()]
	if m == nil {
		m = map[netip.Addr]uint64{}
		o.clients[local.Addr().Unmap()] = m
	}
	m[remote.Addr().Unmap()]++
}

// ConnsTo is how many connections the server has accepted on port 80 of vip.
func (o *OriginServer) ConnsTo(vip netip.Addr) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n uint64
	for _, c := range o.clients[vip] {
		n += c
	}
	return n
}

// Clients is how many connections to vip came from each source address.
func (o *OriginServer) Clients(vip netip.Addr) map[netip.Addr]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.clients[vip])
}

// Close stops both servers, closing their connections: the backend is gone (its health
// checks are refused). It is safe to call more than once.
func (o *OriginServer) Close() error {
	var errs []error
	for _, srv := range o.servers {
		errs = append(errs, srv.Close())
	}
	o.done.Wait()
	return errors.Join(errs...)
}

// SteerMetrics is where the lab's steering controllers serve their metrics, on their
// host's loopback (a node's API has 9100).
const SteerMetrics = "127.0.0.1:9101"

// StartSteer runs `manifold steer --config` on h: a steering controller named name on
// the fleet store at endpoints, serving its metrics on SteerMetrics.
func (l *Lab) StartSteer(manifold string, h *Host, name string, endpoints []string, interval, lease time.Duration) (*Process, error) {
	path := filepath.Join(l.Dir, "steer-"+name+".yaml")
	file := fmt.Sprintf("fleet:\n  etcd:\n    endpoints: [%s]\nsteer:\n  name: %s\n  interval: %s\n  lease: %s\n  metrics: %s\n",
		strings.Join(endpoints, ", "), name, interval, lease, SteerMetrics)
	if err := writeFileAtomic(path, []byte(file)); err != nil {
		return nil, err
	}
	return l.Start(h, "steer-"+name, hostprog.Built(manifold), "steer", "--config", path)
}

// Steering returns the node's GET /api/v1/steering: the shares it applies.
func (a *NodeAPI) Steering() (*wire.SteeringStatus, error) {
	var st wire.SteeringStatus
	return &st, a.Get("/api/v1/steering", &st)
}

// OfferedLoad sends HTTP requests, each on a new connection, from a namespace to a URL
// at a set rate, without waiting for the answers: an offered load, which does not slow
// down when the servers do.
type OfferedLoad struct {
	rate         chan float64
	stop         chan struct{}
	loop, flows  sync.WaitGroup
	sent, failed atomic.Uint64
	lastErr      atomic.Value // error: the last failure's, for the report
}

// StartOfferedLoad starts sending from ns to url, rate new connections per second.
// A tick that comes late (a busy machine) sends what is due since the rate was set, so
// that the rate holds on average.
func StartOfferedLoad(ns, url string, rate float64) *OfferedLoad {
	l := &OfferedLoad{rate: make(chan float64), stop: make(chan struct{})}
	tick := time.NewTicker(period(rate))
	l.loop.Go(func() {
		defer tick.Stop()
		since, base := time.Now(), uint64(0) // the rate's start, and what was sent before it
		for {
			select {
			case <-l.stop:
				return
			case rate = <-l.rate:
				since, base = time.Now(), l.sent.Load()
				tick.Reset(period(rate))
			case now := <-tick.C:
				for due := base + uint64(rate*now.Sub(since).Seconds()); l.sent.Load() < due; {
					l.sent.Add(1)
					l.flows.Go(func() {
						if _, err := HTTPGet(ns, url, 0); err != nil {
							l.failed.Add(1)
							l.lastErr.Store(err)
						}
					})
				}
			}
		}
	})
	return l
}

func period(rate float64) time.Duration { return time.Duration(float64(time.Second) / rate) }

// SetRate changes the rate from now on.
func (l *OfferedLoad) SetRate(rate float64) { l.rate <- rate }

// Counts is how many requests were sent so far and how many of the finished ones failed.
func (l *OfferedLoad) Counts() (sent, failed uint64) { return l.sent.Load(), l.failed.Load() }

// LastErr is the error of the last request that failed (nil: none did).
func (l *OfferedLoad) LastErr() error {
	err, _ := l.lastErr.Load().(error)
	return err
}

// Stop stops sending and waits for the requests under way.
func (l *OfferedLoad) Stop() {
	close(l.stop)
	l.loop.Wait()
	l.flows.Wait()
}

// waitSteering polls a node's shares of its one steered service until cond holds of
// them, for at most timeout, and returns them.
func waitSteering(a *NodeAPI, timeout time.Duration, cond func(*wire.Steering) error) (*wire.Steering, error) {
	return waitServiceSteering(a, "", timeout, cond)
}

// waitServiceSteering is waitSteering of the named service among several ("": the
// node must steer exactly one).
func waitServiceSteering(a *NodeAPI, service string, timeout time.Duration, cond func(*wire.Steering) error) (*wire.Steering, error) {
	var got *wire.Steering
	err := Eventually(timeout, 50*time.Millisecond, func() error {
		st, err := a.Steering()
		if err != nil {
			return err
		}
		got = nil
		for i := range st.Services {
			if st.Services[i].Service == service || service == "" && len(st.Services) == 1 {
				got = &st.Services[i]
			}
		}
		if got == nil {
			return fmt.Errorf("%s: no shares of service %q among %d", a.Host.Role, service, len(st.Services))
		}
		return cond(got)
	})
	return got, err
}

// describe is the decision in a line: each site's demand, and its shares and RTT to
// each origin; each origin's load.
func describe(st *wire.Steering) string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %d by %s:", st.Round, st.Leader)
	for _, site := range st.Decision.Sites {
		fmt.Fprintf(&b, " %s %.0f/s", site.Site, site.Demand)
		for _, sh := range site.Shares {
			fmt.Fprintf(&b, " %s %.1f %% (target %.1f %%, RTT %.0f ms)", sh.Origin, 100*sh.Share, 100*sh.Target, sh.RTTMs)
		}
		b.WriteString(";")
	}
	for _, o := range st.Decision.Origins {
		fmt.Fprintf(&b, " %s load %.0f/%.0f", o.Origin, o.Load, o.Capacity)
	}
	return b.String()
}

// shares is a condition on the shares: each site's share of each origin within 1e-9.
func shares(want map[string]map[string]float64) func(*wire.Steering) error {
	return func(st *wire.Steering) error {
		for site, m := range want {
			for origin, w := range m {
				if got := st.Shares[site][origin]; math.Abs(got-w) > 1e-9 {
					return fmt.Errorf("%s's share of %s is %.3f, want %.3f (round %d)", site, origin, got, w, st.Round)
				}
			}
		}
		return nil
	}
}

// NewFlowsOf is each LB node's count of new flows (manifold_new_flows_total, over its
// backends), by role. A scrape that times out (a loaded machine) is tried again.
func NewFlowsOf(lbs map[*Host]string) (map[string]float64, error) {
	out := map[string]float64{}
	for lb := range lbs {
		err := Eventually(10*time.Second, 100*time.Millisecond, func() error {
			_, families, err := Scrape(lb, "127.0.0.1:9100")
			out[lb.Role] = MetricSum(families, "manifold_new_flows_total")
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
