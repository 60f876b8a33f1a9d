package reconcile

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/bgp"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/health"
)

// The controller: from one desired state (the services of every source, and the
// backends' health) it derives and applies everything the node writes.
//
//	source updates ──► Submit ─┐ (merge sources, Commit, then:)
//	health changes ──► HealthChanged ─┼─► health targets ─► BPF maps (Reconciler.Apply)
//	attach / stop  ──► Attached, Stop ┘     ─► neighbour entries ─► BGP announcements ─► View
//
// Submit also puts the tunnel services' VIPs on lo (Loopback), before the maps.
//
// A refused update (a conflict between sources, a failed Commit, a kernel error) leaves
// everything as it was: the maps and lo are restored, the health targets put back, the source
// told to Revert. Every method but View must be called from one goroutine, the node's run
// loop; View is safe from any.

// Health is the health checker as the controller drives it; *health.Checker implements it.
type Health interface {
	Set(targets []health.Target)
	Up(t health.Target) bool
	Known(t health.Target) bool
}

// Neighbours keeps the link-layer next hops of the backends resolved (XDP forwards
// through the kernel's neighbour table but never makes it resolve an entry).
type Neighbours interface {
	Ensure(backends []netip.Addr)
}

// Loopback holds the VIPs of the tunnel services on lo (the XDP program does not know
// them, so their packets pass to the stack, which takes them once the VIP is the
// node's); *datapath.Loopback implements it. Set makes the VIPs it put there exactly
// vips, or fails and leaves lo as it was.
type Loopback interface {
	Set(vips []netip.Addr) error
}

// Options are the controller's parts. Speaker is nil when the node has no bgp section;
// Loopback is nil when it has no tunnels section (no edge serves the tunnel services,
// so their VIPs stay off lo).
type Options struct {
	Dataplane  Dataplane
	Loopback   Loopback
	Settings   config.Node // read on every packet: entropy source, new-flow bound
	Speaker    bgp.Speaker
	BGP        *config.BGP // the speaker's config (ASN, router id, drain time); nil without
	Health     Health
	Neighbours Neighbours
	Clock      clock.Clock
	Log        *slog.Logger
}

// Controller is the node's one writer of the data plane, the health targets, the
// neighbour entries, the tunnel VIPs on lo and the BGP announcements.
type Controller struct {
	log        *slog.Logger
	clock      clock.Clock
	maps       *Reconciler
	settings   config.Node
	speaker    bgp.Speaker
	bgp        *config.BGP
	health     Health
	neighbours Neighbours
	loopback   Loopback // nil: no tunnel VIPs on lo

	// served is the union of what each source last sent and got applied, sorted by
	// name; owner says which source serves a name, keys which "source/service" a
	// VIP:port/protocol; byVIP is the served services of each VIP, sorted by name.
	served   []*config.Service
	owner    map[string]string
	keys     map[serviceKeyOf]string
	byVIP    map[netip.Addr][]*config.Service
	attached bool
	stopping bool
	// holds counts the Hold calls not Released yet: while any, nothing is announced
	// (holdReason says why).
	holds      int
	holdReason string
	announce   map[string]Announcement // by service name
	announced  map[netip.Addr]bool     // the VIPs the speaker announces, as last read or made
	// connected holds the tunnel services that have a connector attached to an edge
	// (this node's, or with a fleet any node's): the only tunnel services announced.
	connected map[string]bool

	mu   sync.Mutex // guards view
	view View
}

// View is what the controller last applied, for the status and metrics (read on other
// goroutines than the run loop).
type View struct {
	Services []*ServiceStatus // sorted by name; the tunnel services are not among them
	// Tunnels are the tunnel services served (by this node's edge), sorted by name.
	Tunnels []config.Service
	// Edge are the services whose connections this node's tunnel edge ends, sorted by
	// name: the tunnel services, and those with origins reached by tunnel (whose share
	// of the flows the XDP program passes to the stack).
	Edge     []config.Service
	announce announcements
	// Revisions is the last applied revision of each source.
	Revisions map[string]string
}

// ConflictError is an update refused because another source serves the same name or
// VIP:port/protocol.
type ConflictError struct{ Message string }

