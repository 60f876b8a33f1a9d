package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kube"
	"github.com/manifoldlb/manifold/internal/kube/kubetest"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The source against the real API server (internal/kube/kubetest), as the node's
// ServiceAccount. The tests run one after another: each has its own namespace and
// Nodes, deleted when it ends, so that "every ready Node" is the test's own.

// applyWithin is the bound from an API change to the update the node applies.
const applyWithin = time.Second

var (
	clusterOnce sync.Once
	cluster     *kubetest.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Stop(code != 0)
	}
	os.Exit(code)
}

func apiServer(t *testing.T) *kubetest.Cluster {
	t.Helper()
	bin, missing := kubetest.Binary("../..")
	if missing != "" {
		testenv.Missing(t, missing)
	}
	clusterOnce.Do(func() {
		cluster, clusterErr = kubetest.Start(kubetest.Options{Bin: bin, DeployDir: "../../deploy/kubernetes"})
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

// sink is the node's run loop as the source sees it: it takes every update, but for
// the next refuse ones, which it refuses.
type sink struct {
	mu      sync.Mutex
	updates []reconcile.Update
	refuse  int
}

func (s *sink) Submit(_ context.Context, u reconcile.Update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updates = append(s.updates, u)
	if s.refuse > 0 {
		s.refuse--
		return &reconcile.KernelError{Err: errors.New("map full")}
	}
	return nil
}

// since is the updates after the first from.
func (s *sink) since(from int) []reconcile.Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.updates[from:])
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

type env struct {
	t    *testing.T
	c    *kubetest.Cluster
	ns   string
	src  *Source
	sink *sink
}

// newEnv makes a namespace and runs a source as the node's ServiceAccount, for an LB
// node with an IPv4 address only.
func newEnv(t *testing.T) *env {
	t.Helper()
	c := apiServer(t)
	e := &env{t: t, c: c, ns: c.Namespace(t, "src"), sink: &sink{}}
	// the addresses the tests' Services have, for the namespace's Services only
	c.Pool(t, e.ns, map[string]any{"cidrs": []any{"198.51.100.0/24", "2001:db8::/64"}, "namespaces": []any{e.ns}})
	cl, err := NewCluster(c.As(kubetest.NodeUser))
	if err != nil {
		t.Fatal(err)
	}
	e.src = NewSource(cl, config.Kubernetes{}, config.Node{Address: netip.MustParseAddr("10.0.0.11")}, e.sink,
		slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	})
	e.wait("the caches synced", func(st State) bool { return st.Synced })
	return e
}

// node creates a Node named after the test's namespace, deleted when the test ends.
func (e *env) node(name, ip string, ready bool, labels map[string]string) string {
	e.t.Helper()
	name = e.ns + "-" + name
	e.c.Node(e.t, name, ip, ready, labels)
	return name
}

// service creates a Service of manifold's class with the given addresses in its
// status (as the kube-controller writes them).
func (e *env) service(name string, policy corev1.ServiceExternalTrafficPolicy, ports []corev1.ServicePort, addrs ...string) {
	e.t.Helper()
	class := kube.Class
	e.c.Service(e.t, e.ns, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, ExternalTrafficPolicy: policy,
			Ports: ports, Selector: map[string]string{"app": name}},
	}, addrs...)
}

func tcp(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(kubetest.TargetPort)}
}

// ep is a pod's address on a Node, ready or not.
func ep(addr, node string, ready bool) kubetest.Endpoint {
	return kubetest.Endpoint{Addr: addr, Node: node, Ready: ready}
}

func (e *env) slice(svc, name string, eps ...kubetest.Endpoint) {
	e.t.Helper()
	e.c.Slice(e.t, e.ns, svc, name, eps...)
}

// wait waits for the source's state to meet cond, at most applyWithin.
func (e *env) wait(what string, cond func(State) bool) State {
	e.t.Helper()
	return e.waitWithin(applyWithin, what, cond)
}

