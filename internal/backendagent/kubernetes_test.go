package backendagent

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kube"
	"github.com/manifoldlb/manifold/internal/kube/kubetest"
	"github.com/manifoldlb/manifold/internal/kubesource"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The agent learns its Node's VIPs from the real API server (internal/kube/kubetest),
// as the backend's ServiceAccount; the decapsulation map is a recorder here (the data
// path's own tests load the real one).

// learnWithin is the bound from an API change to the change applied.
const learnWithin = time.Second

var cluster *kubetest.Cluster

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Stop(code != 0)
	}
	os.Exit(code)
}

// decapMap records the VIPs added, and signals each addition.
type decapMap struct {
	mu    sync.Mutex
	vips  []netip.Addr
	added chan struct{}
}

func (d *decapMap) AddVIP(vip netip.Addr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vips = append(d.vips, vip)
	close(d.added)
	d.added = make(chan struct{})
	return nil
}

func (d *decapMap) RemoveVIP(vip netip.Addr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vips = slices.DeleteFunc(d.vips, func(v netip.Addr) bool { return v == vip })
	close(d.added)
	d.added = make(chan struct{})
	return nil
}

func (d *decapMap) get() ([]netip.Addr, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.vips), d.added
}

func (d *decapMap) waitFor(t *testing.T, what string, want ...string) {
	t.Helper()
	deadline := time.After(learnWithin)
	for {
		got, added := d.get()
		if strs(got) == strings.Join(want, " ") {
			return
		}
		select {
		case <-added:
		case <-deadline:
			t.Fatalf("%s: decapsulating %v after %v, want %v", what, got, learnWithin, want)
		}
	}
}

func strs(a []netip.Addr) string {
	var s []string
	for _, x := range a {
		s = append(s, x.String())
	}
	return strings.Join(s, " ")
}

// A Node decapsulates the VIP of a Local Service once it holds a ready endpoint of
// it, and that of a Cluster Service while the Service has one anywhere; never the VIP
// of a Service it serves nothing of.
func TestLearnsTheVIPsOfItsNode(t *testing.T) {
	bin, missing := kubetest.Binary("../..")
	if missing != "" {
		testenv.Missing(t, missing)
	}
	var err error
	if cluster, err = kubetest.Start(kubetest.Options{Bin: bin, DeployDir: "../../deploy/kubernetes"}); err != nil {
		t.Fatal(err)
	}
	c := cluster
	ns := c.Namespace(t, "backend")
	c.Pool(t, ns, map[string]any{"cidrs": []any{"198.51.100.16/28"}, "namespaces": []any{ns}})
	me, other := ns+"-w1", ns+"-w2"
	c.Node(t, me, "10.9.0.1", true, nil)
	c.Node(t, other, "10.9.0.2", true, nil)
	class := kube.Class
	lb := func(name string, policy corev1.ServiceExternalTrafficPolicy) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, ExternalTrafficPolicy: policy,
			Ports: []corev1.ServicePort{{Name: kubetest.PortName, Port: 80}}}}
	}
	c.Service(t, ns, lb("local", corev1.ServiceExternalTrafficPolicyLocal), "198.51.100.20")
	c.Slice(t, ns, "local", "local-a", kubetest.Endpoint{Addr: "10.244.2.1", Node: other, Ready: true})

	cl, err := kubesource.NewCluster(c.As(kubetest.BackendUser))
	if err != nil {
		t.Fatal(err)
	}
	decap := &decapMap{added: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- followCluster(ctx, cl, config.Kubernetes{NodeName: me}, []netip.Addr{netip.MustParseAddr("198.51.100.20")}, decap, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("followCluster: %v", err)
		}
	}()

	c.Service(t, ns, lb("cluster", corev1.ServiceExternalTrafficPolicyCluster), "198.51.100.21")
	c.Slice(t, ns, "cluster", "cluster-a", kubetest.Endpoint{Addr: "10.244.2.2", Node: other, Ready: true})
	decap.waitFor(t, "a Cluster Service with an endpoint elsewhere", "198.51.100.21")

	c.Slice(t, ns, "local", "local-a", kubetest.Endpoint{Addr: "10.244.2.1", Node: other, Ready: true},
		kubetest.Endpoint{Addr: "10.244.1.1", Node: me, Ready: true})
	decap.waitFor(t, "a Local Service with an endpoint here", "198.51.100.21", "198.51.100.20")

	// the Local Service's endpoint here goes, but its VIP is also the file's (static):
	// it stays; then the Cluster Service loses its last endpoint: its VIP leaves
	c.Slice(t, ns, "local", "local-a", kubetest.Endpoint{Addr: "10.244.2.1", Node: other, Ready: true})
	c.Slice(t, ns, "cluster", "cluster-a")
	decap.waitFor(t, "a Cluster Service without endpoints, the file's VIP kept", "198.51.100.20")
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
