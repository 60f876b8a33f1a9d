package kube

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The controller against the real API server, as its ServiceAccount. Each test has
// its own namespace, and pools that select only the Services of that namespace (by the
// label test=NAMESPACE), so that the tests do not take each other's addresses.

// assignWithin is the bound from a Service's creation to its address in status.
const assignWithin = time.Second

type env struct {
	t  *testing.T
	c  *testCluster
	ns string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := apiServer(t)
	ns, err := c.CS.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kube-test-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, c: c, ns: ns.Name}
}

// pool creates an IPPool that selects the test's Services; it is deleted when the
// test ends.
func (e *env) pool(name string, spec map[string]any) {
	e.t.Helper()
	spec["serviceSelector"] = map[string]any{"matchLabels": map[string]any{"test": e.ns}}
	name = e.poolName(name)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "manifold.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
	if _, err := e.c.Dyn.Resource(PoolResource).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.c.Dyn.Resource(PoolResource).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func (e *env) poolName(name string) string { return e.ns + "-" + name }

// service creates a LoadBalancer Service of manifold's class with one TCP port, as
// edit changes it; it is deleted when the test ends (before its pools are).
func (e *env) service(name string, port int32, edit func(*corev1.Service)) {
	e.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": e.ns}, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: new(Class),
			Ports:             []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: port}},
		},
	}
	if edit != nil {
		edit(svc)
	}
	if _, err := e.c.CS.CoreV1().Services(e.ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.c.CS.CoreV1().Services(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func (e *env) get(name string) *corev1.Service {
	e.t.Helper()
	svc, err := e.c.CS.CoreV1().Services(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

// waitFor watches the object until cond holds, for at most within; it returns the
// object that satisfied cond.
func waitFor[T runtime.Object](t *testing.T, within time.Duration, what string, list func(ctx context.Context) (string, error), watchFrom func(ctx context.Context, rv string) (watch.Interface, error), cond func(T) bool, current func(ctx context.Context) []T) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	rv, err := list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range current(ctx) {
		if cond(obj) {
			return obj
		}
	}
	w, err := watchFrom(ctx, rv)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
			if obj, ok := ev.Object.(T); ok && cond(obj) {
				return obj
			}
		case <-ctx.Done():
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

// waitService waits until the Service satisfies cond.
func (e *env) waitService(name string, within time.Duration, what string, cond func(*corev1.Service) bool) *corev1.Service {
	e.t.Helper()
	svcs := e.c.CS.CoreV1().Services(e.ns)
	var first *corev1.Service
	return waitFor(e.t, within, name+": "+what,
		func(ctx context.Context) (string, error) {
			svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
			first = svc
			if err != nil {
				return "", err
			}
			return svc.ResourceVersion, nil
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			return svcs.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
		},
		cond,
		func(context.Context) []*corev1.Service { return []*corev1.Service{first} })
}

// waitEvent waits until an Event of reason is recorded on the named Service.
func (e *env) waitEvent(name, reason string, within time.Duration) *corev1.Event {
	e.t.Helper()
	return e.waitEventIn(e.ns, name, reason, within)
}

// waitEventIn waits for an Event in namespace ns ("default" for a cluster-scoped object).
func (e *env) waitEventIn(ns, name, reason string, within time.Duration) *corev1.Event {
	e.t.Helper()
	events := e.c.CS.CoreV1().Events(ns)
	selector := fields.Set{"involvedObject.name": name, "reason": reason}.String()
	var found []*corev1.Event
	return waitFor(e.t, within, fmt.Sprintf("event %s on %s", reason, name),
		func(ctx context.Context) (string, error) {
			list, err := events.List(ctx, metav1.ListOptions{FieldSelector: selector})
			if err != nil {
				return "", err
			}
			for i := range list.Items {
				found = append(found, &list.Items[i])
			}
			return list.ResourceVersion, nil
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			return events.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: rv})
		},
		func(*corev1.Event) bool { return true },
		func(context.Context) []*corev1.Event { return found })
}

// noAddress fails the test for each of the Services that has an address.
func (e *env) noAddress(names ...string) {
	e.t.Helper()
	for _, name := range names {
		if svc := e.get(name); hasAddr(svc) {
			e.t.Errorf("%s has %v, want none", name, addrs(svc))
		}
	}
}

func addrs(svc *corev1.Service) []netip.Addr { return statusAddrs(svc) }

func hasAddr(svc *corev1.Service) bool { return len(svc.Status.LoadBalancer.Ingress) > 0 }

func inPrefix(t *testing.T, a netip.Addr, prefix string) {
	t.Helper()
	if !netip.MustParsePrefix(prefix).Contains(a) {
		t.Errorf("%s is not in the pool %s", a, prefix)
	}
}

func TestAssignsAnAddressWithinASecond(t *testing.T) {
	e := newEnv(t)
	e.pool("v4", map[string]any{"cidrs": []any{"192.0.2.0/29"}})
	e.pool("v6", map[string]any{"ranges": []any{"2001:db8:1::10-2001:db8:1::1f"}})
	e.c.runController(t, "assign", false)

	// Created first, so that the one worker has synced them when web has its address.
	e.service("other-class", 80, func(s *corev1.Service) { s.Spec.LoadBalancerClass = new("example.com/lb") })
	e.service("no-class", 80, func(s *corev1.Service) { s.Spec.LoadBalancerClass = nil })
	start := time.Now()
	e.service("web", 80, func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyPreferDualStack)
	})
	web := e.waitService("web", assignWithin, "an address of each family", func(s *corev1.Service) bool { return len(s.Status.LoadBalancer.Ingress) == 2 })
	t.Logf("web has %v %s after its creation", addrs(web), time.Since(start).Round(time.Millisecond))
	got := addrs(web)
	inPrefix(t, got[0], "192.0.2.0/29")
	inPrefix(t, got[1], "2001:db8:1::10/124")
	e.waitEvent("web", ReasonAssigned, time.Second)
	e.noAddress("other-class", "no-class")
}