func (e *ConflictError) Error() string { return e.Message }

// KernelError is an update the kernel refused; the previous state was restored.
type KernelError struct{ Err error }

func (e *KernelError) Error() string {
	return fmt.Sprintf("the kernel refused the change, nothing was changed: %v", e.Err)
}
func (e *KernelError) Unwrap() error { return e.Err }

func NewController(o Options) *Controller {
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	c := &Controller{
		log: o.Log, clock: o.Clock, maps: New(o.Dataplane), settings: o.Settings,
		speaker: o.Speaker, bgp: o.BGP, health: o.Health, neighbours: o.Neighbours, loopback: o.Loopback,
		owner: map[string]string{}, keys: map[serviceKeyOf]string{}, byVIP: map[netip.Addr][]*config.Service{},
		announce: map[string]Announcement{}, announced: map[netip.Addr]bool{},
	}
	c.view = View{Revisions: map[string]string{}}
	return c
}

// Submit applies a source's update as one transaction: check it against the other
// sources, Commit it, set the health targets, write the maps; on a kernel error put
// everything back and Revert. Then the neighbours, the announcements and the view follow:
// of every service, or (Update.Delta) of those the update names only.
func (c *Controller) Submit(u Update) error {
	var (
		served []*config.Service
		ch     *change
		err    error
	)
	if u.Delta {
		served, ch, err = c.delta(u)
	} else {
		served, err = c.whole(u)
	}
	if err != nil {
		return err
	}
	if u.Commit != nil {
		if err := u.Commit(); err != nil {
			return err
		}
	}
	if err := c.apply(served, ch); err != nil {
		// the maps are as before, but for the ids of the services they put back
		if ch == nil {
			c.publish()
		} else {
			c.publishChange(ch.undone())
		}
		if u.Revert != nil {
			if rerr := u.Revert(); rerr != nil {
				c.log.Error("the kernel refused an update and its source could not take it back: the source now differs from what the node runs",
					"source", u.Source, "revision", u.Revision, "err", rerr)
			}
		}
		return &KernelError{Err: err}
	}
	c.index(u.Source, ch)
	c.setRevision(u.Source, u.Revision)
	// a changed bgp section (the node's communities) reaches every route, not only
	// those of the services a Delta update names
	bgpChanged := u.BGP != nil && c.setBGP(u.BGP)
	if ch == nil || bgpChanged {
		c.settle()
	} else {
		c.settleChange(ch)
	}
	return nil
}

// whole is the services served once a source's update of all its services replaces
// what it sent before.
func (c *Controller) whole(u Update) ([]*config.Service, error) {
	next := map[string][]*config.Service{}
	for _, s := range c.served {
		if src := c.owner[s.Name]; src != u.Source {
			next[src] = append(next[src], s)
		}
	}
	for i := range u.Services {
		next[u.Source] = append(next[u.Source], &u.Services[i])
	}
	return union(next)
}

// change is what a Delta update changes among the served services.
type change struct {
	changed []*config.Service // the new state of those added or changed
	gone    []string          // the names of those removed
	old     []*config.Service // the served state of those changed or removed (added: none)
}

// undone is the change that undoes ch: the services it changed or removed back as
// they were, those it added gone.
func (ch *change) undone() *change {
	back := &change{changed: ch.old, old: ch.changed}
	had := map[string]bool{}
	for _, s := range ch.old {
		had[s.Name] = true
	}
	for _, s := range ch.changed {
		if !had[s.Name] {
			back.gone = append(back.gone, s.Name)
		}
	}
	return back
}

