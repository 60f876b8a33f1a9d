// Package kubesource reads a Kubernetes cluster as a source of desired state: the LB
// node's services (Source, a reconcile.Source) and the backend agent's VIPs, both from
// one Plan of the cluster's Services, EndpointSlices and Nodes.
//
//	informers (Services, EndpointSlices, Nodes) ─► Changed ─► Plan ─► Source: Sink.Submit
//	                                                              └─► backend agent: VIPsOn(node)
//	probe /readyz every second: unreachable ─► keep what was planned (never withdraw)
//
// The informers keep their caches when the API server goes away and relist when it is
// back, so a lost watch changes nothing: only an object's deletion that the API server
// reports removes a service.
package kubesource

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kube"
)

// probeTimeout bounds one reachability probe of the API server (one a second).
const probeTimeout = time.Second

// Cluster is a running view of the objects a Plan is made of.
type Cluster struct {
	core      *rest.RESTClient
	informers kube.Informers
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	nodes     corelisters.NodeLister
	// changed gets a value (dropped when one is pending) on every change of a cached
	// object: a burst of changes makes one Plan.
	changed chan struct{}
}

// Connect makes the client of the cluster a kubernetes section names (in the cluster
// when it gives no kubeconfig). Nothing is read yet.
func Connect(k config.Kubernetes) (*Cluster, error) {
	cfg, err := kube.RESTConfig(k.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return NewCluster(cfg)
}

// NewCluster makes the informers of the cluster cfg reaches; Start starts them.
func NewCluster(cfg *rest.Config) (*Cluster, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		// a relist after an outage lists three kinds at once; client-go's default
		// (5 a second) would delay it for nothing
		cfg.QPS, cfg.Burst = 20, 40
	}
	// the REST clients of the two groups read (kube.Scheme says why)
	core, err := kube.Client(cfg, kube.CoreV1)
	if err != nil {
		return nil, err
	}
	discovery, err := kube.Client(cfg, kube.DiscoveryV1)
	if err != nil {
		return nil, err
	}
	c := &Cluster{core: core, changed: make(chan struct{}, 1)}
	services := c.informers.Add(core, "services", &corev1.Service{})
	slices := c.informers.Add(discovery, "endpointslices", &discoveryv1.EndpointSlice{})
	nodes := c.informers.Add(core, "nodes", &corev1.Node{})
	c.services = corelisters.NewServiceLister(services.GetIndexer())
	c.slices = discoverylisters.NewEndpointSliceLister(slices.GetIndexer())
	c.nodes = corelisters.NewNodeLister(nodes.GetIndexer())
	notify := func(any) {
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(_, obj any) { notify(obj) }, DeleteFunc: notify}
	for _, inf := range []cache.SharedIndexInformer{services, slices, nodes} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Start runs the informers until ctx ends and waits until their caches hold the
// cluster as it is (as long as the API server takes to answer).
func (c *Cluster) Start(ctx context.Context) error {
	c.informers.Start(ctx)
	return c.informers.WaitForCacheSync(ctx)
}

// Stop stops the informers (after ctx of Start ended) and waits for them.
func (c *Cluster) Stop() { c.informers.Shutdown() }

// Changed receives after any change of the cached objects.
func (c *Cluster) Changed() <-chan struct{} { return c.changed }

// Reachable asks the API server whether it is ready.
func (c *Cluster) Reachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := c.core.Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// Plan is the cluster's desired state as the caches hold it now.
func (c *Cluster) Plan(defaultClass bool) Plan {
	svcs, _ := c.services.List(labels.Everything())
	slices, _ := c.slices.List(labels.Everything())
	nodes, _ := c.nodes.List(labels.Everything())
	return plan(svcs, slices, nodes, defaultClass)
}
