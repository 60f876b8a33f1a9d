// Package kube is manifold's side of a Kubernetes cluster. The controller
// (`manifold kube-controller`) gives Services of type LoadBalancer their addresses
// from IPPools and writes them into the Services' status.
//
//	informers (Services, IPPools, Namespaces) ──► queue ──► one worker: sync(key)
//	                                                 │ Allocator (who holds what)
//	                                                 ├─► status.loadBalancer.ingress
//	                                                 └─► Events
//
// The worker is the only goroutine that touches the allocator. The allocator starts
// from the addresses the Services' status already shows, so that a restarted (or
// newly elected) controller changes none of them.
package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// The names a user writes on a Service.
const (
	// Class is the spec.loadBalancerClass of the Services manifold serves.
	Class = "manifold.io/lb"
	// AnnotationIPs asks for given addresses (comma-separated, one per family).
	AnnotationIPs = "manifold.io/load-balancer-ips"
	// AnnotationShared lets Services of the same value share an address on distinct ports.
	AnnotationShared = "manifold.io/allow-shared-ip"
)

// Event reasons besides the allocator's.
const (
	ReasonAssigned       = "AddressAssigned"
	ReasonReleased       = "AddressReleased"
	ReasonInvalidAddress = "InvalidAddress"
	ReasonInvalidPool    = "InvalidPool"
)

// LeaseName is the Lease whose holder is the one active controller.
const LeaseName = "manifold-controller"

// Options configure the controller.
type Options struct {
	Config *rest.Config
	// DefaultClass serves, besides the Services of Class, those with no class.
	DefaultClass bool
	// Namespace holds the Lease.
	Namespace string
	// Identity names this replica in the Lease; the host name and a random suffix
	// when empty.
	Identity string
	Log      *slog.Logger
}

// RESTConfig is the configuration of a client: from the kubeconfig file, or the
// Pod's own (in cluster) when kubeconfig is "".
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("not in a cluster (give --kubeconfig FILE): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// Run runs the controller until ctx ends: it waits to hold the Lease, then serves.
// It returns an error when it loses the Lease, so that its process restarts as a
// standby rather than acts beside the new leader.
func Run(ctx context.Context, o Options) error {
	if o.Namespace == "" {
		return errors.New("kube controller: the namespace of the Lease is required")
	}
	if o.Identity == "" {
		host, _ := os.Hostname()
		o.Identity = host + "-" + rand.String(5)
	}
	cfg := rest.CopyConfig(o.Config)
	if cfg.QPS == 0 {
		// client-go's default (5 a second, bursts of 10) would take seconds to write
		// the status of many Services after a pool changes.
		cfg.QPS, cfg.Burst = 50, 100
	}
	// The REST clients of the groups it uses, on Scheme (clients.go says why).
	core, err := Client(cfg, CoreV1)
	if err != nil {
		return err
	}
	coordination, err := Client(cfg, CoordinationV1)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	e := &elector{c: coordination, namespace: o.Namespace, id: o.Identity}
	if !e.acquire(ctx) {
		return nil
	}
	// serve runs here, so that Run returns only once the controller has stopped
	// acting and the Lease is let go.
	ctx, cancel := context.WithCancel(ctx)
	leadCtx, released := e.lead(ctx)
	defer func() {
		cancel()
		<-released
	}()
	o.Log.Info("leading", "lease", o.Namespace+"/"+LeaseName, "identity", o.Identity)
	err = serve(leadCtx, core, dyn, o)
	switch {
	case ctx.Err() != nil:
		return nil // stopped: whatever serve was doing was cut short on purpose
	case leadCtx.Err() != nil:
		return errors.New("lost the Lease " + o.Namespace + "/" + LeaseName)
	}
	return err
}

// poolsKey is the queue's key for "the pools changed"; Service keys have a slash.
const poolsKey = "ippools"

type controller struct {
	o        Options
	core     *rest.RESTClient
	services corelisters.ServiceLister
	// namespaces' labels select pools (an IPPool's namespaceSelectors)
	namespaces corelisters.NamespaceLister
	pools      cache.GenericLister
	queue      workqueue.TypedRateLimitingInterface[string]
	alloc      *Allocator
	events     *EventRecorder
	// uids of the Services holding addresses, to name a deleted one in its Event.
	uids map[string]corev1.ObjectReference
}

func serve(ctx context.Context, core *rest.RESTClient, dyn dynamic.Interface, o Options) error {

	var infs Informers
	svcInformer := infs.Add(core, "services", &corev1.Service{})
	nsInformer := infs.Add(core, "namespaces", &corev1.Namespace{})
	pools := dyn.Resource(PoolResource)
	poolInformer := infs.AddListWatch(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pools.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return pools.Watch(ctx, opts)
		},
	}, PoolResource.Resource, &unstructured.Unstructured{})

	c := &controller{
		o:          o,
		core:       core,
		services:   corelisters.NewServiceLister(svcInformer.GetIndexer()),
		namespaces: corelisters.NewNamespaceLister(nsInformer.GetIndexer()),
		pools:      cache.NewGenericLister(poolInformer.GetIndexer(), PoolResource.GroupResource()),
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		alloc:      NewAllocator(),
		events:     NewEventRecorder(ctx, core, "manifold-controller", "", o.Log),
		uids:       map[string]corev1.ObjectReference{},
	}
	defer c.queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := svcInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	// a Namespace's labels may bring its Services into a pool or take them out
	namespaceChanged := func(obj any) {
		ns, ok := obj.(*corev1.Namespace)
		if !ok {
			return // a deleted Namespace's tombstone: its Services are being deleted too
		}
		svcs, _ := c.services.Services(ns.Name).List(labels.Everything())
		for _, svc := range svcs {
			c.queue.Add(ns.Name + "/" + svc.Name)
		}
	}
	if _, err := nsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			if !maps.Equal(old.(*corev1.Namespace).Labels, obj.(*corev1.Namespace).Labels) {
				namespaceChanged(obj)
			}
		},
	}); err != nil {
		return err
	}
	poolsChanged := func(any) { c.queue.Add(poolsKey) }
	if _, err := poolInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poolsChanged, UpdateFunc: func(_, obj any) { poolsChanged(obj) }, DeleteFunc: poolsChanged,
	}); err != nil {
		return err
	}
	infs.Start(ctx)
	defer infs.Shutdown()
	if err := infs.WaitForCacheSync(ctx); err != nil {
		return err
	}
	c.loadPools()
	c.claimStatus()

	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
	return nil
}