// delta checks a Delta update against the other sources and against the source's own
// services (a VIP:port/protocol served once), and returns the services served once it
// is applied and what it changes. It costs in proportion to the update, but for one
// copy of the served list.
func (c *Controller) delta(u Update) ([]*config.Service, *change, error) {
	ch := &change{}
	byName := map[string]*config.Service{} // the update's, nil: gone
	released := map[serviceKeyOf]bool{}    // keys of the source's services the update moves or removes
	for _, name := range u.Gone {
		if c.owner[name] != u.Source {
			continue
		}
		if old, ok := c.find(name); ok {
			byName[name] = nil
			ch.gone = append(ch.gone, name)
			ch.old = append(ch.old, old)
			released[keyOf(old)] = true
		}
	}
	for i := range u.Services {
		s := &u.Services[i]
		if other, ok := c.owner[s.Name]; ok && other != u.Source {
			return nil, nil, &ConflictError{fmt.Sprintf("service %s of %s: %s serves a service of that name", s.Name, u.Source, other)}
		}
		if _, again := byName[s.Name]; again {
			return nil, nil, &ConflictError{fmt.Sprintf("service %s of %s: the update names it twice", s.Name, u.Source)}
		}
		byName[s.Name] = s
		ch.changed = append(ch.changed, s)
		if old, ok := c.find(s.Name); ok {
			ch.old = append(ch.old, old)
			released[keyOf(old)] = true
		}
	}
	claimed := map[serviceKeyOf]string{}
	for _, s := range ch.changed {
		k, me := keyOf(s), u.Source+"/"+s.Name
		other, ok := claimed[k]
		if !ok && !released[k] {
			other, ok = c.keys[k]
		}
		if ok && other != me {
			return nil, nil, &ConflictError{fmt.Sprintf("service %s of %s: %s serves %s port %d/%s", s.Name, u.Source, other, s.VIP, s.Port, s.Protocol)}
		}
		claimed[k] = me
	}
	return merged(c.served, byName), ch, nil
}

// find is the served service of that name.
func (c *Controller) find(name string) (*config.Service, bool) {
	i, ok := slices.BinarySearchFunc(c.served, name, byServiceName)
	if !ok {
		return nil, false
	}
	return c.served[i], true
}

func byServiceName(s *config.Service, name string) int { return strings.Compare(s.Name, name) }

// merged is served, sorted by name, with the services of changes put in (nil: taken out).
func merged(served []*config.Service, changes map[string]*config.Service) []*config.Service {
	return mergedByName(served, changes, func(s *config.Service) string { return s.Name })
}

// mergedByName is list (sorted by name) with the elements of changes put in (nil:
// taken out), in one copy of list.
func mergedByName[T any](list []*T, changes map[string]*T, name func(*T) string) []*T {
	names := slices.Sorted(maps.Keys(changes))
	out := make([]*T, 0, len(list)+len(names))
	i := 0
	for _, n := range names {
		j, found := slices.BinarySearchFunc(list[i:], n, func(e *T, n string) int { return strings.Compare(name(e), n) })
		out = append(out, list[i:i+j]...)
		i += j
		if found {
			i++
		}
		if e := changes[n]; e != nil {
			out = append(out, e)
		}
	}
	return append(out, list[i:]...)
}

// index brings the indexes of the served services in line once source's update is
// applied: rebuilt after a whole update (ch nil), else for the change's services only.
func (c *Controller) index(source string, ch *change) {
	if ch == nil {
		// a service the source does not send is another source's (union)
		prev := c.owner
		c.owner, c.keys, c.byVIP = map[string]string{}, map[serviceKeyOf]string{}, map[netip.Addr][]*config.Service{}
		for _, s := range c.served {
			src, ok := prev[s.Name]
			if !ok {
				src = source
			}
			c.indexService(src, s)
		}
		return
	}
	for _, old := range ch.old {
		if c.keys[keyOf(old)] == source+"/"+old.Name {
			delete(c.keys, keyOf(old))
		}
		delete(c.owner, old.Name)
		vips := slices.DeleteFunc(slices.Clone(c.byVIP[old.VIP]), func(s *config.Service) bool { return s.Name == old.Name })
		if len(vips) == 0 {
			delete(c.byVIP, old.VIP)
		} else {
			c.byVIP[old.VIP] = vips
		}
	}
	for _, s := range ch.changed {
		c.indexService(source, s)
	}
}

func (c *Controller) indexService(source string, s *config.Service) {
	c.owner[s.Name] = source
	c.keys[keyOf(s)] = source + "/" + s.Name
	vips := c.byVIP[s.VIP]
	i, _ := slices.BinarySearchFunc(vips, s.Name, byServiceName)
	c.byVIP[s.VIP] = slices.Insert(slices.Clip(vips), i, s)
}

