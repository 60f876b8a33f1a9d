// Package kubetest runs a real kube-apiserver (built by `make kube-apiserver`) on a
// real etcd, both on loopback, with the manifests of deploy/kubernetes applied
// server-side as a user would apply them: the cluster the tests of internal/kube,
// internal/kubesource and the lab talk to. There is no kubelet, scheduler or
// controller-manager: tests write Nodes and EndpointSlices themselves.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The ServiceAccounts of deploy/kubernetes: a part under test runs as its own, so
// that its RBAC is proven enough.
const (
	ControllerUser = "system:serviceaccount:manifold-system:manifold-controller"
	NodeUser       = "system:serviceaccount:manifold-system:manifold-node"
	BackendUser    = "system:serviceaccount:manifold-system:manifold-backend"
)

// Cluster is a running API server and its etcd.
type Cluster struct {
	Admin *rest.Config // system:masters, not throttled
	CS    kubernetes.Interface
	Dyn   dynamic.Interface
	// Addr is the API server's host:port.
	Addr  string
	dir   string
	netns string // "" : the test's own
	procs []*proc
	api   *proc
}

type proc struct {
	name   string
	prog   hostprog.Program
	args   []string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	killed bool // by the test: its exit is no failure
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

// Binary is the API server the tests run, from the repository's root, and why it
// cannot run here when it cannot ("" when it can): the caller skips with the reason.
func Binary(root string) (bin, missing string) {
	bin, err := filepath.Abs(filepath.Join(root, "bin/kube-apiserver"))
	if err != nil {
		return "", err.Error()
	}
	if _, err := os.Stat(bin); err != nil {
		return "", "needs the real API server at bin/kube-apiserver: run `make kube-apiserver` (make test builds it)"
	}
	if err := hostprog.Check(hostprog.Etcd); err != nil {
		return "", fmt.Sprintf("needs etcd: %v", err)
	}
	return bin, ""
}

// Options say where a Cluster runs.
type Options struct {
	Bin       string // the API server (Binary)
	DeployDir string // deploy/kubernetes
	// Netns, when set, is the network namespace (a name under /run/netns) the API
	// server and etcd run in, the API server on Host:Port and etcd on that
	// namespace's loopback; Dial then makes the tests' connections there. Without it
	// both run on free loopback ports of the test's own namespace.
	Netns string
	Host  string
	Port  int
	Dial  func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Start starts etcd and the API server and applies the manifests of o.DeployDir.
func Start(o Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "kube-test-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, netns: o.Netns}
	ok := false
	defer func() {
		if !ok {
			c.Stop(true)
		}
	}()
	etcdClient, etcdPeer := "http://127.0.0.1:2379", "http://127.0.0.1:2380"
	if o.Netns == "" {
		etcdClient, etcdPeer = "http://"+freePort("127.0.0.1"), "http://"+freePort("127.0.0.1")
		o.Host = "127.0.0.1"
	}
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
	c.Addr = net.JoinHostPort(o.Host, fmt.Sprint(o.Port))
	if o.Netns == "" {
		c.Addr = freePort(o.Host)
	}
	_, port, _ := net.SplitHostPort(c.Addr)
	c.api = c.start("kube-apiserver", hostprog.Built(o.Bin),
		"--etcd-servers", etcdClient,
		"--bind-address", o.Host, "--secure-port", port,
		// The API server publishes no endpoints of its own: loopback cannot be one.
		"--endpoint-reconciler-type", "none",
		"--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-key-file", keyFile, "--service-account-signing-key-file", keyFile,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--token-auth-file", tokenFile, "--authorization-mode", "RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16,fd00:96::/112")
	if err := os.WriteFile(c.Kubeconfig(), fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: admin-token}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, c.Addr), 0o600); err != nil {
		return nil, err
	}
	if c.Admin, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig()); err != nil {
		return nil, err
	}
	// The tests' own calls are not throttled (client-go allows 5 a second by default):
	// a wait must not expire in the client.
	c.Admin.QPS = -1
	c.Admin.Dial = o.Dial
	if c.CS, err = kubernetes.NewForConfig(c.Admin); err != nil {
		return nil, err
	}
	if c.Dyn, err = dynamic.NewForConfig(c.Admin); err != nil {
		return nil, err
	}
	// Each phase has its own bound. Under `make test` the API server starts while
	// other packages compile with -race on the same two cores, and its start once
	// took most of a shared minute, leaving the CRD a second to be Established (CI,
	// 2026-11-26). The bounds only end a wait that would never succeed.
	started := time.Now()
	readyCtx, cancelReady := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelReady()
	if err := c.WaitReady(readyCtx); err != nil {
		return nil, err
	}
	ready := time.Since(started)
	applyCtx, cancelApply := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelApply()
	if err := c.applyManifests(applyCtx, o.DeployDir); err != nil {
		return nil, fmt.Errorf("apply deploy/kubernetes (the API server was ready after %s): %w", ready.Round(time.Millisecond), err)
	}
	ok = true
	return c, nil
}

