package reconcile

import (
	"context"

	"github.com/manifoldlb/manifold/internal/config"
)

// Update is a new desired state from one source of services: every service that source
// wants now, or (Delta) what changed since its last update the controller took. The sources are the config file (store.Source, "file"), the fleet store
// (fleet.Source, "fleet": the fleet's services, with the weights of the steering
// controller's shares for the node's site) and a Kubernetes cluster (kubesource.Source,
// "kubernetes"). Each source owns the services it sends; the controller serves the
// union, and refuses an update that would take a name or a VIP:port/protocol another
// source already serves.
type Update struct {
	Source   string           // "file", "fleet", "kubernetes": the name of the source, stable for its lifetime
	Services []config.Service // validated (config.Parse or the source's own check)
	// Delta says Services holds only the services added or changed since the source's
	// last update that the controller took, and Gone names those it no longer has; its
	// other services stay as they are. The controller then settles only those: a
	// change to one service among 100 000 costs one service's work, not a walk through
	// all of them. A source that cannot tell what changed sends everything (the config
	// file, Kubernetes); so does the fleet after an update was refused.
	Delta    bool
	Gone     []string
	Revision string // the source's name for this state, for logs
	// BGP, when set, is the node's bgp section as the source has it now (the config
	// file does): peers, drain time and communities take effect with the update.
	BGP *config.BGP
	// Commit, when set, makes the update durable before the data plane follows it (the
	// file store writes and fsyncs the file); Revert undoes a committed update when
	// the kernel refuses it. An update whose Commit fails changes nothing.
	Commit func() error
	Revert func() error
}

// Sink takes a source's updates: the node's run loop, which hands each to
// Controller.Submit and returns its error. Submit fails with the context's error when
// the node is stopping.
type Sink interface {
	Submit(ctx context.Context, u Update) error
}

// Source feeds the Sink it was made with until ctx ends (the node runs every source on
// a goroutine of its own). Adding a source of desired state is writing one of these;
// nothing in this package changes.
type Source interface {
	Run(ctx context.Context) error
}