// setBGP takes a changed bgp section (same ASN and router id: the source refuses
// others), and reports whether it changed: the speaker brings its peers in line,
// touching only the sessions whose settings changed, and the next settle puts the
// node's communities on every VIP. The
// source has committed the change; a speaker error is logged and the sessions it did
// not reach keep their old settings until the next reload.
func (c *Controller) setBGP(b *config.BGP) (changed bool) {
	if c.speaker == nil || reflect.DeepEqual(b, c.bgp) {
		return false
	}
	if err := c.speaker.SetPeers(b.Peers); err != nil {
		c.log.Error("BGP peers changed only in part", "err", err)
	}
	c.mu.Lock()
	c.bgp = b
	c.mu.Unlock()
	c.log.Info("bgp section applied", "peers", len(b.Peers), "communities", len(b.Communities), "large_communities", len(b.LargeCommunities))
	return true
}

// apply writes served and the current health to the health checker, the tunnel VIPs
// on lo and the maps: all of them, or (ch) what the change touches. On a kernel error
// the maps are restored by the Reconciler, lo by Loopback.Set (a failed Set) or here
// (failed maps), and the targets here.
func (c *Controller) apply(served []*config.Service, ch *change) error {
	// a change that leaves the targets, or the VIPs at the edge, as they were need
	// not hand the checker, or lo, every service's again
	setTargets := ch == nil || !maps.Equal(targetSet(ch.old), targetSet(ch.changed))
	setLoopback := ch == nil || slices.ContainsFunc(ch.old, atEdge) || slices.ContainsFunc(ch.changed, atEdge)
	if setTargets {
		c.health.Set(targets(served))
	}
	if setLoopback {
		if err := c.setLoopback(served); err != nil {
			if setTargets {
				c.health.Set(targets(c.served))
			}
			return err
		}
	}
	var err error
	if ch == nil {
		err = c.maps.Apply(&config.Config{Node: c.settings, Services: derefAll(inDataplane(served))}, c.healthy)
	} else {
		// a service become a tunnel service leaves the data plane
		gone := slices.Clone(ch.gone)
		for _, s := range ch.changed {
			if isTunnel(s) {
				gone = append(gone, s.Name)
			}
		}
		err = c.maps.ApplyChanges(&c.settings, derefAll(inDataplane(ch.changed)), gone, c.healthy)
	}
	if err != nil {
		if setTargets {
			c.health.Set(targets(c.served))
		}
		if setLoopback {
			if lerr := c.setLoopback(c.served); lerr != nil {
				c.log.Error("the tunnel VIPs on lo could not be put back after a refused update", "err", lerr)
			}
		}
		return err
	}
	c.served = served
	return nil
}

// setLoopback puts on lo the VIPs of the services of served that the tunnel edge ends
// connections of, and only those: the stack then takes their packets as its own.
func (c *Controller) setLoopback(served []*config.Service) error {
	if c.loopback == nil {
		return nil
	}
	var vips []netip.Addr
	for _, s := range served {
		if atEdge(s) {
			vips = append(vips, s.VIP)
		}
	}
	return c.loopback.Set(vips)
}

// HealthChanged re-applies the maps after a backend's health changed.
func (c *Controller) HealthChanged() {
	cfg := &config.Config{Node: c.settings, Services: derefAll(inDataplane(c.served))}
	if err := c.maps.Apply(cfg, c.healthy); err != nil {
		c.log.Error("applying a health change failed", "err", err)
	}
	c.settle()
}

// Attached says the data plane is attached: VIPs with a healthy backend may be announced.
func (c *Controller) Attached() {
	c.attached = true
	c.settle()
}

// TunnelsConnected says which tunnel services have a connector attached (to this
// node's edge or, in a fleet, any edge): those are announced.
func (c *Controller) TunnelsConnected(services map[string]bool) {
	if maps.Equal(services, c.connected) {
		return
	}
	c.connected = maps.Clone(services)
	c.settle()
}