func TestDefaultClass(t *testing.T) {
	e := newEnv(t)
	e.pool("v4", map[string]any{"cidrs": []any{"192.0.2.8/29"}})
	e.c.runController(t, "default-class", true)
	// Dual stack preferred, but the pools have IPv4 only: the IPv4 address it gets.
	e.service("no-class", 80, func(s *corev1.Service) {
		s.Spec.LoadBalancerClass = nil
		s.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyPreferDualStack)
	})
	got := addrs(e.waitService("no-class", assignWithin, "an address", hasAddr))
	if len(got) != 1 {
		t.Fatalf("no-class has %v, want one IPv4 address", got)
	}
	inPrefix(t, got[0], "192.0.2.8/29")
	// Dual stack required: both or nothing.
	e.service("both-or-none", 80, func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	})
	e.waitEvent("both-or-none", ReasonExhausted, assignWithin)
	e.noAddress("both-or-none")
}

func TestPoolExhaustedThenFreed(t *testing.T) {
	e := newEnv(t)
	e.pool("one", map[string]any{"ranges": []any{"192.0.2.16-192.0.2.16"}})
	e.c.runController(t, "exhausted", false)
	e.service("first", 80, nil)
	if got := addrs(e.waitService("first", assignWithin, "an address", hasAddr)); got[0] != netip.MustParseAddr("192.0.2.16") {
		t.Fatalf("first got %v", got)
	}
	e.service("second", 80, nil)
	ev := e.waitEvent("second", ReasonExhausted, assignWithin)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %s is %s, want Warning", ev.Reason, ev.Type)
	}
	e.noAddress("second")
	if err := e.c.CS.CoreV1().Services(e.ns).Delete(context.Background(), "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("first", ReasonReleased, assignWithin)
	if got := addrs(e.waitService("second", assignWithin, "the freed address", hasAddr)); got[0] != netip.MustParseAddr("192.0.2.16") {
		t.Errorf("second got %v, want the freed 192.0.2.16", got)
	}
}

