package lab

import (
	"bufio"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// pathsMbits caps each path: low enough that the cores are not the limit, as in the
// bench (test/lab/linkpathsbench).
const pathsMbits = 200

// TestLinkPaths runs a link of four tunnels between gateways joined by four capped
// paths under a layer-3+4 multipath route (the write-ups' bond): every path carries
// a tunnel's packets, each way, so no two tunnels share one; one path cut, TCP
// connections streaming through the link all go on, and every tunnel is up again
// over the paths left.
func TestLinkPaths(t *testing.T) {
	ll := newLinkLab(t)
	if err := hostprog.Check(hostprog.TC); err != nil {
		testenv.Missing(t, err)
	}
	paths, err := ll.AddPaths(ll.gwA, ll.gwB, linkTunnels, pathsMbits)
	if err != nil {
		t.Fatal(err)
	}
	cfgA, cfgB := ll.configs(0)
	cfgA.Local, cfgA.Remote = paths.AddrA, paths.AddrB
	cfgB.Local, cfgB.Remote = paths.AddrB, paths.AddrA
	pa, pb := ll.startLinks(t, cfgA, cfgB)
	all := []int{0, 1, 2, 3}
	waitAll := func(timeout time.Duration) {
		t.Helper()
		for _, side := range []struct {
			p  *Process
			gw *Host
		}{{pa, ll.gwA}, {pb, ll.gwB}} {
			if err := waitRoute(side.p, side.gw, timeout, all); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitAll(30 * time.Second)
	for _, gw := range []*Host{ll.gwA, ll.gwB} {
		st, err := LinkStatus(gw)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range st.Tunnels {
			if tn.SourcePort == tn.Port || tn.SourcePort == 0 {
				t.Errorf("%s: tunnel %d sends from port %d, receives on %d: no port chosen for its path", gw.Role, tn.Index, tn.SourcePort, tn.Port)
			}
		}
	}

	// Each tunnel's probes, both ways, go over a path of their own: with two tunnels
	// on one path another would carry nothing but the odd ARP packet.
	const enough = 30 // probes and answers, about 20 a second per tunnel each way
	a0, b0, err := paths.TxPackets()
	if err != nil {
		t.Fatal(err)
	}
	err = pa.WaitReady(15*time.Second, func() error {
		a1, b1, err := paths.TxPackets()
		if err != nil {
			return err
		}
		for i := range paths.N {
			if a1[i]-a0[i] < enough || b1[i]-b0[i] < enough {
				return fmt.Errorf("packets sent over each path since the link came up: from A %v, from B %v; want %d at least on every one",
					sub(a1, a0), sub(b1, b0), enough)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// TCP connections streaming through the link, spread over its tunnels.
	echoServer(t, ll.hostB)
	s := startStreams(t, ll.hostA.NS, netip.AddrPortFrom(ll.hostB.Addr4, echoPort), linkFlows)
	if err := s.waitEach(pa, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	// One path cut: its tunnel's flows take another path (the kernel's route, on both
	// gateways), every connection goes on, and every tunnel is up over the paths left
	// once fall + rise probes have passed (a tunnel still sent over the cut path would
	// stay down).
	sent := probesSent(t, ll.gwA)
	if err := paths.Cut(1); err != nil {
		t.Fatal(err)
	}
	if err := s.waitEach(pa, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	err = pa.WaitReady(10*time.Second, func() error {
		now := probesSent(t, ll.gwA)
		for i := range now {
			if now[i] < sent[i]+uint64(linkFall+linkRise+2) {
				return fmt.Errorf("probes sent by tunnel %d since the cut: %d", i, now[i]-sent[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitAll(10 * time.Second)
	if err := s.waitEach(pa, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := paths.Mend(1); err != nil {
		t.Fatal(err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections, %d round trips of %d KiB each, none broken by the cut", linkFlows, s.total(), streamChunk>>10)
}

func sub(a, b []uint64) []uint64 {
	out := make([]uint64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// probesSent reads each tunnel's probes sent from a gateway's status.
func probesSent(t *testing.T, gw *Host) []uint64 {
	t.Helper()
	st, err := LinkStatus(gw)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint64, len(st.Tunnels))
	for i, tn := range st.Tunnels {
		out[i] = tn.ProbesSent
	}
	return out
}

// streamChunk is what each streaming connection sends and reads back per round trip.
const streamChunk = 16 << 10

// streams are TCP connections each echoing chunks in a loop until stopped; the first
// error of any is kept: a connection broken.
type streams struct {
	done   chan struct{}
	wg     sync.WaitGroup
	counts []atomic.Uint64
	mu     sync.Mutex
	err    error
}

func startStreams(t *testing.T, ns string, to netip.AddrPort, n int) *streams {
	t.Helper()
	s := &streams{done: make(chan struct{}), counts: make([]atomic.Uint64, n)}
	for i := range n {
		c, err := DialTCP(ns, to.String(), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		f := &flow{conn: c, r: bufio.NewReaderSize(c, 1<<17)}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				select {
				case <-s.done:
					return
				default:
				}
				// a connection that has not moved off a cut path stalls: 10 s is
				// many retransmissions, and far beyond the moves measured
				if err := f.roundTrip(streamChunk, 10*time.Second); err != nil {
					s.mu.Lock()
					if s.err == nil {
						s.err = fmt.Errorf("connection %d (port %d) after %d round trips: %w", i, f.port(), s.counts[i].Load(), err)
					}
					s.mu.Unlock()
					return
				}
				s.counts[i].Add(1)
			}
		}()
	}
	t.Cleanup(func() { _ = s.stop() })
	return s
}

func (s *streams) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// waitEach waits until every connection has made n more round trips, and fails at
// once when one broke.
func (s *streams) waitEach(p *Process, n uint64, timeout time.Duration) error {
	base := make([]uint64, len(s.counts))
	for i := range s.counts {
		base[i] = s.counts[i].Load()
	}
	var broken error
	err := p.WaitReady(timeout, func() error {
		if broken = s.failed(); broken != nil {
			return nil
		}
		for i := range s.counts {
			if got := s.counts[i].Load() - base[i]; got < n {
				return fmt.Errorf("connection %d: %d round trips of %d", i, got, n)
			}
		}
		return nil
	})
	if broken != nil {
		return broken
	}
	return err
}

func (s *streams) stop() error {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
	return s.failed()
}

func (s *streams) total() uint64 {
	var n uint64
	for i := range s.counts {
		n += s.counts[i].Load()
	}
	return n
}