// Hold withdraws every VIP until as many Release calls as Hold calls came: the node
// doubts its own state (it did not run for a while and catches up, see internal/node).
// The services come back one by one afterwards, each once the health of all its
// backends is known again: a VIP withdrawn waits for that (wantedAnnouncements).
// reason is what the status shows for every service meanwhile.
func (c *Controller) Hold(reason string) {
	c.holds++
	c.holdReason = reason
	c.settle()
}

// Release ends one Hold.
func (c *Controller) Release() {
	c.holds = max(c.holds-1, 0)
	c.settle()
}

// Refresh re-resolves the backends' next hops (routes change). The view does not show
// next hops: it is left as it is (republishing it copied every service's status every
// 5 s, whatever changed).
func (c *Controller) Refresh() {
	c.neighbours.Ensure(backendAddrs(c.served))
}

// Stop withdraws every VIP, keeps forwarding for bgp.drain_time so the routers move the
// traffic away, then closes the BGP sessions. It returns early, closing the sessions at
// once, when abort is closed.
func (c *Controller) Stop(abort <-chan struct{}) {
	c.stopping = true
	c.settle()
	if c.speaker == nil {
		return
	}
	if d := c.DrainTime(); d > 0 {
		c.log.Info("draining: VIPs withdrawn, still forwarding", "drain_time", d)
		clock.Sleep(c.clock, d, abort)
	}
	if err := c.speaker.Close(); err != nil {
		c.log.Error("closing BGP sessions", "err", err)
	}
	c.log.Info("BGP sessions closed")
}

// settle brings what follows from the served services and their health in line after
// any change: next hops, announcements, the view.
func (c *Controller) settle() {
	c.neighbours.Ensure(backendAddrs(c.served))
	c.syncAnnouncements()
	c.publish()
}

// settleChange is settle for the services a Delta update touched only: the others'
// next hops, announcements and status are as they were.
func (c *Controller) settleChange(ch *change) {
	c.neighbours.Ensure(backendAddrs(ch.changed))
	c.syncAnnouncementsOf(ch)
	c.publishChange(ch)
}

func (c *Controller) healthy(s *config.Service, b *config.Backend) bool {
	if !hasCheck(s) {
		return true
	}
	return c.health.Up(health.Target{Addr: b.Address, Check: s.Health})
}

// checked reports whether a backend's health is known: it has no check, or its check
// has passed Rise times or failed since the backend was set.
func (c *Controller) checked(s *config.Service, b *config.Backend) bool {
	return !hasCheck(s) || c.health.Known(health.Target{Addr: b.Address, Check: s.Health})
}

func (c *Controller) setRevision(source, rev string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.view.Revisions = maps.Clone(c.view.Revisions)
	c.view.Revisions[source] = rev
}

func (c *Controller) publish() {
	services := c.maps.Snapshot()
	announce := announcements{base: maps.Clone(c.announce)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.view.Services = services
	c.view.Tunnels, c.view.Edge = c.edgeServices()
	c.view.announce = announce
}

// publishChange is publish for the services of a change only: the view's others are
// shared with the previous view, which its readers may still hold.
func (c *Controller) publishChange(ch *change) {
	statuses := map[string]*ServiceStatus{} // nil: not in the data plane
	recent := map[string]announced{}
	for _, name := range ch.gone {
		statuses[name] = nil
		recent[name] = announced{}
	}
	for _, s := range ch.changed {
		st, _ := c.maps.Status(s.Name)
		statuses[s.Name] = st
		recent[s.Name] = announced{Announcement: c.announce[s.Name], ok: true}
	}
	edge := slices.ContainsFunc(ch.old, atEdge) || slices.ContainsFunc(ch.changed, atEdge)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.view.Services = mergedByName(c.view.Services, statuses, func(s *ServiceStatus) string { return s.Config.Name })
	if edge {
		c.view.Tunnels, c.view.Edge = c.edgeServices()
	}
	c.view.announce = c.view.announce.with(recent, c.announce)
}

// edgeServices are the view's tunnel services and the services at the edge.
func (c *Controller) edgeServices() (tunnels, edge []config.Service) {
	tunnels = derefAll(slices.DeleteFunc(slices.Clone(c.served), func(s *config.Service) bool { return !isTunnel(s) }))
	edge = derefAll(slices.DeleteFunc(slices.Clone(c.served), func(s *config.Service) bool { return !atEdge(s) }))
	return tunnels, edge
}

// View returns what the controller last applied. The caller must not modify it.
func (c *Controller) View() View {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view
}

// Service is one service of the view, by a binary search: a lookup of one service
// costs no walk through all of them.
func (v View) Service(name string) (*ServiceStatus, bool) {
	i, ok := slices.BinarySearchFunc(v.Services, name, func(s *ServiceStatus, name string) int { return strings.Compare(s.Config.Name, name) })
	if !ok {
		return nil, false
	}
	return v.Services[i], true
}

// Announcement is whether a served service is announced, and why; false when the
// service is not served.
func (v View) Announcement(name string) (Announcement, bool) {
	return v.announce.get(name)
}

// BGP is the speaker and its config, for the status (nil, nil without bgp). The
// speaker is fixed for the controller's lifetime; the config is the one applied last.
func (c *Controller) BGP() (bgp.Speaker, *config.BGP) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.speaker, c.bgp
}