// A pool the schema lets through but no address can come from is reported on the
// pool, and the other pools still serve.
func TestInvalidPool(t *testing.T) {
	e := newEnv(t)
	e.pool("bad", map[string]any{"cidrs": []any{"192.0.2.300/24"}})
	e.pool("good", map[string]any{"ranges": []any{"192.0.2.44-192.0.2.45"}})
	e.c.runController(t, "invalid-pool", false)
	if ev := e.waitEventIn("default", e.poolName("bad"), ReasonInvalidPool, assignWithin); !strings.Contains(ev.Message, "spec.cidrs[0]") {
		t.Errorf("the event does not name the field: %q", ev.Message)
	}
	e.service("web", 80, nil)
	inPrefix(t, addrs(e.waitService("web", assignWithin, "an address from the good pool", hasAddr))[0], "192.0.2.44/31")
}

func TestPinnedAddress(t *testing.T) {
	e := newEnv(t)
	e.pool("auto", map[string]any{"cidrs": []any{"192.0.2.24/30"}})
	e.pool("reserved", map[string]any{"cidrs": []any{"198.51.100.0/30"}, "autoAssign": false})
	e.c.runController(t, "pinned", false)
	pin := func(a string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Annotations[AnnotationIPs] = a }
	}
	e.service("pinned", 80, pin("198.51.100.2"))
	if got := addrs(e.waitService("pinned", assignWithin, "its address", hasAddr)); got[0] != netip.MustParseAddr("198.51.100.2") {
		t.Errorf("pinned got %v, want 198.51.100.2", got)
	}
	e.service("legacy", 80, func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.51.100.3" })
	if got := addrs(e.waitService("legacy", assignWithin, "its address", hasAddr)); got[0] != netip.MustParseAddr("198.51.100.3") {
		t.Errorf("legacy got %v, want 198.51.100.3 (spec.loadBalancerIP)", got)
	}
	e.service("taken", 81, pin("198.51.100.2"))
	if ev := e.waitEvent("taken", ReasonTaken, assignWithin); !strings.Contains(ev.Message, e.ns+"/pinned") {
		t.Errorf("the event does not name who holds the address: %q", ev.Message)
	}
	e.service("outside", 80, pin("203.0.113.9"))
	e.waitEvent("outside", ReasonNotInPool, assignWithin)
	e.service("garbage", 80, pin("not-an-address"))
	e.waitEvent("garbage", ReasonInvalidAddress, assignWithin)
	e.noAddress("taken", "outside", "garbage")
}

func TestSharedAddress(t *testing.T) {
	e := newEnv(t)
	e.pool("v4", map[string]any{"cidrs": []any{"192.0.2.32/30"}})
	e.c.runController(t, "shared", false)
	share := func(s *corev1.Service) { s.Annotations[AnnotationShared] = "front" }
	e.service("http", 80, share)
	http := addrs(e.waitService("http", assignWithin, "an address", hasAddr))
	e.service("https", 443, share)
	if got := addrs(e.waitService("https", assignWithin, "an address", hasAddr)); got[0] != http[0] {
		t.Errorf("https got %v, want the shared %v", got, http)
	}
	e.service("http-again", 80, share)
	if got := addrs(e.waitService("http-again", assignWithin, "an address", hasAddr)); got[0] == http[0] {
		t.Errorf("http-again shares %v on the port http has", got)
	}
	e.service("unshared", 8080, func(s *corev1.Service) { s.Annotations[AnnotationIPs] = http[0].String() })
	e.waitEvent("unshared", ReasonTaken, assignWithin)
	e.noAddress("unshared")
}