// Kubeconfig is the admin's kubeconfig file, as `--kubeconfig` and config files read
// one.
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.dir, "admin.kubeconfig") }

// WaitReady waits until the API server says it is ready.
func (c *Cluster) WaitReady(ctx context.Context) error {
	// Readiness is a state of another process, not an event a test can wait on.
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range c.procs {
			if p.killed {
				continue
			}
			select {
			case <-p.exited:
				return false, fmt.Errorf("%s exited", p.name)
			default:
			}
		}
		body, err := c.CS.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("the API server did not become ready: %w\n%s", err, c.Logs())
	}
	return nil
}

// StopAPIServer kills the API server (etcd keeps the cluster's state).
func (c *Cluster) StopAPIServer() {
	kill(c.api)
}

// StartAPIServer starts the API server again, on the same address and etcd, and
// waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.api = c.start(c.api.name, c.api.prog, c.api.args...)
	return c.WaitReady(ctx)
}

// As is the admin's config impersonating user (one of the ServiceAccounts above):
// what the part runs with in a cluster, with client-go's default throttling.
func (c *Cluster) As(user string) *rest.Config {
	cfg := rest.CopyConfig(c.Admin)
	cfg.QPS = 0
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// KubeconfigAs writes a kubeconfig impersonating user, for a daemon the test runs
// as a process, and returns its path.
func (c *Cluster) KubeconfigAs(name, user string) (string, error) {
	path := filepath.Join(c.dir, name+".kubeconfig")
	return path, os.WriteFile(path, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: admin-token, as: %q}}]
contexts: [{name: test, context: {cluster: test, user: u}}]
current-context: test
`, c.Addr, user), 0o600)
}

func (c *Cluster) start(name string, prog hostprog.Program, args ...string) *proc {
	p := &proc{name: name, prog: prog, args: args, out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = hostprog.Command(prog, args...)
	if c.netns != "" {
		p.cmd = hostprog.InNetns(context.Background(), c.netns, prog, args...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	c.procs = append(c.procs, p)
	if err := p.cmd.Start(); err != nil {
		fmt.Fprintf(p.out, "start: %v", err)
		close(p.exited)
		return p
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

// Logs is the end of every process's output, for a failed test.
func (c *Cluster) Logs() string {
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

// Stop kills every process and removes the cluster's files; failed prints the logs.
func (c *Cluster) Stop(failed bool) {
	if c == nil {
		return // Start failed: it stopped what it had started
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		kill(c.procs[i])
	}
	if failed {
		fmt.Fprint(os.Stderr, c.Logs())
	}
	_ = os.RemoveAll(c.dir)
}

func kill(p *proc) {
	p.killed = true
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	<-p.exited
}

func freePort(host string) string {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// applyManifests applies every manifest server-side, the CRD established before
// anything uses it.
// kubectl runs the machine's kubectl as the admin, where the API server is.
func (c *Cluster) kubectl(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--kubeconfig", c.Kubeconfig()}, args...)
	cmd := hostprog.CommandContext(ctx, hostprog.Kubectl, args...)
	if c.netns != "" {
		cmd = hostprog.InNetns(ctx, c.netns, hostprog.Kubectl, args...)
	}
	return cmd.CombinedOutput()
}

func (c *Cluster) applyManifests(ctx context.Context, deployDir string) error {
	// As the README tells a user to: the machine's kubectl, the whole directory in one
	// go. kubectl applies the files in name order, so the Namespace and the CRD come
	// first by their names (00-, 01-); a file that needs an object of a later one fails
	// here as it would for a user.
	out, err := c.kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", deployDir)
	if err != nil {
		return fmt.Errorf("kubectl apply --server-side -f %s: %w\n%s", deployDir, err, out)
	}
	// The tests create IPPools at once: wait until the API serves the CRDs applied, as
	// a user's script would.
	for _, line := range strings.Split(string(out), "\n") {
		if crd, ok := strings.CutPrefix(line, "customresourcedefinition.apiextensions.k8s.io/"); ok {
			name := strings.Fields(crd)[0]
			if out, err := c.kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m", "crd/"+name); err != nil {
				return fmt.Errorf("kubectl wait for CRD %s: %w\n%s", name, err, out)
			}
		}
	}
	return nil
}
