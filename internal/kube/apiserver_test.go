package kube

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/manifoldlb/manifold/internal/kube/kubetest"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The real API server on a real etcd (internal/kube/kubetest), shared by the
// package's tests and stopped by TestMain.

var (
	clusterOnce sync.Once
	cluster     *testCluster
	clusterErr  error
)

type testCluster struct{ *kubetest.Cluster }

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Stop(code != 0)
	}
	os.Exit(code)
}

// apiServer is the shared cluster, started on first use.
func apiServer(t *testing.T) *testCluster {
	t.Helper()
	bin, missing := kubetest.Binary("../..")
	if missing != "" {
		testenv.Missing(t, missing)
	}
	clusterOnce.Do(func() {
		c, err := kubetest.Start(kubetest.Options{Bin: bin, DeployDir: "../../deploy/kubernetes"})
		if err == nil {
			// the controller reads its kubeconfig as the command does
			_, err = RESTConfig(c.Kubeconfig())
		}
		cluster, clusterErr = &testCluster{c}, err
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

// controllerConfig is the admin's config impersonating the controller's ServiceAccount.
func (c *testCluster) controllerConfig() *rest.Config { return c.As(kubetest.ControllerUser) }

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
