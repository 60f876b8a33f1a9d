// Package reconcile turns the desired state (config + backend health) into BPF map
// contents. It is the only writer of the data plane's service, ring and backend maps.
//
//	config.Config ─┐
//	               ├─► Apply ─► per service: ids → backend states → Maglev ring → lb_vips
//	health (Up?) ──┘                         (written in an order packets can't trip on)
//
// The caller owns the Reconciler and calls it from one goroutine.
package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/maglev"
)

// Dataplane is the set of map writes the reconciler needs; *datapath.LB implements it,
// and tests use an in-memory fake.
type Dataplane interface {
	PutService(k datapath.ServiceKey, s datapath.Service) error
	DeleteService(k datapath.ServiceKey) error
	PutVIPAddr(addr netip.Addr, services uint32) error
	DeleteVIPAddr(addr netip.Addr) error
	PutRing(serviceID uint32, ring []uint32) error
	DeleteRing(serviceID uint32) error
	PutBackend(id uint32, b datapath.Backend) error
	DeleteBackend(id uint32) error
	ResetServiceCounters(id uint32) error
	PutSettings(s datapath.Settings) error
}

// HealthFunc reports whether a backend of a service passes its health check.
type HealthFunc func(svc *config.Service, b *config.Backend) bool

// AlwaysUp is the HealthFunc of a node without health checks.
func AlwaysUp(*config.Service, *config.Backend) bool { return true }

// Reconciler remembers what it wrote so that Apply writes only differences.
type Reconciler struct {
	dp         Dataplane
	settings   *datapath.Settings // nil until first written
	services   map[string]*service
	vipAddrs   map[netip.Addr]uint32
	serviceIDs *idAllocator
	backendIDs *idAllocator
}

type service struct {
	cfg      config.Service
	id       uint32
	key      datapath.ServiceKey
	backends map[netip.Addr]*backend
	ring     []uint32 // nil when the service has no ring (no backend up)
}

type backend struct {
	id    uint32
	cfg   config.Backend
	state datapath.BackendState
	encap encap // as last written
}

// encap is how a backend's packets are encapsulated: its service's forwarding.
type encap struct {
	gue  bool
	port uint16
}

func encapOf(s *config.Service) encap {
	if s.Forwarding == config.GUE {
		return encap{gue: true, port: s.GUEPort}
	}
	return encap{}
}

// SettingsOf is the part of the node's config the data plane reads on every packet.
func SettingsOf(n *config.Node) datapath.Settings {
	s := datapath.Settings{NewFlowRate: n.NewFlowRate}
	if n.EntropySource {
		s.Entropy4, s.Entropy6 = n.EntropyPrefix4, n.EntropyPrefix6
	}
	return s
}

func New(dp Dataplane) *Reconciler {
	return &Reconciler{
		dp:         dp,
		services:   map[string]*service{},
		vipAddrs:   map[netip.Addr]uint32{},
		serviceIDs: newIDAllocator(datapath.MaxServices),
		backendIDs: newIDAllocator(datapath.MaxBackends),
	}
}

func serviceKey(s *config.Service) datapath.ServiceKey {
	return datapath.ServiceKey{VIP: s.VIP, Port: s.Port, Proto: s.Protocol.Number()}
}

// MaglevSeed identifies a service for Maglev: its VIP, port and protocol, not its name
// or position, so every node (and a renamed service) builds the same table.
func MaglevSeed(s *config.Service) string {
	return fmt.Sprintf("%s|%d|%s", s.VIP, s.Port, s.Protocol)
}

// MaglevKey identifies a backend for Maglev: address and port (with DSR, the service's).
func MaglevKey(s *config.Service, b *config.Backend) string {
	return netip.AddrPortFrom(b.Address, s.Port).String()
}

// Apply makes the data plane match cfg and health. On a kernel error it restores the
// previous state as far as the kernel lets it and returns the error.
func (r *Reconciler) Apply(cfg *config.Config, healthy HealthFunc) error {
	if s := SettingsOf(&cfg.Node); r.settings == nil || *r.settings != s {
		if err := r.dp.PutSettings(s); err != nil {
			return err
		}
		r.settings = &s
	}
	prev := r.desired()
	if err := r.apply(cfg.Services, healthy); err != nil {
		if rerr := r.apply(prev, healthy); rerr != nil {
			return fmt.Errorf("%w (and restoring the previous state failed: %v)", err, rerr)
		}
		return err
	}
	return nil
}

func (r *Reconciler) desired() []config.Service {
	out := make([]config.Service, 0, len(r.services))
	for _, s := range r.services {
		out = append(out, s.cfg)
	}
	return out
}