func (e *env) waitWithin(within time.Duration, what string, cond func(State) bool) State {
	e.t.Helper()
	start := time.Now()
	deadline := time.After(within)
	for {
		st, changed := e.src.State()
		if cond(st) {
			e.t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
			return st
		}
		select {
		case <-changed:
		case <-deadline:
			e.t.Fatalf("not within %v: %s; the source's state: %+v", within, what, summary(e.ns, st))
		}
	}
}

// backends is the test's services as name → "NODE-ADDRESS×WEIGHT ..." ("" with no
// backends): what a node programs.
func (e *env) backends(st State) map[string]string { return summary(e.ns, st) }

func summary(ns string, st State) map[string]string {
	out := map[string]string{}
	for _, s := range st.Services {
		if !strings.HasPrefix(s.Name, ns+".") {
			continue
		}
		var bs []string
		for _, b := range s.Backends {
			bs = append(bs, fmt.Sprintf("%s×%d", b.Address, b.Weight))
		}
		out[fmt.Sprintf("%s %s:%d/%s", strings.TrimPrefix(s.Name, ns+"."), s.VIP, s.Port, s.Protocol)] = strings.Join(bs, " ")
	}
	return out
}

func (e *env) want(what string, want map[string]string) State {
	e.t.Helper()
	return e.wait(what, func(st State) bool { return maps.Equal(e.backends(st), want) })
}

