package lab

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
)

// RouteWatch counts the changes of the router's kernel routes to some VIPs, as netlink
// announces them: every change, even one undone a moment later, which polling the
// routes could miss. An ECMP route that gains or loses a next hop moves flows between
// the nodes; a count that did not change says no flow of that VIP moved.
type RouteWatch struct {
	mu      sync.Mutex
	changes map[netip.Addr]uint64
	err     error // the first error of the subscription: changes may have been missed
	done    chan struct{}
	wg      sync.WaitGroup
}

// WatchRoutes starts counting the changes of the router's routes to vips.
func (l *Lab) WatchRoutes(vips ...netip.Addr) (*RouteWatch, error) {
	w := &RouteWatch{changes: map[netip.Addr]uint64{}, done: make(chan struct{})}
	for _, v := range vips {
		w.changes[v] = 0
	}
	updates := make(chan netlink.RouteUpdate, 256)
	err := netlink.RouteSubscribeWithOptions(updates, w.done, netlink.RouteSubscribeOptions{
		Namespace: &l.Router.nsh,
		ErrorCallback: func(err error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.err == nil {
				w.err = err
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("router: watch routes: %w", err)
	}
	w.wg.Add(1)
	// owned by the RouteWatch: Close ends the subscription, which closes updates
	go func() {
		defer w.wg.Done()
		for u := range updates {
			if u.Dst == nil {
				continue
			}
			dst, ok := netip.AddrFromSlice(u.Dst.IP)
			ones, bits := u.Dst.Mask.Size()
			if !ok || ones != bits {
				continue
			}
			w.mu.Lock()
			if _, watched := w.changes[dst.Unmap()]; watched {
				w.changes[dst.Unmap()]++
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// Changes returns how many times the route to vip has changed since the watch began.
func (w *RouteWatch) Changes(vip netip.Addr) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changes[vip]
}

// Err returns the first error the subscription met: after one, changes may have gone
// uncounted.
func (w *RouteWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops the watch.
func (w *RouteWatch) Close() {
	close(w.done)
	w.wg.Wait()
}
