// Package kubesource reads a Kubernetes cluster as a source of desired state: the LB
// node's services (Source, a reconcile.Source) and the backend agent's VIPs, both from
// one Plan of the cluster's Services, EndpointSlices and Nodes.
//
//	informers (Services, EndpointSlices, Nodes,  ─► Changed ─► Plan ─► Source: Sink.Submit
//	           IPPools, Namespaces)                    │     (an address in no pool that selects
//	                                                   │      its Service: refused, Event, metric)
//	                                                              └─► backend agent: VIPsOn(node)
//	probe /readyz every second: unreachable ─► keep what was planned (never withdraw)
//
// The informers keep their caches when the API server goes away and relist when it is
// back, so a lost watch changes nothing: only an object's deletion that the API server
// reports removes a service.
package kubesource

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kube"
)

// probeTimeout bounds one reachability probe of the API server (one a second).
const probeTimeout = time.Second

// Cluster is a running view of the objects a Plan is made of.
type Cluster struct {
	cs         kubernetes.Interface
	factory    informers.SharedInformerFactory
	dfactory   dynamicinformer.DynamicSharedInformerFactory
	services   corelisters.ServiceLister
	slices     discoverylisters.EndpointSliceLister
	nodes      corelisters.NodeLister
	namespaces corelisters.NamespaceLister
	pools      cache.GenericLister
	// events, once Recorder made it, records Events on the cluster's objects.
	events record.EventBroadcaster
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
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	df := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	pools := df.ForResource(kube.PoolResource)
	c := &Cluster{
		cs: cs, factory: f, dfactory: df, changed: make(chan struct{}, 1),
		services:   f.Core().V1().Services().Lister(),
		slices:     f.Discovery().V1().EndpointSlices().Lister(),
		nodes:      f.Core().V1().Nodes().Lister(),
		namespaces: f.Core().V1().Namespaces().Lister(),
		pools:      pools.Lister(),
	}
	notify := func(any) {
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(_, obj any) { notify(obj) }, DeleteFunc: notify}
	for _, inf := range []cache.SharedIndexInformer{
		f.Core().V1().Services().Informer(), f.Discovery().V1().EndpointSlices().Informer(), f.Core().V1().Nodes().Informer(),
		f.Core().V1().Namespaces().Informer(), pools.Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Start runs the informers until ctx ends and waits until their caches hold the
// cluster as it is (as long as the API server takes to answer).
func (c *Cluster) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	c.dfactory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the cache of %v never synced: %w", typ, ctx.Err())
		}
	}
	for res, ok := range c.dfactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the cache of %v never synced: %w", res, ctx.Err())
		}
	}
	return nil
}

// Stop stops the informers (after ctx of Start ended) and waits for them, and the
// Events' recorder.
func (c *Cluster) Stop() {
	c.factory.Shutdown()
	c.dfactory.Shutdown()
	if c.events != nil {
		c.events.Shutdown()
	}
}

// Recorder records Events on the cluster's objects as component on host; call it
// before Start, once.
func (c *Cluster) Recorder(component, host string) record.EventRecorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cs.CoreV1().Events("")})
	c.events = b
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: host})
}

// Changed receives after any change of the cached objects.
func (c *Cluster) Changed() <-chan struct{} { return c.changed }

// Reachable asks the API server whether it is ready.
func (c *Cluster) Reachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// Plan is the cluster's desired state as the caches hold it now.
func (c *Cluster) Plan(defaultClass bool) Plan {
	svcs, _ := c.services.List(labels.Everything())
	slices, _ := c.slices.List(labels.Everything())
	nodes, _ := c.nodes.List(labels.Everything())
	return plan(svcs, slices, nodes, c.Pools(), defaultClass)
}

// Pools is the cluster's IPPools (an invalid one gives no address: the controller
// says why in an Event on it) and its Namespaces' labels.
func (c *Cluster) Pools() Pools {
	ps := Pools{Namespaces: map[string]labels.Set{}}
	objs, _ := c.pools.List(labels.Everything())
	for _, obj := range objs {
		if p, err := kube.ParsePool(obj.(*unstructured.Unstructured)); err == nil {
			ps.Pools = append(ps.Pools, p)
		}
	}
	nss, _ := c.namespaces.List(labels.Everything())
	for _, ns := range nss {
		ps.Namespaces[ns.Name] = labels.Set(ns.Labels)
	}
	return ps
}
