package node

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/manifoldlb/manifold/internal/bgp"
)

// announceState is whether a service's VIP is announced by this node, and why.
type announceState struct {
	Announced bool
	Reason    string
}

// Reasons a VIP is or is not announced, as logged and shown by the API.
const (
	reasonNotAttached = "data plane not attached"
	reasonNoBackend   = "no healthy backend"
	reasonStopping    = "node stopping"
	reasonNoBGP       = "no bgp section: routing is left to the operator"
)

// bgpPort is where the node accepts sessions from its peers (it also connects to them).
const bgpPort = 179

// startSpeaker starts the BGP speaker of a config with a bgp section (nil without).
func (n *Node) startSpeaker() error {
	b := n.cfg.BGP
	if b == nil {
		return nil
	}
	sc := bgp.Config{
		ASN: b.ASN, RouterID: b.RouterID,
		NextHop4: n.cfg.Node.SourceFor(false), NextHop6: n.cfg.Node.SourceFor(true),
		Peers: b.Peers, ListenPort: bgpPort,
	}
	s, err := bgp.Start(sc, n.log)
	if err != nil {
		return err
	}
	n.speaker = s
	return nil
}

// wantedAnnouncements decides, from the current config and health, the state of every
// service: a VIP is announced while the data plane is attached and at least one
// service of that VIP has a healthy backend (a draining one counts: its flows still
// need the node).
func (n *Node) wantedAnnouncements() map[string]announceState {
	out := map[string]announceState{}
	for i := range n.cfg.Services {
		s := &n.cfg.Services[i]
		healthy := 0
		for j := range s.Backends {
			if n.healthy(s, &s.Backends[j]) {
				healthy++
			}
		}
		switch {
		case n.speaker == nil:
			out[s.Name] = announceState{Reason: reasonNoBGP}
		case n.stopping:
			out[s.Name] = announceState{Reason: reasonStopping}
		case !n.attached:
			out[s.Name] = announceState{Reason: reasonNotAttached}
		case healthy == 0:
			out[s.Name] = announceState{Reason: reasonNoBackend}
		default:
			out[s.Name] = announceState{Announced: true, Reason: fmt.Sprintf("%d of %d backends healthy", healthy, len(s.Backends))}
		}
	}
	return out
}

// syncAnnouncements brings the speaker in line with wantedAnnouncements. It runs on
// the loop after every change (config, health, API, stop), through settle. Only VIPs of configured
// services are ever announced; a VIP of a removed service is withdrawn.
func (n *Node) syncAnnouncements() {
	want := n.wantedAnnouncements()
	n.announce = want
	if n.speaker == nil {
		return
	}
	vips := map[netip.Addr][]string{} // VIP → services that want it announced
	reasons := map[netip.Addr]string{}
	for _, s := range n.cfg.Services {
		st := want[s.Name]
		if st.Announced {
			vips[s.VIP] = append(vips[s.VIP], s.Name)
		} else if _, ok := reasons[s.VIP]; !ok {
			reasons[s.VIP] = st.Reason
		}
	}
	announced := map[netip.Addr]bool{}
	for _, vip := range n.speaker.Announced() {
		announced[vip] = true
	}
	for vip, services := range vips {
		if announced[vip] {
			continue
		}
		if err := n.speaker.Announce(vip); err != nil {
			n.log.Error("announce failed", "vip", vip, "err", err)
			continue
		}
		n.log.Info("VIP announced", "vip", vip, "services", services, "reason", want[services[0]].Reason)
	}
	for vip := range announced {
		if _, keep := vips[vip]; keep {
			continue
		}
		reason, ok := reasons[vip]
		if !ok {
			reason = "service removed from the config"
		}
		if err := n.speaker.Withdraw(vip); err != nil {
			n.log.Error("withdraw failed", "vip", vip, "err", err)
			continue
		}
		n.log.Info("VIP withdrawn", "vip", vip, "reason", reason)
	}
}

// stopAnnouncing withdraws every VIP and waits bgp.drain_time for the routers to
// move traffic away, forwarding all along; then it closes the sessions.
func (n *Node) stopAnnouncing() {
	if n.speaker == nil {
		return
	}
	n.stopping = true
	n.settle()
	if d := n.cfg.BGP.DrainTime; d > 0 {
		n.log.Info("draining: VIPs withdrawn, still forwarding", "drain_time", d)
		time.Sleep(d)
	}
	if err := n.speaker.Close(); err != nil {
		n.log.Error("closing BGP sessions", "err", err)
	}
	n.log.Info("BGP sessions closed")
}

// bgpStatus is the speaker's part of GET /api/v1/status (nil without bgp).
func (n *Node) bgpStatus() *BGPStatus {
	if n.speaker == nil {
		return nil
	}
	st := &BGPStatus{ASN: n.cfg.BGP.ASN, RouterID: n.cfg.BGP.RouterID.String(), Peers: []PeerStatus{}}
	for _, p := range n.speaker.Peers() {
		ps := PeerStatus{Address: p.Address.String(), ASN: p.ASN, State: p.State, Up: p.Up(),
			UpdatesSent: p.UpdatesSent, UpdatesReceived: p.UpdatesReceived}
		if !p.Since.IsZero() {
			ps.UpSince = p.Since.UTC().Format(time.RFC3339)
		}
		st.Peers = append(st.Peers, ps)
	}
	return st
}
