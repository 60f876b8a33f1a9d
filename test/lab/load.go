package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// Load sends HTTP requests on new connections from a namespace, to each VIP in turn,
// until Finish: the traffic that must not notice a node draining or joining.
type Load struct {
	stop     chan struct{}
	done     sync.WaitGroup
	mu       sync.Mutex
	sent     int
	failed   int
	firstErr error
}

// StartLoad starts sending from ns to port 80 of vips.
func StartLoad(ns string, vips []netip.Addr) *Load {
	l := &Load{stop: make(chan struct{})}
	l.done.Add(1)
	// owned by the Load: Finish stops it and waits for it
	go func() {
		defer l.done.Done()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			_, err := HTTPGet(ns, URL(vips[i%len(vips)], 80), 0)
			l.mu.Lock()
			l.sent++
			if err != nil {
				l.failed++
				if l.firstErr == nil {
					l.firstErr = err
				}
			}
			l.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return l
}

// Counts returns what the load has sent so far and how much of it failed: a caller
// that reads it before and after an event learns what the event cost.
func (l *Load) Counts() (sent, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.failed
}

// Finish stops the load and returns what it sent, how much of it failed and the first
// failure.
func (l *Load) Finish() (sent, failed int, firstErr error) {
	close(l.stop)
	l.done.Wait()
	return l.sent, l.failed, l.firstErr
}

// Preflight checks what a lab program (the demo, a benchmark) needs before it touches
// anything: root, the manifold binary (made absolute in place) and the tools.
func Preflight(program string, manifold *string, tools ...hostprog.Program) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s needs root (network namespaces, BPF)", program)
	}
	abs, err := filepath.Abs(*manifold)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("%s not found: run `make build` first", *manifold)
	}
	*manifold = abs
	return hostprog.Check(tools...)
}