// DrainTime is how long Stop keeps forwarding after withdrawing (0 without bgp).
func (c *Controller) DrainTime() time.Duration {
	if _, b := c.BGP(); b != nil {
		return b.DrainTime
	}
	return 0
}

// union merges the sources' services, sorted by name; two sources may not serve the
// same name or the same VIP:port/protocol.
func union(sources map[string][]*config.Service) ([]*config.Service, error) {
	names := slices.Sorted(maps.Keys(sources))
	byName := map[string]string{}      // service name → source
	byKey := map[serviceKeyOf]string{} // VIP:port/protocol → "source/service"
	var out []*config.Service
	for _, src := range names {
		svcs := sources[src]
		for _, s := range svcs {
			if other, ok := byName[s.Name]; ok && other != src {
				return nil, &ConflictError{fmt.Sprintf("service %s of %s: %s serves a service of that name", s.Name, src, other)}
			}
			byName[s.Name] = src
			k := keyOf(s)
			if other, ok := byKey[k]; ok && other != src+"/"+s.Name {
				return nil, &ConflictError{fmt.Sprintf("service %s of %s: %s serves %s port %d/%s", s.Name, src, other, s.VIP, s.Port, s.Protocol)}
			}
			byKey[k] = src + "/" + s.Name
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *config.Service) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

type serviceKeyOf struct {
	vip   netip.Addr
	port  uint16
	proto config.Protocol
}

func keyOf(s *config.Service) serviceKeyOf { return serviceKeyOf{s.VIP, s.Port, s.Protocol} }

// inDataplane are the services of the XDP program: all but the tunnel services, whose
// VIP the program then does not know, so that their packets pass to the stack.
func inDataplane(ss []*config.Service) []*config.Service {
	return slices.DeleteFunc(slices.Clone(ss), isTunnel)
}

func isTunnel(s *config.Service) bool { return s.Forwarding == config.Tunnel }

// atEdge tells whether the node's tunnel edge ends (some of) a service's connections.
func atEdge(s *config.Service) bool { return isTunnel(s) || s.TunnelledOrigins() }

func derefAll(ss []*config.Service) []config.Service {
	out := make([]config.Service, len(ss))
	for i, s := range ss {
		out[i] = *s
	}
	return out
}

func hasCheck(s *config.Service) bool {
	return s.Health.Kind != config.HealthNone && s.Health.Kind != ""
}

// targets are the health-check targets of the services: one per backend of a checked
// service (the checker runs identical targets once).
func targets(ss []*config.Service) []health.Target {
	var out []health.Target
	for _, s := range ss {
		if !hasCheck(s) {
			continue
		}
		for _, b := range s.Backends {
			out = append(out, health.Target{Addr: b.Address, Check: s.Health})
		}
	}
	return out
}

// targetSet is the targets of the services, once each.
func targetSet(ss []*config.Service) map[health.Target]bool {
	out := map[health.Target]bool{}
	for _, t := range targets(ss) {
		out[t] = true
	}
	return out
}

func backendAddrs(ss []*config.Service) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		for _, b := range s.Backends {
			out = append(out, b.Address)
		}
	}
	return out
}
