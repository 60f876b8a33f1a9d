package node

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/fleet"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/steer"
)

// The node as a member of a fleet: its services come from etcd (internal/fleet), its
// API writes go there, and it publishes its record every second.

// joinFleet connects to the fleet store and reads the fleet's services, waiting for the
// store as long as it takes (the node attaches nothing before: it never starts on a
// stale table, and without the store it has no table at all).
func (n *Node) joinFleet(ctx context.Context) error {
	f := n.cfg.Fleet
	cli, err := fleet.Dial(*f)
	if err != nil {
		return err
	}
	n.etcd = cli
	n.fleet = fleet.NewSource(cli, f.Prefix, n.file.Store(), n, n.log)
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		u, err := n.fleet.Initial(ctx)
		if err == nil {
			if err := n.ctrl.Submit(u); err != nil {
				// the node starts with nothing and says why; the next revision may apply
				n.log.Error("the fleet's services could not be applied", "revision", u.Revision, "err", err)
			} else {
				n.log.Info("fleet revision applied", "revision", u.Revision, "services", len(u.Services), "prefix", f.Prefix)
			}
			return nil
		}
		n.log.Warn("waiting for the fleet store: nothing is served until its services are read", "endpoints", f.Endpoints, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// fleetState is the fleet part of the status (nil without a fleet).
func (n *Node) fleetState() *wire.FleetState {
	if n.fleet == nil {
		return nil
	}
	s := n.fleet.State()
	out := &wire.FleetState{Prefix: n.cfg.Fleet.Prefix, AppliedRevision: s.AppliedRevision, StoreRevision: s.StoreRevision,
		Reachable: s.Reachable, ApplyError: s.ApplyError, WriteConflicts: s.WriteConflicts, DocumentsRefused: s.DocumentsRefused,
		RecordBytes: s.RecordBytes, RecordsTruncated: s.RecordsTruncated}
	if len(s.Refused) > 0 {
		out.Refused = fleet.WireRefused(s.Refused)
	}
	if !s.StaleSince.IsZero() {
		out.StaleSince = s.StaleSince.UTC().Format(time.RFC3339)
	}
	return out
}

// recorder returns what the node publishes about itself in the fleet store, one record
// per call; the calls come from one goroutine (the publisher), which owns the RTT
// averages (steering's input, internal/steer) between them.
func (n *Node) recorder() func() wire.NodeRecord {
	var rtt steer.RTTs
	return func() wire.NodeRecord { return n.record(&rtt) }
}

// record reads the services' rates and health, not the data plane's counters, nor the
// flow table's size. Of the services it lists (fleet.Listed: those with origins and
// those not as desired, a few of thousands) it builds the status, of the others what
// the totals count only: a status with its spec and addresses for each of 100 000
// services, every second, was most of an idle node's work.
func (n *Node) record(rtt *steer.RTTs) wire.NodeRecord {
	view := n.ctrl.View()
	services, listed := n.recordServices(view)
	r := wire.NodeRecord{Name: n.cfg.Node.Name, Site: n.cfg.Node.Site}
	for _, a := range []netip.Addr{n.cfg.Node.Address, n.cfg.Node.Address6} {
		if a.IsValid() {
			r.Addresses = append(r.Addresses, a.String())
		}
	}
	if bgp := n.bgpStatus(); bgp != nil {
		for _, p := range bgp.Peers {
			r.BGP = append(r.BGP, wire.FleetPeer{Address: p.Address, Up: p.Up})
		}
	}
	rtt.Observe(listed) // the RTTs of the services listed are the ones read
	var totals wire.RecordTotals
	r.Services, totals = fleet.RecordServices(services, rtt.Of, n.tunnelOrigins())
	r.Totals = &totals
	r.Tunnels = n.tunnelRecord()
	return r
}

// recordServices is a status of every service for the record: whole for those it lists
// (also returned apart, listed), else the name, the announcement and the backends'
// states and health (what fleet.Listed and the totals read).
func (n *Node) recordServices(view reconcile.View) (services, listed []wire.ServiceStatus) {
	services = make([]wire.ServiceStatus, 0, len(view.Services)+len(view.Tunnels))
	for _, s := range view.Services {
		ann, _ := view.Announcement(s.Config.Name)
		st := wire.ServiceStatus{Name: s.Config.Name, Announced: ann.Announced, Reason: ann.Reason, Backends: make([]wire.BackendStatus, len(s.Backends))}
		for i, bk := range s.Backends {
			st.Backends[i] = wire.BackendStatus{State: backendState(bk.State), Health: wire.BackendHealth{Up: n.healthUp(&s.Config, bk.Address)}}
		}
		if len(s.Config.Origins) > 0 || fleet.Listed(&st) {
			st = n.serviceStatus(s, ann, n.checker.StatusOf, nil)
			listed = append(listed, st)
		}
		services = append(services, st)
	}
	if len(view.Tunnels) > 0 {
		var clients map[string]uint64
		if n.edge != nil {
			clients = n.edge.Clients()
		}
		for i := range view.Tunnels {
			st := n.tunnelServiceStatus(view, &view.Tunnels[i], clients)
			services = append(services, st)
			listed = append(listed, st)
		}
		// in the order of names, as the status lists them: a record cut to its bound
		// keeps the same services
		slices.SortFunc(services, func(a, b wire.ServiceStatus) int { return strings.Compare(a.Name, b.Name) })
	}
	return services, listed
}
