package reconcile

import (
	"fmt"
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

// wantedAnnouncements is the announce policy, for every service served: a VIP is
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
func (c *Controller) wantedAnnouncements() map[string]Announcement {
	out := map[string]Announcement{}
	for _, s := range c.served {
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
			out[s.Name] = Announcement{Reason: ReasonNoBGP}
		case c.stopping:
			out[s.Name] = Announcement{Reason: ReasonStopping}
		case !c.attached:
			out[s.Name] = Announcement{Reason: ReasonNotAttached}
		case c.holds > 0:
			out[s.Name] = Announcement{Reason: c.holdReason}
		case isTunnel(s) && !c.connected[s.Name]:
			out[s.Name] = Announcement{Reason: ReasonNoConnector}
		case isTunnel(s):
			out[s.Name] = Announcement{Announced: true, Reason: reasonConnector}
		case healthy == 0 && s.TunnelledOrigins() && c.connected[s.Name]:
			out[s.Name] = Announcement{Announced: true, Reason: reasonTunnelledOrigin}
		case healthy == 0:
			out[s.Name] = Announcement{Reason: ReasonNoBackend}
		case unknown > 0 && !c.announce[s.Name].Announced:
			out[s.Name] = Announcement{Reason: fmt.Sprintf("%d of %d backends healthy, %d not checked yet", healthy, len(s.Backends), unknown)}
		default:
			out[s.Name] = Announcement{Announced: true, Reason: fmt.Sprintf("%d of %d backends healthy", healthy, len(s.Backends))}
		}
	}
	return out
}

// syncAnnouncements brings the speaker in line with wantedAnnouncements. Several
// services may share a VIP (other ports): the VIP is announced while any of them
// wants it. Only VIPs of served services are ever announced; a VIP no service has any
// more is withdrawn. A speaker error is logged, and the next sync tries again.
func (c *Controller) syncAnnouncements() {
	want := c.wantedAnnouncements()
	c.announce = want
	if c.speaker == nil {
		return
	}
	vips := map[netip.Addr][]string{} // VIP → services that want it announced
	attrs := map[netip.Addr]bgp.Attributes{}
	reasons := map[netip.Addr]string{}
	_, node := c.BGP()
	for _, s := range c.served {
		st := want[s.Name]
		if st.Announced {
			vips[s.VIP] = append(vips[s.VIP], s.Name)
			a, ok := attrs[s.VIP]
			if !ok {
				a = bgp.Attributes{Communities: slices.Clone(node.Communities), LargeCommunities: slices.Clone(node.LargeCommunities)}
			}
			attrs[s.VIP] = withService(a, s.BGP)
		} else if _, ok := reasons[s.VIP]; !ok {
			reasons[s.VIP] = st.Reason
		}
	}
	announced := map[netip.Addr]bool{}
	for _, vip := range c.speaker.Announced() {
		announced[vip] = true
	}
	for vip, services := range vips {
		// Announce is idempotent and replaces the route when the attributes changed
		if err := c.speaker.Announce(vip, attrs[vip]); err != nil {
			c.log.Error("announce failed", "vip", vip, "err", err)
			continue
		}
		if !announced[vip] {
			c.log.Info("VIP announced", "vip", vip, "services", services, "reason", want[services[0]].Reason)
		}
	}
	for vip := range announced {
		if _, keep := vips[vip]; keep {
			continue
		}
		reason, ok := reasons[vip]
		if !ok {
			reason = reasonRemoved
		}
		if err := c.speaker.Withdraw(vip); err != nil {
			c.log.Error("withdraw failed", "vip", vip, "err", err)
			continue
		}
		c.log.Info("VIP withdrawn", "vip", vip, "reason", reason)
	}
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
