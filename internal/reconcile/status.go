package reconcile

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
)

// ServiceStatus is what the reconciler last wrote for a service.
type ServiceStatus struct {
	Config   config.Service
	ID       uint32
	Backends []BackendStatus // in config order
	// Local is the local pseudo-backend of a service with origins reached by tunnel
	// (the node's stack, at the VIP's address); nil for others.
	Local *BackendStatus
}

type BackendStatus struct {
	Address netip.Addr
	ID      uint32
	Weight  uint32
	State   datapath.BackendState
}

// Snapshot returns every service, sorted by name.
func (r *Reconciler) Snapshot() []*ServiceStatus {
	out := make([]*ServiceStatus, 0, len(r.services))
	for _, s := range r.services {
		out = append(out, s.status())
	}
	slices.SortFunc(out, func(a, b *ServiceStatus) int { return strings.Compare(a.Config.Name, b.Config.Name) })
	return out
}

// Status returns one service; false when the data plane does not have it.
func (r *Reconciler) Status(name string) (*ServiceStatus, bool) {
	s, ok := r.services[name]
	if !ok {
		return nil, false
	}
	return s.status(), true
}

func (s *service) status() *ServiceStatus {
	st := &ServiceStatus{Config: s.cfg, ID: s.id}
	for _, bc := range s.cfg.Backends {
		b := s.backends[bc.Address]
		st.Backends = append(st.Backends, BackendStatus{Address: bc.Address, ID: b.id, Weight: bc.Weight, State: b.state})
	}
	if w, ok := localWeight(&s.cfg); ok {
		if b := s.backends[s.cfg.VIP]; b != nil {
			st.Local = &BackendStatus{Address: s.cfg.VIP, ID: b.id, Weight: w, State: b.state}
		}
	}
	return st
}

// RingAddrs returns a service's Maglev ring as backend addresses (nil: no ring). Two
// nodes agree on every flow exactly when their RingAddrs are equal.
func (r *Reconciler) RingAddrs(name string) []netip.Addr {
	s, ok := r.services[name]
	if !ok || s.ring == nil {
		return nil
	}
	byID := map[uint32]netip.Addr{}
	for addr, b := range s.backends {
		byID[b.id] = addr
	}
	out := make([]netip.Addr, len(s.ring))
	for i, id := range s.ring {
		out[i] = byID[id]
	}
	return out
}
