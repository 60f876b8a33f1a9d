package kubetest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What kubelet, the scheduler and the EndpointSlice controller would write, written
// by the tests: Nodes, and EndpointSlices of pods on them.

// Namespace creates a namespace named prefix-RANDOM and returns its name.
func (c *Cluster) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := c.CS.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Node creates a Node with an InternalIP, Ready or not, deleted when the test ends.
func (c *Cluster) Node(t testing.TB, name, internalIP string, ready bool, labels map[string]string) {
	t.Helper()
	nodes := c.CS.CoreV1().Nodes()
	n, err := nodes.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}, {Type: corev1.NodeHostName, Address: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	if _, err := nodes.UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Endpoint is a pod's address on a Node, ready or not.
type Endpoint struct {
	Addr, Node string
	Ready      bool
}

// PortName and TargetPort are the port of the pods of Slice.
const (
	PortName   = "http"
	TargetPort = 8080
)

// Slice writes (creates or replaces) the IPv4 EndpointSlice name of the Service svc,
// with its pods' port PortName.
func (c *Cluster) Slice(t testing.TB, ns, svc, name string, eps ...Endpoint) {
	t.Helper()
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new(PortName), Port: new(int32(TargetPort))}},
	}
	for _, ep := range eps {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ep.Addr}, NodeName: new(ep.Node),
			Conditions: discoveryv1.EndpointConditions{Ready: new(ep.Ready)}})
	}
	slices := c.CS.DiscoveryV1().EndpointSlices(ns)
	old, err := slices.Get(context.Background(), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = slices.Create(context.Background(), es, metav1.CreateOptions{})
	case err == nil:
		es.ResourceVersion = old.ResourceVersion
		_, err = slices.Update(context.Background(), es, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Service creates svc in ns and, when addrs are given, writes them to its status as
// the kube-controller would.
func (c *Cluster) Service(t testing.TB, ns string, svc *corev1.Service, addrs ...string) {
	t.Helper()
	services := c.CS.CoreV1().Services(ns)
	svc, err := services.Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) == 0 {
		return
	}
	for _, a := range addrs {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a})
	}
	if _, err := services.UpdateStatus(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// poolResource is kube.PoolResource (kube's tests import this package).
var poolResource = schema.GroupVersionResource{Group: "manifold.io", Version: "v1alpha1", Resource: "ippools"}

// Pool creates the IPPool name with spec, deleted when the test ends: the LB nodes
// serve only the addresses of a pool that selects the Service.
func (c *Cluster) Pool(t testing.TB, name string, spec map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "manifold.io/v1alpha1", "kind": "IPPool", "metadata": map[string]any{"name": name}, "spec": spec,
	}}
	pools := c.Dyn.Resource(poolResource)
	if _, err := pools.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}
