package backendagent

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kubesource"
)

// The agent on a Kubernetes Node:
//
//	informers ─► Changed ─► Plan ─► VIPsOn(this Node) ─► new ones into the decapsulation map
//
// A VIP withdrawn from the Node stays in the map until the agent restarts: the data
// path offers no removal, and it costs nothing, since only the LB nodes encapsulate
// to this Node and they withdrew it too. A lost watch changes nothing.

// vipFilter is the decapsulation's set of inner destinations (datapath.Decap).
type vipFilter interface {
	AddVIP(vip netip.Addr) error
}

// followCluster decapsulates the VIPs of the Services whose backends include the Node
// k.NodeName, as the cluster changes, until ctx ends.
func followCluster(ctx context.Context, cluster *kubesource.Cluster, k config.Kubernetes, decap vipFilter, log *slog.Logger) error {
	defer cluster.Stop()
	log.Info("kubernetes: waiting for the API server", "node", k.NodeName)
	if err := cluster.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var added []netip.Addr
	for {
		for _, vip := range cluster.Plan(k.DefaultClass).VIPsOn(k.NodeName) {
			if slices.Contains(added, vip) {
				continue
			}
			if err := decap.AddVIP(vip); err != nil {
				log.Error("kubernetes: a VIP of this Node is not decapsulated; the next change tries again", "vip", vip, "err", err)
				continue
			}
			added = append(added, vip)
			log.Info("kubernetes: decapsulating a VIP of this Node", "vip", vip, "node", k.NodeName)
		}
		select {
		case <-ctx.Done():
			log.Info("stopping: detaching decapsulation")
			return nil
		case <-cluster.Changed():
		}
	}
}
