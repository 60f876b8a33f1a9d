package reconcile

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/manifoldlb/manifold/internal/bgp"
	"github.com/manifoldlb/manifold/internal/config"
)

// Announcement is whether this node announces a service's VIP, and why.
type Announcement struct {
	Announced bool
	Reason    string
}

// Reasons a VIP is or is not announced, as logged and shown by the API.
const (
	ReasonNoBGP       = "no bgp section: routing is left to the operator"
	ReasonStopping    = "node stopping"
	ReasonNotAttached = "data plane not attached"
	ReasonNoBackend   = "no healthy backend"
	ReasonNoConnector = "tunnel service: no connector attached to any edge"
	reasonConnector   = "tunnel service: a connector is attached"
	// a routed service whose backends are all down, with origins reached by tunnel
	reasonTunnelledOrigin = "no backend healthy; a connector of an origin reached by tunnel is attached"
	reasonRemoved         = "service removed from the config"
)

// wantedAnnouncement is the announce policy, for a service served: a VIP is
// announced while the node has BGP, is not stopping, has its data plane attached, holds
// nothing back (Hold), and
// the service has at least one healthy backend (a draining one counts: its flows still
// need the node). A tunnel service has no backends: it is announced while a
// connector of it is attached to an edge (TunnelsConnected); so is a routed service
// with origins reached by tunnel whose backends are all down.
//
// A service not announced yet is announced only once the health of every backend is
// known. Until then its Maglev table holds only the backends whose checks passed so
// far, unlike the other nodes' tables: a flow the router moved to this node (a node
// that starts or comes back) would go to another backend than on the node it came
// from, and break. The chaos soak found it (docs/security.md). An announced service
// stays announced while a backend added to it is checked.
func (c *Controller) wantedAnnouncement(s *config.Service) Announcement {
	healthy, unknown := 0, 0
	for j := range s.Backends {
		// a backend not checked is not counted healthy, even where its stale
		// state says up (the health checker's Recheck)
		if !c.checked(s, &s.Backends[j]) {
			unknown++
		} else if c.healthy(s, &s.Backends[j]) {
			healthy++
		}
	}
	switch {
	case c.speaker == nil:
		return Announcement{Reason: ReasonNoBGP}
	case c.stopping:
		return Announcement{Reason: ReasonStopping}
	case !c.attached:
		return Announcement{Reason: ReasonNotAttached}
	case c.holds > 0:
		return Announcement{Reason: c.holdReason}
	case isTunnel(s) && !c.connected[s.Name]:
		return Announcement{Reason: ReasonNoConnector}
	case isTunnel(s):
		return Announcement{Announced: true, Reason: reasonConnector}
	case healthy == 0 && s.TunnelledOrigins() && c.connected[s.Name]:
		return Announcement{Announced: true, Reason: reasonTunnelledOrigin}
	case healthy == 0:
		return Announcement{Reason: ReasonNoBackend}
	case unknown > 0 && !c.announce[s.Name].Announced:
		return Announcement{Reason: fmt.Sprintf("%d of %d backends healthy, %d not checked yet", healthy, len(s.Backends), unknown)}
	}
	return Announcement{Announced: true, Reason: fmt.Sprintf("%d of %d backends healthy", healthy, len(s.Backends))}
}

// syncAnnouncements brings every service's announcement, and the speaker, in line
// with wantedAnnouncement. Only VIPs of served services are ever announced; a VIP no
// service has any more is withdrawn. The speaker's list is read again: what it
// announces is what counts.
func (c *Controller) syncAnnouncements() {
	want := make(map[string]Announcement, len(c.served))
	for _, s := range c.served {
		want[s.Name] = c.wantedAnnouncement(s)
	}
	c.announce = want
	if c.speaker == nil {
		return
	}
	c.announced = map[netip.Addr]bool{}
	for _, vip := range c.speaker.Announced() {
		c.announced[vip] = true
	}
	vips := maps.Clone(c.announced)
	for vip := range c.byVIP {
		vips[vip] = true
	}
	for vip := range vips {
		c.syncVIP(vip)
	}
}

// syncAnnouncementsOf brings in line the announcements of the services a change
// touched, and the VIPs they had or have: a change to one service costs that service
// and the others of its VIP.
func (c *Controller) syncAnnouncementsOf(ch *change) {
	for _, name := range ch.gone {
		delete(c.announce, name)
	}
	for _, s := range ch.changed {
		c.announce[s.Name] = c.wantedAnnouncement(s)
	}
	if c.speaker == nil {
		return
	}
	vips := map[netip.Addr]bool{}
	for _, s := range ch.old {
		vips[s.VIP] = true
	}
	for _, s := range ch.changed {
		vips[s.VIP] = true
	}
	for vip := range vips {
		c.syncVIP(vip)
	}
}

// syncVIP announces or withdraws one VIP. Several services may share it (other ports):
// it is announced while any of them wants it, with the attributes of all of those. A
// speaker error is logged, and the next sync tries again.
func (c *Controller) syncVIP(vip netip.Addr) {
	var (
		services []string // those that want it announced
		attrs    bgp.Attributes
		reason   = reasonRemoved // that of the first service that does not, if any
		reasoned bool
	)
	_, node := c.BGP()
	for _, s := range c.byVIP[vip] {
		st := c.announce[s.Name]
		if !st.Announced {
			if !reasoned {
				reason, reasoned = st.Reason, true
			}
			continue
		}
		if len(services) == 0 {
			attrs = bgp.Attributes{Communities: slices.Clone(node.Communities), LargeCommunities: slices.Clone(node.LargeCommunities)}
		}
		services = append(services, s.Name)
		attrs = withService(attrs, s.BGP)
	}
	if len(services) > 0 {
		// Announce is idempotent and replaces the route when the attributes changed
		if err := c.speaker.Announce(vip, attrs); err != nil {
			c.log.Error("announce failed", "vip", vip, "err", err)
			return
		}
		if !c.announced[vip] {
			c.announced[vip] = true
			c.log.Info("VIP announced", "vip", vip, "services", services, "reason", c.announce[services[0]].Reason)
		}
		return
	}
	if !c.announced[vip] {
		return
	}
	if err := c.speaker.Withdraw(vip); err != nil {
		c.log.Error("withdraw failed", "vip", vip, "err", err)
		return
	}
	delete(c.announced, vip)
	c.log.Info("VIP withdrawn", "vip", vip, "reason", reason)
}

// withService adds a service's attributes to a VIP's: a VIP is one route, so it carries
// the communities of every service that wants it, the highest MED and the longest
// prepend (one service made a backup makes the VIP a backup).
func withService(a bgp.Attributes, s config.ServiceBGP) bgp.Attributes {
	a.Communities = append(a.Communities, s.Communities...)
	a.LargeCommunities = append(a.LargeCommunities, s.LargeCommunities...)
	if s.MED != nil && (a.MED == nil || *s.MED > *a.MED) {
		a.MED = s.MED
	}
	a.Prepend = max(a.Prepend, s.Prepend)
	return a
}