func (r *Reconciler) apply(services []config.Service, healthy HealthFunc) error {
	want := map[string]*config.Service{}
	for i := range services {
		want[services[i].Name] = &services[i]
	}
	// services that went away, or whose VIP/port/protocol changed (a new service)
	for name, s := range r.services {
		if w, ok := want[name]; !ok || serviceKey(w) != s.key {
			if err := r.removeService(s); err != nil {
				return err
			}
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic id allocation for the same config
	for _, name := range names {
		if err := r.applyService(want[name], healthy); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) applyService(cfg *config.Service, healthy HealthFunc) error {
	s, ok := r.services[cfg.Name]
	if !ok {
		id, ok := r.serviceIDs.alloc()
		if !ok {
			return fmt.Errorf("service %s: no free service id (limit %d)", cfg.Name, datapath.MaxServices-1)
		}
		if err := r.dp.ResetServiceCounters(id); err != nil {
			r.serviceIDs.free(id)
			return err
		}
		s = &service{cfg: *cfg, id: id, key: serviceKey(cfg), backends: map[netip.Addr]*backend{}}
		r.services[cfg.Name] = s
		if err := r.addVIPAddr(cfg.VIP); err != nil {
			return err
		}
	}
	s.cfg = *cfg
	s.cfg.Backends = slices.Clone(cfg.Backends)

	// 1. backend slots and the state each should have now
	target := map[*backend]datapath.BackendState{}
	for i := range s.cfg.Backends {
		bc := &s.cfg.Backends[i]
		b, ok := s.backends[bc.Address]
		if !ok {
			id, ok := r.backendIDs.alloc()
			if !ok {
				return fmt.Errorf("service %s: backend %s: no free backend id (limit %d)", cfg.Name, bc.Address, datapath.MaxBackends-1)
			}
			b = &backend{id: id, state: datapath.BackendUnused}
			s.backends[bc.Address] = b
		}
		b.cfg = *bc
		switch {
		case !healthy(&s.cfg, bc):
			target[b] = datapath.BackendDown
		case bc.Weight == 0:
			target[b] = datapath.BackendDraining
		default:
			target[b] = datapath.BackendUp
		}
	}

	// 2. backends that come up are written before the ring names them (and those whose
	// encapsulation changed, in their current state: a backend agent takes both) ...
	enc := encapOf(&s.cfg)
	for b, state := range target {
		switch {
		case state == datapath.BackendUp && b.state != state:
			if err := r.putBackend(s, b, state); err != nil {
				return err
			}
		case b.state != datapath.BackendUnused && b.encap != enc:
			if err := r.putBackend(s, b, b.state); err != nil {
				return err
			}
		}
	}
	// 3. ... the ring is swapped in one update ...
	ring, err := r.buildRing(s, target)
	if err != nil {
		return err
	}
	if !slices.Equal(ring, s.ring) {
		if ring == nil {
			err = r.dp.DeleteRing(s.id)
		} else {
			err = r.dp.PutRing(s.id, ring)
		}
		if err != nil {
			return err
		}
		s.ring = ring
	}
	// 4. ... and backends leave the up state only once no ring names them.
	for b, state := range target {
		if state != datapath.BackendUp && b.state != state {
			if err := r.putBackend(s, b, state); err != nil {
				return err
			}
		}
	}
	for addr, b := range s.backends {
		if _, ok := target[b]; !ok {
			if err := r.dp.DeleteBackend(b.id); err != nil {
				return err
			}
			r.backendIDs.free(b.id)
			delete(s.backends, addr)
		}
	}
	// 5. the service entry last: a new service becomes visible with its ring in place
	return r.dp.PutService(s.key, datapath.Service{
		ID:         s.id,
		TableSize:  s.cfg.TableSize,
		SourceHash: s.cfg.Scheduler == config.MaglevSource,
	})
}

func (r *Reconciler) putBackend(s *service, b *backend, state datapath.BackendState) error {
	enc := encapOf(&s.cfg)
	v := datapath.Backend{Addr: b.cfg.Address, ServiceID: s.id, State: state, GUE: enc.gue, GUEPort: enc.port}
	if err := r.dp.PutBackend(b.id, v); err != nil {
		return err
	}
	b.state, b.encap = state, enc
	return nil
}

// buildRing returns the ring of backend ids over the backends that are to be up, nil if
// none.
func (r *Reconciler) buildRing(s *service, target map[*backend]datapath.BackendState) ([]uint32, error) {
	var (
		mb  []maglev.Backend
		ids []uint32
	)
	for i := range s.cfg.Backends {
		bc := &s.cfg.Backends[i]
		b := s.backends[bc.Address]
		if target[b] != datapath.BackendUp {
			continue
		}
		mb = append(mb, maglev.Backend{Key: MaglevKey(&s.cfg, bc), Weight: bc.Weight})
		ids = append(ids, b.id)
	}
	if len(mb) == 0 {
		return nil, nil
	}
	table, err := maglev.Build(MaglevSeed(&s.cfg), mb, s.cfg.TableSize)
	if err != nil {
		return nil, fmt.Errorf("service %s: maglev: %w", s.cfg.Name, err)
	}
	ring := make([]uint32, len(table))
	for i, idx := range table {
		ring[i] = ids[idx]
	}
	return ring, nil
}

func (r *Reconciler) removeService(s *service) error {
	if err := r.dp.DeleteService(s.key); err != nil {
		return err
	}
	if err := r.dp.DeleteRing(s.id); err != nil {
		return err
	}
	var errs []error
	for _, b := range s.backends {
		errs = append(errs, r.dp.DeleteBackend(b.id))
		r.backendIDs.free(b.id)
	}
	r.serviceIDs.free(s.id)
	delete(r.services, s.cfg.Name)
	errs = append(errs, r.dropVIPAddr(s.key.VIP))
	return errors.Join(errs...)
}

func (r *Reconciler) addVIPAddr(a netip.Addr) error {
	r.vipAddrs[a]++
	return r.dp.PutVIPAddr(a, r.vipAddrs[a])
}

func (r *Reconciler) dropVIPAddr(a netip.Addr) error {
	r.vipAddrs[a]--
	if r.vipAddrs[a] > 0 {
		return r.dp.PutVIPAddr(a, r.vipAddrs[a])
	}
	delete(r.vipAddrs, a)
	return r.dp.DeleteVIPAddr(a)
}