// With externalTrafficPolicy Local, a Node's weight is its number of ready endpoints,
// and it follows the EndpointSlices within a second.
func TestLocalWeightsAreReadyEndpoints(t *testing.T) {
	e := newEnv(t)
	n1, n2, n3 := e.node("n1", "10.1.0.1", true, nil), e.node("n2", "10.1.0.2", true, nil), e.node("n3", "10.1.0.3", true, nil)
	e.service("web", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.1")
	e.want("the Service without endpoints: no backends", map[string]string{"web.80 198.51.100.1:80/tcp": ""})

	e.slice("web", "web-a",
		ep("10.244.1.1", n1, true), ep("10.244.1.2", n1, true), ep("10.244.1.3", n1, true),
		ep("10.244.2.1", n2, true), ep("10.244.3.1", n3, false))
	e.want("weights 3 and 1", map[string]string{"web.80 198.51.100.1:80/tcp": "10.1.0.1×3 10.1.0.2×1"})

	// a second slice of the same Service adds to the counts; a pod listed in both
	// (while they are rewritten) counts once
	e.slice("web", "web-b", ep("10.244.3.2", n3, true), ep("10.244.3.3", n3, true), ep("10.244.1.1", n1, true))
	e.want("n3 comes with 2", map[string]string{"web.80 198.51.100.1:80/tcp": "10.1.0.1×3 10.1.0.2×1 10.1.0.3×2"})

	e.slice("web", "web-a", ep("10.244.1.1", n1, true), ep("10.244.2.1", n2, false))
	e.want("n1 down to 1, n2 gone", map[string]string{"web.80 198.51.100.1:80/tcp": "10.1.0.1×1 10.1.0.3×2"})
}

// With externalTrafficPolicy Cluster, every ready Node is a backend of weight 1 while
// the Service has a ready endpoint anywhere; a Node not ready, or excluded from load
// balancers, is none.
func TestClusterPolicyEveryReadyNode(t *testing.T) {
	e := newEnv(t)
	n1 := e.node("n1", "10.2.0.1", true, nil)
	e.node("n2", "10.2.0.2", true, nil)
	e.node("n3", "10.2.0.3", false, nil)
	e.node("n4", "10.2.0.4", true, map[string]string{excludeLabel: ""})
	e.service("api", corev1.ServiceExternalTrafficPolicyCluster, []corev1.ServicePort{tcp("http", 443)}, "198.51.100.2")
	e.slice("api", "api-a", ep("10.244.1.1", n1, true), ep("10.244.1.2", n1, true))
	e.want("the two ready Nodes, weight 1", map[string]string{"api.443 198.51.100.2:443/tcp": "10.2.0.1×1 10.2.0.2×1"})

	e.slice("api", "api-a", ep("10.244.1.1", n1, false))
	e.want("no ready endpoint: no backends", map[string]string{"api.443 198.51.100.2:443/tcp": ""})
}

// A Service deleted is gone from the node's services within a second; so is one whose
// address is taken back (status emptied).
func TestServiceDeleted(t *testing.T) {
	e := newEnv(t)
	n1 := e.node("n1", "10.3.0.1", true, nil)
	e.service("a", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80), tcp("alt", 8080)}, "198.51.100.3")
	e.service("b", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.4")
	e.slice("a", "a-a", ep("10.244.1.1", n1, true))
	e.want("both Services", map[string]string{
		"a.80 198.51.100.3:80/tcp": "10.3.0.1×1", "a.8080 198.51.100.3:8080/tcp": "", "b.80 198.51.100.4:80/tcp": ""})

	if err := e.c.CS.CoreV1().Services(e.ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.want("a withdrawn, b kept", map[string]string{"b.80 198.51.100.4:80/tcp": ""})

	svc, err := e.c.CS.CoreV1().Services(e.ns).Get(context.Background(), "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = nil
	if _, err := e.c.CS.CoreV1().Services(e.ns).UpdateStatus(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.want("b without an address: withdrawn", map[string]string{})
}

// What manifold cannot serve is skipped and said, and the rest is served as if it
// were not there: an SCTP port, an address another Service has on the same port, an
// IPv6 address on a node without one, a Service of another class.
func TestBadObjectsAreSkipped(t *testing.T) {
	e := newEnv(t)
	n1 := e.node("n1", "10.4.0.1", true, nil)
	e.service("good", corev1.ServiceExternalTrafficPolicyLocal,
		[]corev1.ServicePort{tcp("http", 80), {Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP}}, "198.51.100.5")
	e.service("same", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.5")
	e.service("v6", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80)}, "2001:db8::5")
	other := "example.com/lb"
	e.c.Service(t, e.ns, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &other, Ports: []corev1.ServicePort{tcp("http", 80)}},
	}, "198.51.100.6")
	e.slice("good", "good-a", ep("10.244.1.1", n1, true))
	st := e.want("only good's TCP port", map[string]string{"good.80 198.51.100.5:80/tcp": "10.4.0.1×1"})
	var ours []string
	for _, why := range st.Skipped {
		if strings.Contains(why, e.ns) {
			ours = append(ours, why)
		}
	}
	slices.Sort(ours)
	want := []string{
		fmt.Sprintf("Service %s/good: port 9/SCTP: manifold serves TCP and UDP", e.ns),
		fmt.Sprintf("Service %s/same: 198.51.100.5 port 80/tcp is Service %s/good's already", e.ns, e.ns),
		fmt.Sprintf("service %s.v6.80: the node has no address of IPv6 (node.address6)", e.ns),
	}
	if !slices.Equal(ours, want) {
		t.Errorf("skipped:\n%s\nwant:\n%s", strings.Join(ours, "\n"), strings.Join(want, "\n"))
	}
}

// The node's ServiceAccount reads what the source needs and can change nothing.
func TestNodeAndBackendRBACIsLeast(t *testing.T) {
	c := apiServer(t)
	for _, user := range []string{kubetest.NodeUser, kubetest.BackendUser} {
		cs, err := kubernetes.NewForConfig(c.As(user))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		forbidden := map[string]error{}
		_, forbidden["update a Service's status"] = cs.CoreV1().Services("default").UpdateStatus(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.UpdateOptions{})
		_, forbidden["create an EndpointSlice"] = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "x"}, AddressType: discoveryv1.AddressTypeIPv4}, metav1.CreateOptions{})
		_, forbidden["list Pods"] = cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		_, forbidden["list Secrets"] = cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		_, forbidden["update a Node"] = cs.CoreV1().Nodes().Update(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.UpdateOptions{})
		_, forbidden["list Events"] = cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		for _, what := range slices.Sorted(maps.Keys(forbidden)) {
			if err := forbidden[what]; !apierrors.IsForbidden(err) {
				t.Errorf("%s: %s: %v, want Forbidden", user, what, err)
			}
		}
	}
}

