package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/kube"
	"github.com/manifoldlb/manifold/internal/kube/kubetest"
	"github.com/manifoldlb/manifold/internal/kubesource"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// KubeWriteMethod says how the Kubernetes figures are measured (issue 26).
const KubeWriteMethod = "One Service changed among N LoadBalancer Services of manifold's class on " +
	"the real kube-apiserver (bin/kube-apiserver on a real etcd, on loopback, on this machine): " +
	"its port moved between 80 and 81, so that the node has something to program (the Services are " +
	"made with allocateLoadBalancerNodePorts: false, as 10 000 LoadBalancer Services must be: the " +
	"default node port range holds 2 768). Wall time from the Update request to the node's " +
	"controller having applied the update (reconcile.Controller.Submit returned) to a real, freshly " +
	"loaded data plane (BPF maps of the XDP program, attached to no interface), through the node's " +
	"own source (kubesource.Source, informers as the node's ServiceAccount); and the CPU time of " +
	"this process (client, informers, source, controller; not the API server's) over the same span. " +
	"\"delta\": the source replans the one Service and names its services (this code); \"every " +
	"service\": the controller is handed every service instead, as the source did before; " +
	"\"replan of every Service\": the time of the whole Plan the source made on every change " +
	"before, measured on the same caches (the rest of the before-cost). The Services are created " +
	"eight at a time before the measurement; one Node, no endpoints."

// KubeWriteCounts are the numbers of Services in the cluster.
var KubeWriteCounts = []int{1000, 10000}

// KubeWrite measures runs changes of one Service among each count of Services; root is
// the repository (bin/kube-apiserver, deploy/kubernetes).
func KubeWrite(w io.Writer, runs int, counts []int, root string) (Part, error) {
	part := Part{Name: "kubewrite", Method: KubeWriteMethod}
	bin, missing := kubetest.Binary(root)
	if missing != "" {
		return part, fmt.Errorf("%s", missing)
	}
	c, err := kubetest.Start(kubetest.Options{Bin: bin, DeployDir: filepath.Join(root, "deploy/kubernetes")})
	if err != nil {
		return part, err
	}
	defer c.Stop(false)
	made := 0
	for _, n := range counts {
		if err := createServices(c, made, n); err != nil {
			return part, err
		}
		made = n
		for _, whole := range []bool{false, true} {
			m, err := kubeWrites(c, n, runs, whole)
			if err != nil {
				return part, err
			}
			mode := "delta"
			if whole {
				mode = "every service"
			}
			name := fmt.Sprintf("Kubernetes: one Service changed among %d (%s)", n, mode)
			fig := NewFigure("control_plane", name+", programmed on the node", "ms", m.wall)
			if n == 10000 && !whole {
				fig.SetBound("<=", 50)
			}
			part.Figures = append(part.Figures, fig, NewFigure("control_plane", name+", CPU time", "ms", m.cpu))
			if whole {
				part.Figures = append(part.Figures, NewFigure("control_plane", fmt.Sprintf("Kubernetes: replan of every Service among %d (before)", n), "ms", m.submit))
			}
		}
	}
	WriteFigureTable(w, part.Figures)
	return part, nil
}

const benchNamespace = "bench"

