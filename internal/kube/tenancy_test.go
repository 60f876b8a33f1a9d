package kube

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pool that names its namespaces serves only the Services there: a Service of
// another namespace carrying the same labels gets none of its addresses — not picked,
// not asked for by name (an autoAssign: false pool), not shared through a sharing key —
// until its Namespace gets a label that one of the pool's namespaceSelectors matches.
func TestPoolsServeOnlyTheirNamespaces(t *testing.T) {
	e := newEnv(t)     // the tenant
	other := newEnv(t) // another namespace, whose Services copy the tenant's labels
	e.pool("a", map[string]any{"cidrs": []any{"192.0.2.48/30"}, "namespaces": []any{e.ns}})
	e.pool("reserved", map[string]any{"cidrs": []any{"198.51.100.8/30"}, "autoAssign": false, "namespaces": []any{e.ns}})
	e.pool("selected", map[string]any{"cidrs": []any{"192.0.2.52/30"},
		"namespaceSelectors": []any{map[string]any{"matchLabels": map[string]any{"tenant": e.ns}}}})
	e.c.runController(t, "tenancy", false)

	share := func(s *corev1.Service) { s.Annotations[AnnotationShared] = "front" }
	e.service("web", 80, share)
	web := addrs(e.waitService("web", assignWithin, "an address of its namespace's pool", hasAddr))
	inPrefix(t, web[0], "192.0.2.48/30")

	asTenant := func(edit func(*corev1.Service)) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Labels["test"] = e.ns
			if edit != nil {
				edit(s)
			}
		}
	}
	other.service("intruder", 80, asTenant(nil))
	other.waitEvent("intruder", ReasonExhausted, assignWithin)
	other.service("pinned", 80, asTenant(func(s *corev1.Service) { s.Annotations[AnnotationIPs] = "198.51.100.9" }))
	other.waitEvent("pinned", ReasonNotInPool, assignWithin)
	other.service("sharer", 443, asTenant(func(s *corev1.Service) {
		share(s)
		s.Annotations[AnnotationIPs] = web[0].String()
	}))
	other.waitEvent("sharer", ReasonNotInPool, assignWithin)
	other.noAddress("intruder", "pinned", "sharer")

	ns, err := e.c.CS.CoreV1().Namespaces().Get(context.Background(), other.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["tenant"] = e.ns
	if _, err := e.c.CS.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := addrs(other.waitService("intruder", assignWithin, "an address once its Namespace is selected", hasAddr))
	if !netip.MustParsePrefix("192.0.2.52/30").Contains(got[0]) {
		t.Errorf("intruder got %v, want one of the pool whose namespaceSelectors match", got)
	}
	other.noAddress("pinned", "sharer")
}