// The API server stopped: the node keeps every service (a lost watch withdraws
// nothing); back, the source follows the cluster again.
func TestAPIServerStoppedKeepsServices(t *testing.T) {
	e := newEnv(t)
	n1 := e.node("n1", "10.5.0.1", true, nil)
	e.service("kept", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.7")
	e.slice("kept", "kept-a", ep("10.244.1.1", n1, true))
	want := map[string]string{"kept.80 198.51.100.7:80/tcp": "10.5.0.1×1"}
	e.want("the Service", want)
	e.wait("the API server reachable", func(st State) bool { return st.Reachable })
	updates := e.sink.count()

	e.c.StopAPIServer()
	// the probe runs every second and waits a second for its answer
	st := e.waitWithin(3*probeEvery, "the API server seen unreachable", func(st State) bool { return !st.Reachable })
	if got := e.backends(st); !maps.Equal(got, want) {
		t.Errorf("with the API server away the node has %v, want %v", got, want)
	}
	if n := e.sink.count(); n != updates {
		t.Errorf("%d updates submitted while the API server was away, want none", n-updates)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitWithin(3*probeEvery, "the API server seen reachable again", func(st State) bool { return st.Reachable })
	if n := e.sink.count(); n != updates {
		t.Errorf("%d updates submitted after the API server came back with nothing changed, want none", n-updates)
	}
	// the informers' watches come back with their own backoff (up to 30 s after a
	// loss): the bound here is theirs, not the issue's
	e.slice("kept", "kept-a", ep("10.244.1.1", n1, true), ep("10.244.1.2", n1, true))
	e.waitWithin(45*time.Second, "the change after the outage", func(st State) bool {
		return maps.Equal(e.backends(st), map[string]string{"kept.80 198.51.100.7:80/tcp": "10.5.0.1×2"})
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// The DaemonSets, as the API server holds them after the server-side apply, run on the
// host network under their own ServiceAccount with the capabilities their programs
// need and no other: never privileged, no escalation.
func TestDaemonSetsLeastPrivilege(t *testing.T) {
	c := apiServer(t)
	for name, want := range map[string]struct {
		account string
		caps    []corev1.Capability
	}{
		"manifold-node":    {"manifold-node", []corev1.Capability{"BPF", "PERFMON", "NET_ADMIN", "NET_BIND_SERVICE"}},
		"manifold-backend": {"manifold-backend", []corev1.Capability{"BPF", "PERFMON", "NET_ADMIN"}},
	} {
		ds, err := c.CS.AppsV1().DaemonSets("manifold-system").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := ds.Spec.Template.Spec
		if !spec.HostNetwork || spec.ServiceAccountName != want.account || len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
			t.Errorf("%s: hostNetwork %v, ServiceAccount %q, %d containers and %d init containers; want the host network, %s, one container",
				name, spec.HostNetwork, spec.ServiceAccountName, len(spec.Containers), len(spec.InitContainers), want.account)
			continue
		}
		sc := spec.Containers[0].SecurityContext
		if sc == nil || sc.Capabilities == nil {
			t.Errorf("%s: no capabilities set", name)
			continue
		}
		if sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, want.caps) {
			t.Errorf("%s: privileged %v, escalation %v, drop %v, add %v; want none, none, ALL, %v", name,
				sc.Privileged, sc.AllowPrivilegeEscalation, sc.Capabilities.Drop, sc.Capabilities.Add, want.caps)
		}
	}
}

// named is what updates carry of the namespace ns's services, each name once and
// sorted: "a.80 -b.80" (b.80 gone); and whether each was a Delta.
func named(ns string, updates []reconcile.Update) (string, bool) {
	set := map[string]bool{}
	delta := true
	for _, u := range updates {
		delta = delta && u.Delta
		for _, s := range u.Services {
			if strings.HasPrefix(s.Name, ns+".") {
				set[strings.TrimPrefix(s.Name, ns+".")] = true
			}
		}
		for _, g := range u.Gone {
			if strings.HasPrefix(g, ns+".") {
				set["-"+strings.TrimPrefix(g, ns+".")] = true
			}
		}
	}
	names := slices.Sorted(maps.Keys(set))
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(strings.TrimPrefix(a, "-"), strings.TrimPrefix(b, "-")) })
	return strings.Join(names, " "), delta
}

// setReady makes the Node name Ready or not.
func (e *env) setReady(name string, ready bool) {
	e.t.Helper()
	nodes := e.c.CS.CoreV1().Nodes()
	n, err := nodes.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	if _, err := nodes.UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// editService changes the Service name's spec.
func (e *env) editService(name string, edit func(*corev1.ServiceSpec)) {
	e.t.Helper()
	svcs := e.c.CS.CoreV1().Services(e.ns)
	svc, err := svcs.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	edit(&svc.Spec)
	if _, err := svcs.Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// A change of one Service or of its EndpointSlices sends that Service's services
// alone (Update.Delta); a Node no longer ready sends the services whose backends it
// was; a Service no longer a LoadBalancer is gone, a port changed is one name gone
// and one added. After the node refused an update, the next carries every service,
// and the one after is a Delta again.
func TestUpdatesNameWhatChanged(t *testing.T) {
	e := newEnv(t)
	local, cluster := corev1.ServiceExternalTrafficPolicyLocal, corev1.ServiceExternalTrafficPolicyCluster
	n1, n2 := e.node("n1", "10.5.0.1", true, nil), e.node("n2", "10.5.0.2", true, nil)
	e.service("a", local, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.7")
	e.service("b", local, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.8")
	e.service("c", cluster, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.9")
	e.slice("a", "a-a", ep("10.244.1.1", n1, true))
	e.slice("b", "b-a", ep("10.244.1.2", n1, true))
	e.slice("c", "c-a", ep("10.244.1.3", n1, true))
	want := map[string]string{
		"a.80 198.51.100.7:80/tcp": "10.5.0.1×1", "b.80 198.51.100.8:80/tcp": "10.5.0.1×1", "c.80 198.51.100.9:80/tcp": "10.5.0.1×1 10.5.0.2×1"}
	e.want("three Services", want)

	step := func(what, names string, delta bool, do func()) {
		t.Helper()
		from := e.sink.count()
		do()
		e.want(what, want)
		if got, isDelta := named(e.ns, e.sink.since(from)); got != names || isDelta != delta {
			t.Errorf("%s: the updates carry %q (delta %v), want %q (delta %v)", what, got, isDelta, names, delta)
		}
	}
	step("an endpoint of a on n2", "a.80", true, func() {
		want["a.80 198.51.100.7:80/tcp"] = "10.5.0.1×1 10.5.0.2×1"
		e.slice("a", "a-a", ep("10.244.1.1", n1, true), ep("10.244.2.1", n2, true))
	})
	step("n2 not ready", "a.80 c.80", true, func() {
		want["a.80 198.51.100.7:80/tcp"], want["c.80 198.51.100.9:80/tcp"] = "10.5.0.1×1", "10.5.0.1×1"
		e.setReady(n2, false)
	})
	step("c no longer a LoadBalancer", "-c.80", true, func() {
		delete(want, "c.80 198.51.100.9:80/tcp")
		e.editService("c", func(s *corev1.ServiceSpec) {
			s.Type, s.LoadBalancerClass, s.ExternalTrafficPolicy, s.AllocateLoadBalancerNodePorts = corev1.ServiceTypeClusterIP, nil, "", nil
			for i := range s.Ports {
				s.Ports[i].NodePort = 0
			}
		})
	})
	step("a's port 80 now 81", "-a.80 a.81", true, func() {
		delete(want, "a.80 198.51.100.7:80/tcp")
		want["a.81 198.51.100.7:81/tcp"] = "10.5.0.1×1"
		e.editService("a", func(s *corev1.ServiceSpec) { s.Ports[0].Port = 81 })
	})
	e.sink.mu.Lock()
	e.sink.refuse = 1
	e.sink.mu.Unlock()
	// the refused update names b alone; the next (b's next change, or a second event of
	// the first) carries every service
	from := e.sink.count()
	want["b.80 198.51.100.8:80/tcp"] = "10.5.0.1×2"
	e.slice("b", "b-a", ep("10.244.1.2", n1, true), ep("10.244.1.4", n1, true))
	e.wait("the update refused", func(st State) bool { return st.Refused == 1 })
	want["b.80 198.51.100.8:80/tcp"] = "10.5.0.1×3"
	e.slice("b", "b-a", ep("10.244.1.2", n1, true), ep("10.244.1.4", n1, true), ep("10.244.1.5", n1, true))
	e.want("b's third endpoint, after a refusal", want)
	got := e.sink.since(from)
	if names, delta := named(e.ns, got[:1]); names != "b.80" || !delta {
		t.Errorf("the refused update carries %q (delta %v), want b.80 (delta)", names, delta)
	}
	if names, delta := named(e.ns, got[1:2]); names != "a.81 b.80" || delta {
		t.Errorf("the update after a refusal carries %q (delta %v), want a.81 b.80 (every service)", names, delta)
	}
	step("n2 ready again", "a.81", true, func() {
		want["a.81 198.51.100.7:81/tcp"] = "10.5.0.1×1 10.5.0.2×1"
		e.setReady(n2, true)
	})
}

// Changes names the Service that an event touches: the Service itself or one of its
// EndpointSlices; a Node's readiness may touch any.
func TestChangesNameTheService(t *testing.T) {
	c := apiServer(t)
	e := &env{t: t, c: c, ns: c.Namespace(t, "changes")}
	cl, err := NewCluster(c.As(kubetest.NodeUser))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); cl.Stop() }()
	n1 := e.node("n1", "10.6.0.1", true, nil)
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, all := cl.Changes(); !all {
		t.Fatal("the first Changes is not of every Service")
	}
	// until (the informers' events come in order per kind, not across kinds)
	until := func(what string, done func(keys []string, all bool) bool) {
		t.Helper()
		deadline := time.After(applyWithin)
		for {
			select {
			case <-cl.Changed():
			case <-deadline:
				t.Fatalf("not within %v: %s", applyWithin, what)
			}
			if done(cl.Changes()) {
				return
			}
		}
	}
	// each wait ends at the event waited for; a's status, written after a, may come
	// after it: a Service's and a slice's changes name a or b, nothing else, never all
	only := func(what, key string) func([]string, bool) bool {
		return func(keys []string, all bool) bool {
			if all || slices.ContainsFunc(keys, func(k string) bool { return k != e.ns+"/a" && k != e.ns+"/b" }) {
				t.Fatalf("%s: keys %q, all %v", what, keys, all)
			}
			return slices.Contains(keys, key)
		}
	}
	e.service("a", corev1.ServiceExternalTrafficPolicyLocal, []corev1.ServicePort{tcp("http", 80)}, "198.51.100.10")
	until("Service a", only("Service a", e.ns+"/a"))
	e.slice("b", "b-a", ep("10.244.1.1", n1, true))
	until("a slice of b", only("a slice of b", e.ns+"/b"))
	e.setReady(n1, false)
	until("n1 not ready", func(_ []string, all bool) bool { return all })
}