func (c *controller) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	var err error
	if key == poolsKey {
		c.loadPools()
		c.enqueueAll()
	} else {
		err = c.sync(ctx, key)
	}
	if err != nil && ctx.Err() == nil {
		// A conflict is the informer's copy being older than the Service (our own
		// status write not seen yet): the retry reads the new one.
		if !apierrors.IsConflict(err) {
			c.o.Log.Warn("sync failed, will retry", "service", key, "err", err)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *controller) loadPools() {
	objs, err := c.pools.List(labels.Everything())
	if err != nil {
		c.o.Log.Error("list ippools", "err", err)
		return
	}
	var pools []*Pool
	for _, obj := range objs {
		u := obj.(*unstructured.Unstructured)
		p, err := ParsePool(u)
		if err != nil {
			// A bad pool gives no address; the others still do.
			c.o.Log.Warn("ippool ignored", "err", err)
			c.events.Event(u, corev1.EventTypeWarning, ReasonInvalidPool, err.Error())
			continue
		}
		pools = append(pools, p)
	}
	c.alloc.SetPools(pools)
}

func (c *controller) enqueueAll() {
	svcs, _ := c.services.List(labels.Everything())
	for _, svc := range svcs {
		c.queue.Add(svc.Namespace + "/" + svc.Name)
	}
}

// claimStatus syncs, before anything else, every Service whose status already shows
// an address: they keep their addresses before a new Service may be given one.
func (c *controller) claimStatus() {
	svcs, _ := c.services.List(labels.Everything())
	slices.SortFunc(svcs, func(a, b *corev1.Service) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for _, svc := range svcs {
		if c.ours(svc) && len(statusAddrs(svc)) > 0 {
			if err := c.sync(context.Background(), svc.Namespace+"/"+svc.Name); err != nil {
				c.queue.AddRateLimited(svc.Namespace + "/" + svc.Name)
			}
		}
	}
}

func (c *controller) ours(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return c.o.DefaultClass
	}
	return *svc.Spec.LoadBalancerClass == Class
}

func (c *controller) sync(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.release(key, nil)
		return nil
	}
	if err != nil {
		return err
	}
	if !c.ours(svc) {
		if c.release(key, svc) && len(svc.Status.LoadBalancer.Ingress) > 0 && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return c.writeStatus(ctx, svc, nil)
		}
		return nil
	}
	addrs, err := c.assign(svc)
	if err != nil {
		var aerr *AllocError
		reason := ReasonInvalidAddress
		if errors.As(err, &aerr) {
			reason = aerr.Reason
		}
		c.events.Event(svc, corev1.EventTypeWarning, reason, err.Error())
		c.release(key, svc)
		addrs = nil
	}
	return c.writeStatus(ctx, svc, addrs)
}

