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
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
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
	core       *rest.RESTClient
	informers  kube.Informers
	services   corelisters.ServiceLister
	slices     discoverylisters.EndpointSliceLister
	nodes      corelisters.NodeLister
	namespaces corelisters.NamespaceLister
	pools      cache.GenericLister
	// events' writers (Recorder) run until Stop
	eventsCtx  context.Context
	stopEvents context.CancelFunc
	// changed gets a value (dropped when one is pending) on every change of a cached
	// object that a Plan reads: a burst of changes makes one Plan.
	changed chan struct{}
	// byService finds a Service's EndpointSlices (the slice informer's index)
	byService cache.Indexer

	mu sync.Mutex // guards dirty and all
	// dirty is the Services (NAMESPACE/NAME) whose own objects, the Service or its
	// EndpointSlices, changed since the last Changes; all says a change may touch any
	// Service (a Node, an IPPool, a Namespace's labels), or Changes was never asked
	dirty map[string]bool
	all   bool
}

// maxDirty bounds the Services Changes names: past it, a change is of any Service. It
// bounds the memory of a Cluster whose changes nobody asks for (the backend agent's,
// which plans whole), and so many Services replanned one by one cost a whole replan.
const maxDirty = 4096

// sliceIndex is the name of the index of EndpointSlices by their Service.
const sliceIndex = "service"

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
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &Cluster{core: core, changed: make(chan struct{}, 1), dirty: map[string]bool{}, all: true}
	c.eventsCtx, c.stopEvents = context.WithCancel(context.Background())
	services := c.informers.Add(core, "services", &corev1.Service{})
	slices := c.informers.Add(discovery, "endpointslices", &discoveryv1.EndpointSlice{})
	nodes := c.informers.Add(core, "nodes", &corev1.Node{})
	namespaces := c.informers.Add(core, "namespaces", &corev1.Namespace{})
	poolClient := dyn.Resource(kube.PoolResource)
	pools := c.informers.AddListWatch(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return poolClient.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return poolClient.Watch(ctx, opts)
		},
	}, kube.PoolResource.Resource, &unstructured.Unstructured{})
	c.services = corelisters.NewServiceLister(services.GetIndexer())
	c.slices = discoverylisters.NewEndpointSliceLister(slices.GetIndexer())
	c.nodes = corelisters.NewNodeLister(nodes.GetIndexer())
	c.namespaces = corelisters.NewNamespaceLister(namespaces.GetIndexer())
	c.pools = cache.NewGenericLister(pools.GetIndexer(), kube.PoolResource.GroupResource())
	if err := slices.AddIndexers(cache.Indexers{sliceIndex: func(obj any) ([]string, error) {
		if key := sliceService(obj); key != "" {
			return []string{key}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	c.byService = slices.GetIndexer()
	// what each change touches: the Service it is, or is a slice of; any Service for
	// the rest. A Node's or a Namespace's update that changes nothing a Plan reads (a
	// Node's heartbeat) is no change.
	for _, h := range []struct {
		inf  cache.SharedIndexInformer
		of   func(obj any) string // the Service touched; nil: any
		same func(old, cur any) bool
	}{
		{services, serviceKey, nil},
		{slices, sliceService, nil},
		{nodes, nil, func(old, cur any) bool { return samePlannedNode(old.(*corev1.Node), cur.(*corev1.Node)) }},
		{namespaces, nil, func(old, cur any) bool {
			return labels.Equals(old.(*corev1.Namespace).Labels, cur.(*corev1.Namespace).Labels)
		}},
		{pools, nil, nil},
	} {
		touched := func(obj any) {
			if h.of == nil {
				c.touched("")
			} else if key := h.of(obj); key != "" {
				c.touched(key)
			}
		}
		handler := cache.ResourceEventHandlerFuncs{AddFunc: touched, DeleteFunc: touched,
			UpdateFunc: func(old, cur any) {
				if h.same != nil && h.same(old, cur) {
					return
				}
				if h.of != nil {
					touched(old) // a slice relabelled leaves its old Service
				}
				touched(cur)
			}}
		if _, err := h.inf.AddEventHandler(handler); err != nil {
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

// Stop stops the informers (after ctx of Start ended) and waits for them, and the
// Events' writers.
func (c *Cluster) Stop() {
	c.informers.Shutdown()
	c.stopEvents()
}

// Recorder writes Events on the cluster's objects as component on host, until Stop.
func (c *Cluster) Recorder(component, host string, log *slog.Logger) *kube.EventRecorder {
	return kube.NewEventRecorder(c.eventsCtx, c.core, component, host, log)
}

// Changed receives after any change of the cached objects that a Plan reads.
func (c *Cluster) Changed() <-chan struct{} { return c.changed }

// touched records a change of the Service key ("": of any Service) and wakes Changed.
func (c *Cluster) touched(key string) {
	c.mu.Lock()
	switch {
	case c.all:
	case key == "" || len(c.dirty) >= maxDirty:
		c.all, c.dirty = true, map[string]bool{}
	default:
		c.dirty[key] = true
	}
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Changes is the Services (NAMESPACE/NAME, sorted) whose objects changed since it was
// last asked, or all: a change may touch any Service (the first ask says all).
func (c *Cluster) Changes() (keys []string, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys, all = slices.Sorted(maps.Keys(c.dirty)), c.all
	c.dirty, c.all = map[string]bool{}, false
	if all {
		keys = nil
	}
	return keys, all
}

// serviceKey is the key of a Service, or of the last state of a deleted one.
func serviceKey(obj any) string {
	key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return key
}

// sliceService is the key of the Service an EndpointSlice (or the last state of a
// deleted one) is of: "" when it names none.
func sliceService(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return ""
	}
	return s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
}

// samePlannedNode tells whether a Node's update leaves what a Plan reads of it: its
// readiness (and exclusion) and its InternalIPs.
func samePlannedNode(old, cur *corev1.Node) bool {
	if nodeReady(old) != nodeReady(cur) {
		return false
	}
	for _, v6 := range []bool{false, true} {
		a, aok := internalIP(old, v6)
		b, bok := internalIP(cur, v6)
		if a != b || aok != bok {
			return false
		}
	}
	return true
}

// Reachable asks the API server whether it is ready.
func (c *Cluster) Reachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := c.core.Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// planOf is the plans of the Services keys (NAMESPACE/NAME) as the caches hold them
// now: an empty plan for a Service gone.
func (c *Cluster) planOf(keys []string, defaultClass bool) []servicePlan {
	nodes, _ := c.nodes.List(labels.Everything())
	pools := c.Pools()
	out := make([]servicePlan, 0, len(keys))
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		svc, err := c.services.Services(ns).Get(name)
		if err != nil {
			svc = nil // gone
		}
		var eps []*discoveryv1.EndpointSlice
		objs, _ := c.byService.ByIndex(sliceIndex, key)
		for _, o := range objs {
			eps = append(eps, o.(*discoveryv1.EndpointSlice))
		}
		out = append(out, planService(key, svc, eps, nodes, pools, defaultClass))
	}
	return out
}

// serviceKeys is the key of every Service in the cache.
func (c *Cluster) serviceKeys() []string {
	svcs, _ := c.services.List(labels.Everything())
	keys := make([]string, len(svcs))
	for i, svc := range svcs {
		keys[i] = svc.Namespace + "/" + svc.Name
	}
	return keys
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
