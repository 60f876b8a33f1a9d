// Package reconcile is the node's controller: from one desired state — the services
// of every source (the config file, the fleet store, Kubernetes) and the backends'
// health — it derives and applies the BPF maps, the health-check targets, the neighbour
// entries, the tunnel services' VIPs on lo and the BGP announcements (Controller,
// controller.go; the announce policy in announce.go). Nothing else writes the data
// plane, lo's VIPs or BGP.
//
// This file is the maps' part, the Reconciler:
//
//	config.Config ─┐
//	               ├─► Apply ─► per service: ids → backend states → Maglev ring → lb_vips
//	health (Up?) ──┘                         (written in an order packets can't trip on)
//
// Apply writes only differences: a service whose backends, weights, health and table
// size are as last written costs no Maglev build and no map write, so a change to one
// service among ten thousand touches one service. The rings that did change are
// swapped in with one batch for the whole Apply (see datapath.LB.PutRings).
//
// The caller owns the Reconciler and calls it from one goroutine.
package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/maglev"
)

// Dataplane is the set of map writes the reconciler needs; *datapath.LB implements it,
// and tests use an in-memory fake.
type Dataplane interface {
	PutServices(keys []datapath.ServiceKey, services []datapath.Service) (int, error) // in one batch; how many went in
	DeleteService(k datapath.ServiceKey) error
	PutVIPAddrs(addrs []netip.Addr, services []uint32) error // in one batch
	DeleteVIPAddr(addr netip.Addr) error
	PutRings(rings map[uint32][]uint32) error // service id → ring, in one batch
	DeleteRing(serviceID uint32) error
	PutBackends(ids []uint32, backends []datapath.Backend) (int, error) // in one batch; how many went in
	DeleteBackend(id uint32) error
	ResetServiceCounters(id uint32) error
	PutSettings(s datapath.Settings) error
	Capacity() (services, backends uint32) // ids the maps hold, 0 ("none") included
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
	// undo holds, while an Apply runs, the config of each service as it was before the
	// Apply changed or removed it (nil: the Apply added it): what a failed Apply
	// restores. Taken service by service, so that an Apply that changes one service
	// among 100 000 does not copy the other 99 999.
	undo map[string]*config.Service
}

type service struct {
	cfg      config.Service
	id       uint32
	key      datapath.ServiceKey
	backends map[netip.Addr]*backend
	ring     []uint32 // nil when the service has no ring (no backend up)
	// ring was built from ringInputs (its length is the table size); ringStale says the
	// kernel's ring is unknown (a write of it failed). entry is the lb_vips value last
	// written (nil: none yet).
	ringInputs []ringInput
	ringStale  bool
	entry      *datapath.Service
	// settled: the kernel holds all that the service's last Apply meant to write (it
	// ran to its end); cleared when an Apply starts on it.
	settled bool
}

// ringInput is one up backend as the Maglev build sees it, with the id its slots get.
type ringInput struct {
	key    string
	weight uint32
	id     uint32
}

// pending is a service between the two halves of an Apply: backends that come up
// are written, its ring is built (changed says whether it differs from the kernel's);
// the rest waits for the rings of all services to be swapped in.
type pending struct {
	s        *service
	target   map[*backend]datapath.BackendState
	ring     []uint32
	inputs   []ringInput
	build    bool  // the inputs differ from the kernel ring's: build and compare
	buildErr error // the build's
	changed  bool  // the ring differs from the kernel's: write it
}

type backend struct {
	id    uint32
	cfg   config.Backend
	state datapath.BackendState
	encap encap // as last written
}

// encap is how a backend's packets are encapsulated (or translated): its service's
// forwarding, and the port that goes with it; or, for the local pseudo-backend, not at
// all: they pass to the node's stack.
type encap struct {
	gue, nat, local bool
	port            uint16 // GUE: the UDP port; NAT: the backends' port, 0 the service's
}

func encapOf(s *config.Service, b *config.Backend) encap {
	if isLocal(s, b) {
		return encap{local: true}
	}
	switch s.Forwarding {
	case config.GUE:
		return encap{gue: true, port: s.GUEPort}
	case config.NAT:
		return encap{nat: true, port: s.BackendPort}
	}
	return encap{}
}

