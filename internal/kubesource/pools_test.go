package kubesource

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/manifoldlb/manifold/internal/kube"
)

// An LB node serves only the addresses of a pool that selects the Service: whoever
// may write a Service's status (not only the controller) cannot make the nodes
// announce an address of no pool, nor one of another namespace's pool. Each refusal
// is in Skipped, counted (State.OutOfPool: the metric), and told in a Warning Event
// on the Service; the Service's other address is served.
func TestAddressesOutsidePoolsAreRefused(t *testing.T) {
	e := newEnv(t) // its pool: 198.51.100.0/24 and 2001:db8::/64, for e.ns only
	n1 := e.node("n1", "10.6.0.1", true, nil)
	e.service("web", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.8", "203.0.113.50")
	e.slice("web", "web-a", ep("10.244.1.1", n1, true))

	other := e.c.Namespace(t, "src-other")
	class := kube.Class
	e.c.Service(t, other, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "squatter"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Ports: []corev1.ServicePort{tcp("http", 8080)}},
	}, "198.51.100.9")

	refused := func(st State) []string {
		var out []string
		for _, why := range st.Skipped {
			if strings.Contains(why, e.ns+"/") || strings.Contains(why, other+"/") {
				out = append(out, why)
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{
		fmt.Sprintf("Service %s/web: 203.0.113.50 is in no IPPool that selects the Service: refused", e.ns),
		fmt.Sprintf("Service %s/squatter: 198.51.100.9 is in no IPPool that selects the Service: refused", other),
	}
	slices.Sort(want)
	st := e.wait("both refusals", func(st State) bool { return slices.Equal(refused(st), want) })
	if got := e.backends(st); len(got) != 1 || got["web.80 198.51.100.8:80/tcp"] != "10.6.0.1×1" {
		t.Errorf("served %v, want web's pool address only", got)
	}
	if st.OutOfPool < 2 {
		t.Errorf("OutOfPool %d, want at least the test's 2", st.OutOfPool)
	}
	for ns, name := range map[string]string{e.ns: "web", other: "squatter"} {
		waitEvent(t, e, ns, name, kube.ReasonNotInPool)
	}
}

// waitEvent waits, at most applyWithin, for an Event of reason on the Service ns/name.
func waitEvent(t *testing.T, e *env, ns, name, reason string) {
	t.Helper()
	events := e.c.CS.CoreV1().Events(ns)
	selector := fields.Set{"involvedObject.name": name, "reason": reason}.String()
	ctx, cancel := context.WithTimeout(context.Background(), applyWithin)
	defer cancel()
	list, err := events.List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > 0 {
		return
	}
	w, err := events.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case <-w.ResultChan():
	case <-ctx.Done():
		t.Fatalf("no Event %s on %s/%s within %v", reason, ns, name, time.Duration(applyWithin))
	}
}
