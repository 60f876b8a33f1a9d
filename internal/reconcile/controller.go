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

	sources  map[string][]config.Service // by source: what each last sent and got applied
	served   []*config.Service           // the union, sorted by name
	attached bool
	stopping bool
	// holds counts the Hold calls not Released yet: while any, nothing is announced
	// (holdReason says why).
	holds      int
	holdReason string
	announce   map[string]Announcement // by service name
	// connected holds the tunnel services that have a connector attached to an edge
	// (this node's, or with a fleet any node's): the only tunnel services announced.
	connected map[string]bool

	mu   sync.Mutex // guards view
	view View
}

// View is what the controller last applied, for the status and metrics (read on other
// goroutines than the run loop).
type View struct {
	Services []ServiceStatus // sorted by name; the tunnel services are not among them
	// Tunnels are the tunnel services served (by this node's edge), sorted by name.
	Tunnels []config.Service
	// Edge are the services whose connections this node's tunnel edge ends, sorted by
	// name: the tunnel services, and those with origins reached by tunnel (whose share
	// of the flows the XDP program passes to the stack).
	Edge     []config.Service
	Announce map[string]Announcement // by service name
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
		sources: map[string][]config.Service{}, announce: map[string]Announcement{},
	}
	c.view = View{Announce: map[string]Announcement{}, Revisions: map[string]string{}}
	return c
}

// Submit applies a source's update as one transaction: check it against the other
// sources, Commit it, set the health targets, write the maps; on a kernel error put
// everything back and Revert. Then the neighbours, the announcements and the view follow.
func (c *Controller) Submit(u Update) error {
	next := maps.Clone(c.sources)
	next[u.Source] = u.Services
	served, err := union(next)
	if err != nil {
		return err
	}
	if u.Commit != nil {
		if err := u.Commit(); err != nil {
			return err
		}
	}
	if err := c.apply(served); err != nil {
		if u.Revert != nil {
			if rerr := u.Revert(); rerr != nil {
				c.log.Error("the kernel refused an update and its source could not take it back: the source now differs from what the node runs",
					"source", u.Source, "revision", u.Revision, "err", rerr)
			}
		}
		return &KernelError{Err: err}
	}
	c.sources = next
	c.setRevision(u.Source, u.Revision)
	if u.BGP != nil {
		c.setBGP(u.BGP)
	}
	c.settle()
	return nil
}

// setBGP takes a changed bgp section (same ASN and router id: the source refuses
// others): the speaker brings its peers in line, touching only the sessions whose
// settings changed, and the next settle puts the node's communities on every VIP. The
// source has committed the change; a speaker error is logged and the sessions it did
// not reach keep their old settings until the next reload.
func (c *Controller) setBGP(b *config.BGP) {
	if c.speaker == nil || reflect.DeepEqual(b, c.bgp) {
		return
	}
	if err := c.speaker.SetPeers(b.Peers); err != nil {
		c.log.Error("BGP peers changed only in part", "err", err)
	}
	c.mu.Lock()
	c.bgp = b
	c.mu.Unlock()
	c.log.Info("bgp section applied", "peers", len(b.Peers), "communities", len(b.Communities), "large_communities", len(b.LargeCommunities))
}

// apply writes served and the current health to the health checker, the tunnel VIPs
// on lo and the maps. On a kernel error the maps are restored by the Reconciler, lo by
// Loopback.Set (a failed Set) or here (failed maps), and the targets here.
func (c *Controller) apply(served []*config.Service) error {
	c.health.Set(targets(served))
	if err := c.setLoopback(served); err != nil {
		c.health.Set(targets(c.served))
		return err
	}
	cfg := &config.Config{Node: c.settings, Services: derefAll(inDataplane(served))}
	if err := c.maps.Apply(cfg, c.healthy); err != nil {
		c.health.Set(targets(c.served))
		if lerr := c.setLoopback(c.served); lerr != nil {
			c.log.Error("the tunnel VIPs on lo could not be put back after a refused update", "err", lerr)
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

// Refresh re-resolves the backends' next hops (routes change) and republishes the view.
func (c *Controller) Refresh() {
	c.neighbours.Ensure(backendAddrs(c.served))
	c.publish()
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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.view.Services = services
	c.view.Tunnels = derefAll(slices.DeleteFunc(slices.Clone(c.served), func(s *config.Service) bool { return !isTunnel(s) }))
	c.view.Edge = derefAll(slices.DeleteFunc(slices.Clone(c.served), func(s *config.Service) bool { return !atEdge(s) }))
	c.view.Announce = maps.Clone(c.announce)
}

// View returns what the controller last applied. The caller must not modify it.
func (c *Controller) View() View {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view
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
func union(sources map[string][]config.Service) ([]*config.Service, error) {
	names := slices.Sorted(maps.Keys(sources))
	byName := map[string]string{}      // service name → source
	byKey := map[serviceKeyOf]string{} // VIP:port/protocol → "source/service"
	var out []*config.Service
	for _, src := range names {
		svcs := sources[src]
		for i := range svcs {
			s := &svcs[i]
			if other, ok := byName[s.Name]; ok && other != src {
				return nil, &ConflictError{fmt.Sprintf("service %s of %s: %s serves a service of that name", s.Name, src, other)}
			}
			byName[s.Name] = src
			k := serviceKeyOf{s.VIP, s.Port, s.Protocol}
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

func backendAddrs(ss []*config.Service) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		for _, b := range s.Backends {
			out = append(out, b.Address)
		}
	}
	return out
}