// assign decides the Service's addresses and takes them: those it asks for, or else
// per family the one it holds or its status shows, or else a new one.
func (c *controller) assign(svc *corev1.Service) ([]netip.Addr, error) {
	key := svc.Namespace + "/" + svc.Name
	claim := c.claimOf(svc)
	want, err := requested(svc)
	if err != nil {
		return nil, err
	}
	if want == nil {
		kept := append(c.alloc.Held(key), statusAddrs(svc)...)
		for n, v6 := range families(svc) {
			i := slices.IndexFunc(kept, func(a netip.Addr) bool { return a.Is6() == v6 && c.alloc.Check(claim, a) == nil })
			if i >= 0 {
				want = append(want, kept[i])
				continue
			}
			a, err := c.alloc.Pick(claim, v6)
			if err != nil {
				// A Service that prefers dual stack still gets its first family's
				// address when no pool has one of the second.
				if n > 0 && optionalSecondFamily(svc) {
					continue
				}
				return nil, err
			}
			want = append(want, a)
		}
	}
	held := c.alloc.Held(key)
	released, err := c.alloc.Assign(claim, want)
	if err != nil {
		return nil, err
	}
	c.uids[key] = ref(svc)
	if len(released) > 0 {
		c.events.Eventf(svc, corev1.EventTypeNormal, ReasonReleased, "released %s", joinAddrs(released))
		c.enqueueWaiting()
	}
	if added := slices.DeleteFunc(slices.Clone(want), func(a netip.Addr) bool { return slices.Contains(held, a) }); len(added) > 0 {
		c.events.Eventf(svc, corev1.EventTypeNormal, ReasonAssigned, "assigned %s", joinAddrs(added))
	}
	return want, nil
}

// release frees what the Service held (svc is nil when it was deleted), and says
// whether it held anything.
func (c *controller) release(key string, svc *corev1.Service) bool {
	addrs := c.alloc.Release(key)
	r, known := c.uids[key]
	delete(c.uids, key)
	if len(addrs) == 0 {
		return false
	}
	if svc != nil {
		r = ref(svc)
	}
	if svc != nil || known {
		c.events.Eventf(&r, corev1.EventTypeNormal, ReasonReleased, "released %s", joinAddrs(addrs))
	}
	c.enqueueWaiting()
	return true
}

// enqueueWaiting syncs again the Services of ours that hold no address: one freed
// may be theirs now.
func (c *controller) enqueueWaiting() {
	svcs, _ := c.services.List(labels.Everything())
	for _, svc := range svcs {
		key := svc.Namespace + "/" + svc.Name
		if c.ours(svc) && len(c.alloc.Held(key)) == 0 {
			c.queue.Add(key)
		}
	}
}

func (c *controller) writeStatus(ctx context.Context, svc *corev1.Service, addrs []netip.Addr) error {
	if slices.Equal(statusAddrs(svc), addrs) {
		return nil
	}
	svc = svc.DeepCopy()
	svc.Status.LoadBalancer.Ingress = nil
	for _, a := range addrs {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a.String()})
	}
	err := c.core.Put().Namespace(svc.Namespace).Resource("services").Name(svc.Name).SubResource("status").
		Param("fieldManager", "manifold-controller").Body(svc).Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("status of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

func (ctl *controller) claimOf(svc *corev1.Service) Claim {
	c := ClaimOf(svc)
	if ns, err := ctl.namespaces.Get(svc.Namespace); err == nil {
		c.NamespaceLabels = labels.Set(ns.Labels)
	}
	return c
}

// ClaimOf is the claim of svc but for its namespace's labels (Claim.NamespaceLabels),
// which the caller reads from its Namespace.
func ClaimOf(svc *corev1.Service) Claim {
	c := Claim{Service: svc.Namespace + "/" + svc.Name, Namespace: svc.Namespace, Labels: labels.Set(svc.Labels),
		SharingKey: svc.Annotations[AnnotationShared]}
	for _, p := range svc.Spec.Ports {
		c.Ports = append(c.Ports, Port{Protocol: string(cmp.Or(p.Protocol, corev1.ProtocolTCP)), Port: p.Port})
	}
	return c
}

// requested is the addresses the Service asks for, nil when it asks for none.
func requested(svc *corev1.Service) ([]netip.Addr, error) {
	field, value := "annotation "+AnnotationIPs, svc.Annotations[AnnotationIPs]
	if value == "" {
		field, value = "spec.loadBalancerIP", svc.Spec.LoadBalancerIP
	}
	if value == "" {
		return nil, nil
	}
	var addrs []netip.Addr
	for s := range strings.SplitSeq(value, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%s: %q is not an IP address", field, s)
		}
		if slices.ContainsFunc(addrs, func(b netip.Addr) bool { return b.Is6() == a.Unmap().Is6() }) {
			return nil, fmt.Errorf("%s: %q asks for two addresses of one family", field, value)
		}
		addrs = append(addrs, a.Unmap())
	}
	return addrs, nil
}

// families is the Service's IP families (v6 true for IPv6), as the API server set them.
func families(svc *corev1.Service) []bool {
	var out []bool
	for _, f := range svc.Spec.IPFamilies {
		out = append(out, f == corev1.IPv6Protocol)
	}
	if len(out) == 0 {
		out = []bool{false}
	}
	return out
}

func optionalSecondFamily(svc *corev1.Service) bool {
	return svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyRequireDualStack
}

func statusAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func ref(svc *corev1.Service) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID}
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
