package kubesource

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kube"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// SourceName is the name the cluster's updates carry.
const SourceName = "kubernetes"

// probeEvery is how often Run asks whether the API server answers, to say so in the
// log and the State: the informers retry on their own.
const probeEvery = time.Second

// Source is a cluster as a source of desired state (reconcile.Source) of an LB node.
type Source struct {
	cluster      *Cluster
	defaultClass bool
	node         config.Node // the node's addresses: a VIP of a family it has none of is skipped
	sink         reconcile.Sink
	log          *slog.Logger
	events       *kube.EventRecorder // on the Services whose addresses the node refuses

	mu    sync.Mutex // guards state and changed
	state State
	// changed is closed and replaced each time the State changes.
	changed chan struct{}
}

// State is what a Source did last.
type State struct {
	Synced    bool // the caches have been filled once: the services below are the cluster's
	Reachable bool // the last probe of the API server was answered
	Services  []config.Service
	Skipped   []string // what the last Plan left out, and why
	// OutOfPool is how many addresses of Services' status the last Plan refused as in
	// no IPPool that selects the Service.
	OutOfPool int
	// Submitted counts the updates the node took; Refused those it did not (the
	// error is logged; the next change tries again).
	Submitted, Refused uint64
}

// NewSource makes the source of an LB node whose services come from cluster.
func NewSource(cluster *Cluster, k config.Kubernetes, node config.Node, sink reconcile.Sink, log *slog.Logger) *Source {
	return &Source{cluster: cluster, defaultClass: k.DefaultClass, node: node, sink: sink, log: log, changed: make(chan struct{}),
		events: cluster.Recorder("manifold-node", node.Name, log)}
}

// State returns the source's state and a channel closed at its next change.
func (s *Source) State() (State, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.changed
}

func (s *Source) update(f func(*State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.state)
	close(s.changed)
	s.changed = make(chan struct{})
}

// Run follows the cluster until ctx ends: once the caches are filled, every change of
// the cluster's objects is planned and, when the services differ, submitted. A change
// of a Service or its EndpointSlices replans that Service alone, and the update names
// only the services it changed or removed (Update.Delta); a change that may touch any
// Service (a Node's readiness or address, an IPPool, a Namespace's labels), or one that
// moves an address two Services claim, replans every Service. After the node refused
// an update, the next carries every service.
func (s *Source) Run(ctx context.Context) error {
	defer s.cluster.Stop()
	go s.probe(ctx) // owned by Run: ends with ctx
	if err := s.cluster.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	s.update(func(st *State) { st.Synced = true })
	s.log.Info("kubernetes: caches synced, serving the cluster's LoadBalancer Services")
	pl := newPlanned()
	var served []config.Service // the last plan's services, sorted by name
	current := false            // the node runs served: only what changes since is submitted
	var skipped []string
	refused := map[string]bool{} // the last Plan's refusals, each told once in an Event
	for revision := 1; ; revision++ {
		keys, all := s.cluster.Changes()
		if all {
			keys = s.cluster.serviceKeys()
			pl = newPlanned()
		}
		r := pl.replan(s.cluster.planOf(keys, s.defaultClass), s.servable, served, all)
		refused = s.tellRefused(r.outOfPool, refused)
		if !slices.Equal(r.skipped, skipped) {
			for _, why := range r.skipped {
				s.log.Warn("kubernetes: not served", "why", why)
			}
			skipped = r.skipped
		}
		served = r.served
		if !current || len(r.changed)+len(r.gone) > 0 {
			u := reconcile.Update{Source: SourceName, Revision: strconv.Itoa(revision)}
			if current {
				u.Delta, u.Services, u.Gone = true, r.changed, r.gone
			} else {
				u.Services = served
			}
			err := s.sink.Submit(ctx, u)
			if ctx.Err() != nil {
				return nil
			}
			switch {
			case err != nil:
				s.log.Error("kubernetes: the node refused the cluster's services; the next change tries again", "services", len(served), "err", err)
			case u.Delta:
				s.log.Info("kubernetes: services applied", "changed", len(u.Services), "gone", len(u.Gone), "services", len(served), "revision", revision)
			default:
				s.log.Info("kubernetes: services applied", "services", len(served), "revision", revision)
			}
			current = err == nil
			s.update(func(st *State) {
				st.Services, st.Skipped, st.OutOfPool = served, r.skipped, len(r.outOfPool)
				if err != nil {
					st.Refused++
				} else {
					st.Submitted++
				}
			})
		} else {
			s.update(func(st *State) { st.Skipped, st.OutOfPool = r.skipped, len(r.outOfPool) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.cluster.Changed():
		}
	}
}

// tellRefused records a Warning Event on each Service with an address refused that
// was not refused in the last Plan (before: the last Plan's), and returns the
// refusals now.
func (s *Source) tellRefused(out []Refusal, before map[string]bool) map[string]bool {
	now := map[string]bool{}
	for _, r := range out {
		key := string(r.Service.UID) + " " + r.Addr.String()
		now[key] = true
		if !before[key] {
			s.events.Eventf(r.Service, corev1.EventTypeWarning, kube.ReasonNotInPool,
				"%s is in no IPPool that selects this Service: LB node %s does not serve it", r.Addr, s.node.Name)
		}
	}
	return now
}

// servable moves to skipped the services of a family the node has no address of.
func (s *Source) servable(sp *servicePlan) {
	var kept []config.Service
	var nodes []map[netip.Addr]string
	for i, svc := range sp.services {
		if !s.node.SourceFor(svc.VIP.Is6()).IsValid() {
			sp.skipped = append(sp.skipped, "service "+svc.Name+": the node has no address of "+family(svc.VIP)+" (node.address6)")
			continue
		}
		kept, nodes = append(kept, svc), append(nodes, sp.nodes[i])
	}
	sp.services, sp.nodes = kept, nodes
}

func family(a netip.Addr) string {
	if a.Is6() {
		return "IPv6"
	}
	return "IPv4"
}

// probe asks the API server every second whether it answers, and says when that
// changes: while it does not, the node keeps every service as last planned.
func (s *Source) probe(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for first := true; ; first = false {
		err := s.cluster.Reachable(ctx)
		if ctx.Err() != nil {
			return
		}
		if st, _ := s.State(); first || st.Reachable != (err == nil) {
			switch {
			case err != nil:
				s.log.Warn("kubernetes: the API server does not answer; the node keeps serving what it has", "err", err)
			case !first:
				s.log.Info("kubernetes: the API server answers again")
			}
			s.update(func(st *State) { st.Reachable = err == nil })
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