// createServices brings the cluster from have to n Services (and, the first time, the
// namespace, the pool and the Node), eight requests at a time.
func createServices(c *kubetest.Cluster, have, n int) error {
	ctx := context.Background()
	if have == 0 {
		if _, err := c.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		pool := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "manifold.io/v1alpha1", "kind": "IPPool",
			"metadata": map[string]any{"name": "bench"}, "spec": map[string]any{"cidrs": []any{"100.64.0.0/10"}, "namespaces": []any{benchNamespace}}}}
		if _, err := c.Dyn.Resource(kube.PoolResource).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
			return err
		}
		node, err := c.CS.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bench-node"}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := c.CS.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { // createServices's: it waits for them
			defer wg.Done()
			for i := range work {
				if err := createService(ctx, c, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
	for i := have; i < n && err == nil; i++ {
		select {
		case work <- i:
		case err = <-errs:
		}
	}
	close(work)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	return err
}

func createService(ctx context.Context, c *kubetest.Cluster, i int) error {
	class := kube.Class
	services := c.CS.CoreV1().Services(benchNamespace)
	svc, err := services.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc%06d", i)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			AllocateLoadBalancerNodePorts: new(false)},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr4(100<<24|64<<16, i).String()}}
	_, err = services.UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	return err
}

// signalSink is controllerSink that says when an update naming a service was applied.
type signalSink struct {
	controllerSink
	mu      sync.Mutex
	waiting string
	applied chan struct{}
}

func (s *signalSink) Submit(ctx context.Context, u reconcile.Update) error {
	named := slices.ContainsFunc(u.Services, func(svc config.Service) bool { return svc.Name == s.wanted() })
	err := s.controllerSink.Submit(ctx, u)
	if named && err == nil {
		s.applied <- struct{}{}
	}
	return err
}

func (s *signalSink) wanted() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

func (s *signalSink) want(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = name
}

// kubeWrites runs the node's source and controller on a fresh data plane, waits until
// it serves the n Services, then times runs changes of one of them.
func kubeWrites(c *kubetest.Cluster, n, runs int, whole bool) (apiWriteTimes, error) {
	var m apiWriteTimes
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: netip.MustParseAddr("10.0.0.1"),
		MaxServices: max(uint32(n+1), datapath.MaxServices), MaxBackends: max(uint32(4*n+2), datapath.MaxBackends)})
	if err != nil {
		return m, fmt.Errorf("load data plane (needs root): %w", err)
	}
	defer lb.Close()
	ctl := reconcile.NewController(reconcile.Options{Dataplane: lb, Health: allUp{}, Neighbours: noNeighbours{}, Log: slog.New(slog.DiscardHandler)})
	ctl.Attached()
	sk := &signalSink{controllerSink: controllerSink{c: ctl, whole: whole}, applied: make(chan struct{}, 1)}
	cluster, err := kubesource.NewCluster(c.As(kubetest.NodeUser))
	if err != nil {
		return m, err
	}
	src := kubesource.NewSource(cluster, config.Kubernetes{}, config.Node{Address: netip.MustParseAddr("10.0.0.1")}, sk, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }() // kubeWrites's: ended and waited for below
	defer func() { cancel(); <-done }()
	deadline := time.After(10 * time.Minute)
	for {
		st, changed := src.State()
		if len(st.Services) >= n {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			return m, fmt.Errorf("the source serves %d services of %d after 10 minutes", len(st.Services), n)
		}
	}
	services := c.CS.CoreV1().Services(benchNamespace)
	for i := range runs {
		name := fmt.Sprintf("svc%06d", (i*7919)%n)
		svc, err := services.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return m, err
		}
		port := 161 - svc.Spec.Ports[0].Port // 80 ⇄ 81
		svc.Spec.Ports[0].Port = port
		sk.want(fmt.Sprintf("%s.%s.%d", benchNamespace, name, port))
		cpu, err := processCPU()
		if err != nil {
			return m, err
		}
		start := time.Now()
		if _, err := services.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			return m, err
		}
		select {
		case <-sk.applied:
		case <-time.After(time.Minute):
			return m, fmt.Errorf("service %s not programmed within a minute", name)
		}
		wall := time.Since(start)
		after, err := processCPU()
		if err != nil {
			return m, err
		}
		m.wall, m.cpu = append(m.wall, ms(wall)), append(m.cpu, ms(after-cpu))
		if whole {
			start = time.Now()
			cluster.Plan(false)
			m.submit = append(m.submit, ms(time.Since(start)))
		}
	}
	return m, nil
}