// backendsOf are the backends of a service as the data plane has them: its own and,
// for a service with origins reached by tunnel, last, the local pseudo-backend — the
// node's own stack, where the tunnel edge ends those origins' share of the flows. It
// stands at the VIP's address (which no backend of such a service has: config) and
// weighs what those origins weigh together (their shares, when steered). Every node
// builds the same ring with it, so a flow that ECMP moves to another node still goes
// to that node's stack.
func backendsOf(s *config.Service) []config.Backend {
	w, ok := localWeight(s)
	if !ok {
		return s.Backends
	}
	return append(slices.Clip(s.Backends), config.Backend{Address: s.VIP, Weight: w})
}

// localWeight is the weight of a service's local pseudo-backend; false when it has none.
func localWeight(s *config.Service) (uint32, bool) {
	if !s.TunnelledOrigins() {
		return 0, false
	}
	var w uint32
	for _, o := range s.Origins {
		if o.Tunnel {
			w += min(o.Weight, config.MaxWeight)
		}
	}
	return min(w, config.MaxWeight), true
}

func isLocal(s *config.Service, b *config.Backend) bool {
	return b.Address == s.VIP && s.TunnelledOrigins()
}

// SettingsOf is the part of the node's config the data plane reads on every packet.
func SettingsOf(n *config.Node) datapath.Settings {
	s := datapath.Settings{NewFlowRate: n.NewFlowRate, ForwardTransit: n.ForwardTransit}
	if n.EntropySource {
		s.Entropy4, s.Entropy6 = n.EntropyPrefix4, n.EntropyPrefix6
	}
	return s
}

