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
//	informers ─► Changed ─► Plan ─► VIPsOn(this Node) ─► the decapsulation map follows
//
// A VIP the Node no longer serves leaves the map (only those this loop added: the
// file's backend.vips stay). A lost watch changes nothing.

// vipFilter is the decapsulation's set of inner destinations (datapath.Decap).
type vipFilter interface {
	AddVIP(vip netip.Addr) error
	RemoveVIP(vip netip.Addr) error
}

// followCluster decapsulates the VIPs of the Services whose backends include the Node
// k.NodeName, as the cluster changes, until ctx ends; static (the file's backend.vips)
// stay whatever the cluster says.
func followCluster(ctx context.Context, cluster *kubesource.Cluster, k config.Kubernetes, static []netip.Addr, decap vipFilter, log *slog.Logger) error {
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
		want := cluster.Plan(k.DefaultClass).VIPsOn(k.NodeName)
		for _, vip := range want {
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
		added = slices.DeleteFunc(added, func(vip netip.Addr) bool {
			if slices.Contains(want, vip) || slices.Contains(static, vip) {
				return false
			}
			if err := decap.RemoveVIP(vip); err != nil {
				log.Error("kubernetes: a VIP this Node no longer serves is still decapsulated; the next change tries again", "vip", vip, "err", err)
				return false
			}
			log.Info("kubernetes: no longer decapsulating a VIP this Node does not serve", "vip", vip, "node", k.NodeName)
			return true
		})
		select {
		case <-ctx.Done():
			log.Info("stopping: detaching decapsulation")
			return nil
		case <-cluster.Changed():
		}
	}
}
