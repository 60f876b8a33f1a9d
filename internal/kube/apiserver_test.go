package kube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	serializeryaml "k8s.io/apimachinery/pkg/runtime/serializer/yaml"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// A real kube-apiserver (built by `make kube-apiserver`) on a real etcd, both on
// loopback, shared by the package's tests and stopped by TestMain. The manifests of
// deploy/kubernetes are applied to it as a user would, server-side.

// controllerUser is the ServiceAccount of deploy/kubernetes/controller-rbac.yaml: the
// controller under test runs as it, so its RBAC is proven enough.
const controllerUser = "system:serviceaccount:manifold-system:manifold-controller"

type testCluster struct {
	admin *rest.Config
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	dir   string
	procs []*proc
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	clusterOnce sync.Once
	cluster     *testCluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.stop(code != 0)
	}
	os.Exit(code)
}

// apiServer is the shared cluster, started on first use.
func apiServer(t *testing.T) *testCluster {
	t.Helper()
	bin, err := filepath.Abs("../../bin/kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skip("needs the real API server at bin/kube-apiserver: run `make kube-apiserver` (make test builds it)")
	}
	if err := hostprog.Check(hostprog.Etcd); err != nil {
		t.Skipf("needs etcd: %v", err)
	}
	clusterOnce.Do(func() { cluster, clusterErr = startCluster(bin) })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

func startCluster(bin string) (*testCluster, error) {
	dir, err := os.MkdirTemp("", "kube-test-")
	if err != nil {
		return nil, err
	}
	c := &testCluster{dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.stop(true)
		}
	}()
	etcdClient, etcdPeer := "http://"+freePort(), "http://"+freePort()
	c.start("etcd", hostprog.Etcd,
		"--name", "kube", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", etcdPeer, "--initial-advertise-peer-urls", etcdPeer,
		"--initial-cluster", "kube="+etcdPeer, "--log-level", "warn")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyFile, tokenFile := filepath.Join(dir, "sa.key"), filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tokenFile, []byte("admin-token,admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	addr := freePort()
	host, port, _ := net.SplitHostPort(addr)
	c.start("kube-apiserver", hostprog.Built(bin),
		"--etcd-servers", etcdClient,
		"--bind-address", host, "--secure-port", port,
		// The API server publishes no endpoints of its own: loopback cannot be one.
		"--endpoint-reconciler-type", "none",
		"--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-key-file", keyFile, "--service-account-signing-key-file", keyFile,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--token-auth-file", tokenFile, "--authorization-mode", "RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16,fd00:96::/112")
	// The admin's kubeconfig, read as `manifold kube-controller --kubeconfig` reads one.
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: admin-token}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, addr), 0o600); err != nil {
		return nil, err
	}
	if c.admin, err = RESTConfig(kubeconfig); err != nil {
		return nil, err
	}
	// The tests' own calls are not throttled (client-go allows 5 a second by default):
	// a wait must not expire in the client.
	c.admin.QPS = -1
	if c.cs, err = kubernetes.NewForConfig(c.admin); err != nil {
		return nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(c.admin); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Readiness is a state of another process, not an event this test can wait on.
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range c.procs {
			select {
			case <-p.exited:
				return false, fmt.Errorf("%s exited", p.name)
			default:
			}
		}
		body, err := c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		return nil, fmt.Errorf("the API server did not become ready: %w\n%s", err, c.logs())
	}
	if err := c.applyManifests(ctx); err != nil {
		return nil, fmt.Errorf("apply deploy/kubernetes: %w", err)
	}
	ok = true
	return c, nil
}

func (c *testCluster) start(name string, prog hostprog.Program, args ...string) {
	p := &proc{name: name, out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = hostprog.Command(prog, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	c.procs = append(c.procs, p)
	if err := p.cmd.Start(); err != nil {
		fmt.Fprintf(p.out, "start: %v", err)
		close(p.exited)
		return
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
}

func (c *testCluster) logs() string {
	var b strings.Builder
	for _, p := range c.procs {
		out := p.out.String()
		if len(out) > 8000 {
			out = "…" + out[len(out)-8000:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", p.name, out)
	}
	return b.String()
}

func (c *testCluster) stop(failed bool) {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
	}
	if failed {
		fmt.Fprint(os.Stderr, c.logs())
	}
	_ = os.RemoveAll(c.dir)
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// manifestOrder applies what others refer to first.
var manifestOrder = []string{"namespace.yaml", "crd-ippool.yaml", "controller-rbac.yaml", "controller.yaml"}

// applyManifests applies every manifest server-side, the CRD established before
// anything uses it.
func (c *testCluster) applyManifests(ctx context.Context) error {
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil {
		return err
	}
	if len(files) != len(manifestOrder) {
		return fmt.Errorf("deploy/kubernetes has %d manifests, the test knows %d: add the new one to manifestOrder", len(files), len(manifestOrder))
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.cs.Discovery()))
	decoder := serializeryaml.NewDecodingSerializer(unstructured.UnstructuredJSONScheme)
	for _, name := range manifestOrder {
		data, err := os.ReadFile(filepath.Join("../../deploy/kubernetes", name))
		if err != nil {
			return err
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj := &unstructured.Unstructured{}
			if _, _, err := decoder.Decode(doc, nil, obj); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", name, gvk, err)
			}
			_, err = c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "manifold-test", Force: true})
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", name, gvk.Kind, obj.GetName(), err)
			}
			if gvk.Kind == "CustomResourceDefinition" {
				if err := c.waitEstablished(ctx, obj.GetName()); err != nil {
					return err
				}
				mapper.Reset()
			}
		}
	}
	return nil
}

func (c *testCluster) waitEstablished(ctx context.Context, name string) error {
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	w, err := c.dyn.Resource(crds).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
	}
	return fmt.Errorf("CRD %s never established: %w", name, ctx.Err())
}

// controllerConfig is the admin's config impersonating the controller's ServiceAccount.
func (c *testCluster) controllerConfig() *rest.Config {
	cfg := rest.CopyConfig(c.admin)
	cfg.QPS = 0 // the controller's own default
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerUser}
	return cfg
}

// runController runs a controller as the ServiceAccount until the test ends or stop
// is called; stop waits until it has returned and fails the test on its error.
func (c *testCluster) runController(t *testing.T, identity string, defaultClass bool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Config: c.controllerConfig(), DefaultClass: defaultClass, Namespace: "manifold-system",
			Identity: identity, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller %s: %v", identity, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