func New(dp Dataplane) *Reconciler {
	services, backends := dp.Capacity()
	return &Reconciler{
		dp:         dp,
		services:   map[string]*service{},
		vipAddrs:   map[netip.Addr]uint32{},
		serviceIDs: newIDAllocator(services),
		backendIDs: newIDAllocator(backends),
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
	return r.applyUndoable(&cfg.Node, cfg.Services, nil, true, healthy)
}

// ApplyChanges makes the data plane match changed (services added or changed) and
// gone (names of services removed; a name the data plane does not have is passed by),
// leaving every other service as it is: it costs what those services cost, whatever
// the number of others. A service not settled by an earlier failed Apply is settled
// by the next Apply, not by this. On a kernel error it restores the services it
// touched and returns the error.
func (r *Reconciler) ApplyChanges(node *config.Node, changed []config.Service, gone []string, healthy HealthFunc) error {
	return r.applyUndoable(node, changed, gone, false, healthy)
}

// applyUndoable runs apply, and on a kernel error undoes what it did: all of the
// previous services again (whole) or the ones it touched.
func (r *Reconciler) applyUndoable(node *config.Node, services []config.Service, gone []string, whole bool, healthy HealthFunc) error {
	if s := SettingsOf(node); r.settings == nil || *r.settings != s {
		if err := r.dp.PutSettings(s); err != nil {
			return err
		}
		r.settings = &s
	}
	r.undo = map[string]*config.Service{}
	err := r.apply(services, gone, whole, healthy)
	if err != nil {
		var rerr error
		if whole {
			prev := r.before()
			r.undo = nil // the restore records nothing
			rerr = r.apply(prev, nil, true, healthy)
		} else {
			changed, gone := r.undone()
			r.undo = nil
			rerr = r.apply(changed, gone, false, healthy)
		}
		if rerr != nil {
			return fmt.Errorf("%w (and restoring the previous state failed: %v)", err, rerr)
		}
		return err
	}
	r.undo = nil
	return nil
}

// keep records a service's config before the running Apply changes or removes it (the
// first change only); cfg nil records a service the Apply adds.
func (r *Reconciler) keep(name string, cfg *config.Service) {
	if r.undo == nil {
		return
	}
	if _, ok := r.undo[name]; ok {
		return
	}
	if cfg != nil {
		c := *cfg // its Backends are never written in place: a change replaces the slice
		cfg = &c
	}
	r.undo[name] = cfg
}

// before is the services as they were before the running Apply: those it left alone,
// and the recorded configs of those it changed or removed, without those it added.
func (r *Reconciler) before() []config.Service {
	out := make([]config.Service, 0, len(r.services))
	for name, s := range r.services {
		if old, ok := r.undo[name]; ok {
			if old != nil {
				out = append(out, *old)
			}
			continue
		}
		out = append(out, s.cfg)
	}
	for name, old := range r.undo {
		if _, ok := r.services[name]; !ok && old != nil {
			out = append(out, *old)
		}
	}
	return out
}

// undone is what puts back the services the running Apply touched: the recorded
// configs of those it changed or removed, and the names of those it added.
func (r *Reconciler) undone() (changed []config.Service, added []string) {
	for name, old := range r.undo {
		if old != nil {
			changed = append(changed, *old)
		} else {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	return changed, added
}

// apply writes services: every service the data plane is to have (whole), or those
// added or changed, gone naming those removed.
func (r *Reconciler) apply(services []config.Service, gone []string, whole bool, healthy HealthFunc) error {
	want := map[string]*config.Service{}
	for i := range services {
		want[services[i].Name] = &services[i]
	}
	// services that went away, or whose VIP/port/protocol changed (a new service)
	var removed []*service
	if whole {
		for name, s := range r.services {
			if w, ok := want[name]; !ok || serviceKey(w) != s.key {
				removed = append(removed, s)
			}
		}
	} else {
		for _, name := range gone {
			if s, ok := r.services[name]; ok && want[name] == nil {
				removed = append(removed, s)
			}
		}
		for i := range services {
			w := &services[i]
			if s, ok := r.services[w.Name]; ok && want[w.Name] == w && serviceKey(w) != s.key {
				removed = append(removed, s)
			}
		}
	}
	for _, s := range removed {
		if err := r.removeService(s); err != nil {
			return err
		}
	}
	// in the config's order, not the map's: it is the order the services were made in,
	// mostly, and a walk through 100 000 of them in memory order misses the cache far less
	var names []string
	for i := range services {
		cfg := &services[i]
		if want[cfg.Name] != cfg {
			continue // a name given twice: the last one counts
		}
		if s, ok := r.services[cfg.Name]; !ok || !r.unchanged(s, cfg, healthy) {
			names = append(names, cfg.Name)
		}
	}
	slices.Sort(names) // deterministic id allocation for the same config
	var (
		todo  []*pending
		w     writes
		rings = map[uint32][]uint32{}
	)
	builder := startRingBuilder()
	defer builder.wait() // on an early return too: no builder outlives the Apply
	for _, name := range names {
		p, err := r.prepareService(want[name], healthy, &w)
		if err != nil {
			return err
		}
		todo = append(todo, p)
		if p.build {
			builder.add(p)
		}
	}
	// 2. ... in one batch for all services ...
	if err := r.writeVIPAddrs(w.vips); err != nil {
		return err
	}
	if err := r.writeBackends(w.backends); err != nil {
		return err
	}
	builder.wait()
	if err := ringsBuilt(todo); err != nil {
		return err
	}
	for _, p := range todo {
		if p.changed && p.ring != nil {
			rings[p.s.id] = p.ring
		}
	}
	// 3. ... the rings that changed are swapped in, each in one update, all in one
	// batch ...
	if err := r.dp.PutRings(rings); err != nil {
		for _, p := range todo {
			if p.changed {
				p.s.ringStale = true // some may be in: the next Apply writes them all
			}
		}
		return err
	}
	for _, p := range todo {
		if p.changed && p.ring != nil {
			p.s.setRing(p)
		}
	}
	var entries []entryWrite
	for _, p := range todo {
		if err := r.finishService(p, &entries); err != nil {
			return err
		}
	}
	// 5. ... the service entries last, in one batch: a new service becomes visible with
	// its ring in place
	return r.writeEntries(entries)
}

// writes are the VIP address and backend writes that the services of an Apply need
// before their rings, gathered to go in with one batch each.
type writes struct {
	vips     []netip.Addr // whose count of services went up
	backends []backendWrite
}

// prepareService does the first half of a service's update (steps 1 and 2: the writes
// it adds to w, for the caller to make before any ring), and says whether its ring
// needs a build.
func (r *Reconciler) prepareService(cfg *config.Service, healthy HealthFunc, w *writes) (*pending, error) {
	s, ok := r.services[cfg.Name]
	if ok {
		r.keep(cfg.Name, &s.cfg)
	} else {
		r.keep(cfg.Name, nil)
		id, ok := r.serviceIDs.alloc()
		if !ok {
			return nil, fmt.Errorf("service %s: no free service id (limit %d, node.max_services)", cfg.Name, r.serviceIDs.max-1)
		}
		if err := r.dp.ResetServiceCounters(id); err != nil {
			r.serviceIDs.free(id)
			return nil, err
		}
		s = &service{cfg: *cfg, id: id, key: serviceKey(cfg), backends: map[netip.Addr]*backend{}}
		r.services[cfg.Name] = s
		r.vipAddrs[cfg.VIP]++
		w.vips = append(w.vips, cfg.VIP)
	}
	s.cfg = *cfg
	s.cfg.Backends = slices.Clone(cfg.Backends)
	s.settled = false

	// 1. backend slots and the state each should have now
	target := map[*backend]datapath.BackendState{}
	all := backendsOf(&s.cfg)
	for i := range all {
		bc := &all[i]
		b, ok := s.backends[bc.Address]
		if !ok {
			id, ok := r.backendIDs.alloc()
			if !ok {
				return nil, fmt.Errorf("service %s: backend %s: no free backend id (limit %d, node.max_backends)", cfg.Name, bc.Address, r.backendIDs.max-1)
			}
			b = &backend{id: id, state: datapath.BackendUnused}
			s.backends[bc.Address] = b
		}
		b.cfg = *bc
		target[b] = targetState(&s.cfg, bc, healthy)
	}

	// 2. backends that come up are written before the ring names them (and those whose
	// encapsulation changed, in their current state: a backend agent takes both) ...
	for b, state := range target {
		switch {
		case state == datapath.BackendUp && b.state != state:
			w.backends = append(w.backends, backendWriteOf(s, b, state))
		case b.state != datapath.BackendUnused && b.encap != encapOf(&s.cfg, &b.cfg):
			w.backends = append(w.backends, backendWriteOf(s, b, b.state))
		}
	}
	p := &pending{s: s, target: target, inputs: ringInputsOf(s, target)}
	resized := s.ring != nil && uint32(len(s.ring)) != s.cfg.TableSize
	p.build = s.ringStale || resized || !slices.Equal(p.inputs, s.ringInputs)
	if !p.build {
		p.ring = s.ring // same inputs, same ring: no Maglev build, no write
	}
	return p, nil
}

// targetState is the state a backend is to have: down when its health check fails,
// draining at weight 0, else up. The local pseudo-backend has no check: the steering
// controller sees the tunnelled origins' health, and gives them no share without it.
func targetState(s *config.Service, b *config.Backend, healthy HealthFunc) datapath.BackendState {
	switch {
	case !isLocal(s, b) && !healthy(s, b):
		return datapath.BackendDown
	case b.Weight == 0:
		return datapath.BackendDraining
	}
	return datapath.BackendUp
}

// unchanged reports whether a service needs nothing written: its last Apply ran to its
// end, nothing the data plane reads of its config differs, and every backend is to
// stay in the state it is in. It then takes the rest of cfg (BGP, health settings,
// origins) and Apply passes it by: a node with 100 000 services spends an Apply for
// one changed backend on that service, not on a walk through all of them.
func (r *Reconciler) unchanged(s *service, cfg *config.Service, healthy HealthFunc) bool {
	if !s.settled || !sameDataplane(&s.cfg, cfg) {
		return false
	}
	all := backendsOf(cfg)
	for i := range all {
		bc := &all[i]
		if b := s.backends[bc.Address]; b == nil || b.state != targetState(cfg, bc, healthy) {
			return false
		}
	}
	if !sameRest(&s.cfg, cfg) {
		r.keep(cfg.Name, &s.cfg)
		backends := s.cfg.Backends // equal to cfg's, and not shared with the caller's
		s.cfg = *cfg
		s.cfg.Backends = backends
	}
	return true
}

// sameDataplane reports whether two configs of a service program the same data plane:
// the same key, forwarding, scheduler, table size, backends in the same order (the
// order the ring is built in) and local pseudo-backend.
func sameDataplane(a, b *config.Service) bool {
	wa, la := localWeight(a)
	wb, lb := localWeight(b)
	return a.Name == b.Name && a.VIP == b.VIP && a.Port == b.Port && a.Protocol == b.Protocol &&
		a.Forwarding == b.Forwarding && a.GUEPort == b.GUEPort && a.BackendPort == b.BackendPort &&
		a.Scheduler == b.Scheduler && a.TableSize == b.TableSize && slices.Equal(a.Backends, b.Backends) &&
		la == lb && wa == wb
}

// sameRest reports whether two configs of a service agree in what the data plane does
// not read: origins, health check, BGP attributes, a tunnel service's PROXY header.
func sameRest(a, b *config.Service) bool {
	x, y := a.BGP, b.BGP
	return slices.Equal(a.Origins, b.Origins) && a.Health == b.Health && a.ProxyProtocol == b.ProxyProtocol &&
		slices.Equal(x.Communities, y.Communities) && slices.Equal(x.LargeCommunities, y.LargeCommunities) &&
		(x.MED == nil) == (y.MED == nil) && (x.MED == nil || *x.MED == *y.MED) && x.Prepend == y.Prepend
}

// ringBuilder builds the rings of the services that need one, on every CPU, while
// the Apply goes on preparing the next services and writing their backends: a table
// takes from 10 µs (509 slots) to over a millisecond (65537), so a node programming
// 100 000 services spends much of its time here, and the builds no longer wait for
// the preparation of all of them. A build reads only its pending's service config
// and inputs, which nothing else writes until wait returns.
type ringBuilder struct {
	work    chan *pending
	wg      sync.WaitGroup
	stopped bool
}

func startRingBuilder() *ringBuilder {
	b := &ringBuilder{work: make(chan *pending, 1024)}
	for range runtime.GOMAXPROCS(0) {
		b.wg.Go(func() {
			for p := range b.work {
				p.ring, p.buildErr = buildRing(p.s, p.inputs)
			}
		})
	}
	return b
}

func (b *ringBuilder) add(p *pending) { b.work <- p }

// wait returns once every ring added is built; the builder takes no more.
func (b *ringBuilder) wait() {
	if !b.stopped {
		b.stopped = true
		close(b.work)
		b.wg.Wait()
	}
}

// ringsBuilt says, for each service whose ring was built, whether it differs from the
// kernel's, and returns the builds' errors.
func ringsBuilt(todo []*pending) error {
	var errs []error
	for _, p := range todo {
		if !p.build {
			continue
		}
		errs = append(errs, p.buildErr)
		s := p.s
		p.changed = s.ringStale || !slices.Equal(p.ring, s.ring)
		if !p.changed {
			s.ringInputs = p.inputs // e.g. a reordered config: the same ring
		}
	}
	return errors.Join(errs...)
}

// setRing records that p's ring is the kernel's.
func (s *service) setRing(p *pending) {
	s.ring, s.ringInputs, s.ringStale = p.ring, p.inputs, false
}

// finishService does the second half of a service's update, once its ring is in,
// but for its lb_vips entry: that it adds to entries if it changed.
func (r *Reconciler) finishService(p *pending, entries *[]entryWrite) error {
	s := p.s
	if p.changed && p.ring == nil {
		if err := r.dp.DeleteRing(s.id); err != nil {
			s.ringStale = true
			return err
		}
		s.setRing(p)
	}
	// 4. ... and backends leave the up state only once no ring names them.
	for b, state := range p.target {
		if state != datapath.BackendUp && b.state != state {
			if err := r.putBackend(s, b, state); err != nil {
				return err
			}
		}
	}
	for addr, b := range s.backends {
		if _, ok := p.target[b]; !ok {
			if err := r.dp.DeleteBackend(b.id); err != nil {
				return err
			}
			r.backendIDs.free(b.id)
			delete(s.backends, addr)
		}
	}
	entry := datapath.Service{
		ID:         s.id,
		SourceHash: s.cfg.Scheduler == config.MaglevSource,
	}
	if s.entry == nil || *s.entry != entry {
		*entries = append(*entries, entryWrite{s: s, entry: entry})
		return nil
	}
	s.settled = true
	return nil
}

// entryWrite is a service's lb_vips entry to write.
type entryWrite struct {
	s     *service
	entry datapath.Service
}

// writeEntries writes service entries in one batch, and records those the kernel took:
// their services are settled.
func (r *Reconciler) writeEntries(writes []entryWrite) error {
	if len(writes) == 0 {
		return nil
	}
	keys := make([]datapath.ServiceKey, len(writes))
	entries := make([]datapath.Service, len(writes))
	for i, w := range writes {
		keys[i], entries[i] = w.s.key, w.entry
	}
	n, err := r.dp.PutServices(keys, entries)
	for i, w := range writes[:n] {
		w.s.entry, w.s.settled = &entries[i], true
	}
	return err
}

func (r *Reconciler) putBackend(s *service, b *backend, state datapath.BackendState) error {
	return r.writeBackends([]backendWrite{backendWriteOf(s, b, state)})
}

// backendWrite is a backend slot's write, and what the reconciler records of it once
// the kernel has it.
type backendWrite struct {
	b     *backend
	state datapath.BackendState
	encap encap
	value datapath.Backend
}

func backendWriteOf(s *service, b *backend, state datapath.BackendState) backendWrite {
	enc := encapOf(&s.cfg, &b.cfg)
	v := datapath.Backend{Addr: b.cfg.Address, ServiceID: s.id, State: state, GUE: enc.gue, NAT: enc.nat, Local: enc.local}
	if enc.gue {
		v.GUEPort = enc.port
	} else {
		v.NATPort = enc.port
	}
	return backendWrite{b: b, state: state, encap: enc, value: v}
}

// writeBackends writes backend slots in one batch, and records those the kernel took.
func (r *Reconciler) writeBackends(writes []backendWrite) error {
	if len(writes) == 0 {
		return nil
	}
	ids := make([]uint32, len(writes))
	values := make([]datapath.Backend, len(writes))
	for i, w := range writes {
		ids[i], values[i] = w.b.id, w.value
	}
	n, err := r.dp.PutBackends(ids, values)
	for _, w := range writes[:n] {
		w.b.state, w.b.encap = w.state, w.encap
	}
	return err
}

// ringInputsOf lists the backends that are to be up, in config order, as the ring is
// built from them.
func ringInputsOf(s *service, target map[*backend]datapath.BackendState) []ringInput {
	var in []ringInput
	all := backendsOf(&s.cfg)
	for i := range all {
		bc := &all[i]
		b := s.backends[bc.Address]
		if target[b] == datapath.BackendUp {
			in = append(in, ringInput{key: MaglevKey(&s.cfg, bc), weight: bc.Weight, id: b.id})
		}
	}
	return in
}

// buildRing returns the ring of backend ids over the inputs, nil if there are none.
func buildRing(s *service, inputs []ringInput) ([]uint32, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	mb := make([]maglev.Backend, len(inputs))
	for i, in := range inputs {
		mb[i] = maglev.Backend{Key: in.key, Weight: in.weight}
	}
	table, err := maglev.Build(MaglevSeed(&s.cfg), mb, s.cfg.TableSize)
	if err != nil {
		return nil, fmt.Errorf("service %s: maglev: %w", s.cfg.Name, err)
	}
	ring := make([]uint32, len(table))
	for i, idx := range table {
		ring[i] = inputs[idx].id
	}
	return ring, nil
}

func (r *Reconciler) removeService(s *service) error {
	r.keep(s.cfg.Name, &s.cfg)
	// a removal that fails part way leaves a service the restore must write again
	s.settled = false
	if err := r.dp.DeleteService(s.key); err != nil {
		return err
	}
	s.entry = nil
	if err := r.dp.DeleteRing(s.id); err != nil {
		s.ringStale = true
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

// writeVIPAddrs writes the counts of services of addrs (a VIP address may come more
// than once: it is written once).
func (r *Reconciler) writeVIPAddrs(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	counts := make([]uint32, len(addrs))
	for i, a := range addrs {
		counts[i] = r.vipAddrs[a]
	}
	return r.dp.PutVIPAddrs(addrs, counts)
}

func (r *Reconciler) dropVIPAddr(a netip.Addr) error {
	r.vipAddrs[a]--
	if r.vipAddrs[a] > 0 {
		return r.writeVIPAddrs([]netip.Addr{a})
	}
	delete(r.vipAddrs, a)
	return r.dp.DeleteVIPAddr(a)
}