func TestTypeChangeFreesTheAddress(t *testing.T) {
	e := newEnv(t)
	e.pool("one", map[string]any{"ranges": []any{"192.0.2.40-192.0.2.40"}})
	e.c.runController(t, "type-change", false)
	e.service("lb", 80, nil)
	e.waitService("lb", assignWithin, "an address", hasAddr)
	e.service("waiting", 80, nil)
	e.waitEvent("waiting", ReasonExhausted, assignWithin)

	svc := e.get("lb")
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.LoadBalancerClass = nil
	svc.Spec.AllocateLoadBalancerNodePorts = nil
	svc.Spec.ExternalTrafficPolicy = ""
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	if _, err := e.c.CS.CoreV1().Services(e.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitService("lb", assignWithin, "no address once a ClusterIP", func(s *corev1.Service) bool { return !hasAddr(s) })
	if got := addrs(e.waitService("waiting", assignWithin, "the freed address", hasAddr)); got[0] != netip.MustParseAddr("192.0.2.40") {
		t.Errorf("waiting got %v", got)
	}
}

// A restarted controller keeps every address, even when a Service created while it
// was away comes first in its list; a standby acts only once the leader has given up
// the Lease, and then takes over.
func TestRestartAndStandby(t *testing.T) {
	e := newEnv(t)
	e.pool("v4", map[string]any{"cidrs": []any{"192.0.2.48/29"}})
	stopA := e.c.runController(t, "replica-a", false)
	e.waitLease("replica-a")
	before := map[string]netip.Addr{}
	for _, name := range []string{"s1", "s2", "s3"} {
		e.service(name, 80, nil)
		before[name] = addrs(e.waitService(name, assignWithin, "an address", hasAddr))[0]
	}
	// The standby serves classless Services and the leader does not: while the
	// leader leads, one stays without an address (the leader has synced it when it
	// has given the Service created after it its address); once the standby leads, it
	// gets one.
	stopB := e.c.runController(t, "replica-b", true)
	e.service("classless", 80, func(s *corev1.Service) { s.Spec.LoadBalancerClass = nil })
	e.service("marker", 80, nil)
	e.waitService("marker", assignWithin, "an address from the leader", hasAddr)
	e.noAddress("classless")
	stopA()
	e.waitLease("replica-b")
	e.waitService("classless", assignWithin, "an address from the new leader", hasAddr)
	// Named to come first in the informer's list, which is in key order.
	e.service("a-new", 80, nil)
	got := addrs(e.waitService("a-new", assignWithin, "an address from the standby", hasAddr))[0]
	stopB()
	for name, a := range before {
		if got == a {
			t.Errorf("a-new got %s, which %s holds", got, name)
		}
	}

	e.service("b-while-away", 80, nil)
	e.c.runController(t, "replica-c", false)
	e.waitLease("replica-c")
	e.waitService("b-while-away", 3*assignWithin, "an address after the restart", hasAddr)
	for name, a := range before {
		if now := addrs(e.get(name)); len(now) != 1 || now[0] != a {
			t.Errorf("%s had %s, has %v after the restart", name, a, now)
		}
	}
}

// waitLease waits until identity holds the controller's Lease.
func (e *env) waitLease(identity string) {
	e.t.Helper()
	leases := e.c.CS.CoordinationV1().Leases("manifold-system")
	var first *coordinationv1.Lease
	waitFor(e.t, 10*time.Second, "lease held by "+identity,
		func(ctx context.Context) (string, error) {
			l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return "", nil
			}
			first = l
			if err != nil {
				return "", err
			}
			return l.ResourceVersion, nil
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			return leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + LeaseName, ResourceVersion: rv})
		},
		func(l *coordinationv1.Lease) bool {
			return l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == identity
		},
		func(context.Context) []*coordinationv1.Lease { return []*coordinationv1.Lease{first} })
}

// The controller's ServiceAccount can do no more than its job: the manifests grant
// no write to a Service's spec, no Secret, no Lease but its own.
func TestRBACIsLeast(t *testing.T) {
	c := apiServer(t)
	cs, err := kubernetes.NewForConfig(c.controllerConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list services: %v", err)
	}
	forbidden := map[string]error{}
	_, forbidden["create a Service"] = cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	_, forbidden["list Secrets"] = cs.CoreV1().Secrets("manifold-system").List(ctx, metav1.ListOptions{})
	_, forbidden["list Pods"] = cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	_, forbidden["create a Lease elsewhere"] = cs.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName}}, metav1.CreateOptions{})
	_, forbidden["read another Lease"] = cs.CoordinationV1().Leases("manifold-system").Get(ctx, "other", metav1.GetOptions{})
	dyn, err := dynamic.NewForConfig(c.controllerConfig())
	if err != nil {
		t.Fatal(err)
	}
	forbidden["delete an IPPool"] = dyn.Resource(PoolResource).Delete(ctx, "none", metav1.DeleteOptions{})
	names := slices.Sorted(maps.Keys(forbidden))
	for _, what := range names {
		if err := forbidden[what]; !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
}
