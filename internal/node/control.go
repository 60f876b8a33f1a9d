package node

import (
	"context"
	"fmt"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/store"
)

// The node as the API sees it (api.Node): reads come from the status board, writes run
// on the run loop through commit, like a reload.

// Status is the node's state with live counters.
func (n *Node) Status() any {
	st := n.status.read(n.lb)
	st.Config = api.Info(n.store)
	return st
}

// Services is every service, by name.
func (n *Node) Services() any { return n.status.read(n.lb).Services }

// Service is one service, if there is one of that name.
func (n *Node) Service(name string) (any, bool) {
	for _, s := range n.status.read(n.lb).Services {
		if s.Name == name {
			return s, true
		}
	}
	return nil, false
}

// Change runs edit on the run loop and commits the change it makes.
func (n *Node) Change(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error {
	var err error
	if derr := n.do(ctx, func() {
		var ch *store.Change
		if ch, err = edit(n.store); err != nil {
			return
		}
		if err = n.commit(ch); err == nil {
			n.log.Info("config changed through the API", "change", ch.Summary, "config", n.path, "revision", ch.Revision())
		}
	}); derr != nil {
		return derr
	}
	return err
}

// commit makes a validated change take effect, on the run loop. The store commits it
// first (for an API write: the file is written and fsynced), so that whatever the
// node runs is what a restart would run; then the health checks and the data plane
// follow. When the kernel refuses (the reconciler has restored the maps), the store
// and the file are put back: nothing changed.
func (n *Node) commit(ch *store.Change) error {
	if err := n.store.Commit(ch); err != nil {
		return err
	}
	n.checker.Set(targets(ch.Config))
	if err := n.rec.Apply(ch.Config, n.healthy); err != nil {
		n.checker.Set(targets(n.cfg))
		if rerr := n.store.Revert(ch); rerr != nil {
			n.log.Error("the kernel refused a change and the config file could not be restored: it now differs from what the node runs", "config", n.path, "err", rerr)
		}
		return &store.Error{Kind: store.Failed, Problems: []store.Problem{{
			Message: fmt.Sprintf("the kernel refused the change, nothing was changed: %v", err)}}}
	}
	n.cfg = ch.Config
	n.neigh.ensure(backendAddrs(n.cfg))
	n.settle()
	return nil
}
