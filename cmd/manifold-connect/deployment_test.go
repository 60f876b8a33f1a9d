package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/kube/kubetest"
	"github.com/manifoldlb/manifold/internal/testenv"
	"github.com/manifoldlb/manifold/internal/testpki"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

const deploymentExample = "../../deploy/examples/kubernetes/connector-deployment.yaml"

// The Kubernetes example of the connector holds together: its connector file (the
// ConfigMap's) is accepted by the connector's own parser once the Pod's volumes are
// where the Deployment mounts them (the token from the Secret, the CA from the
// ConfigMap, its placeholder replaced by a real CA), and the container runs the
// connector with that file.
func TestConnectorDeploymentExample(t *testing.T) {
	data, err := os.ReadFile(deploymentExample)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Kind       string
		Metadata   struct{ Name string }
		Data       map[string]string
		StringData map[string]string `yaml:"stringData"`
		Spec       struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args         []string
						VolumeMounts []struct {
							Name      string
							MountPath string `yaml:"mountPath"`
						} `yaml:"volumeMounts"`
					}
					Volumes []struct {
						Name      string
						ConfigMap *struct{ Name string } `yaml:"configMap"`
						Secret    *struct {
							SecretName string `yaml:"secretName"`
						}
					}
				}
			}
		}
	}
	files := map[string]map[string]string{} // "ConfigMap/NAME" or "Secret/NAME": its files
	var deployment *object
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", deploymentExample, err)
		}
		switch o.Kind {
		case "ConfigMap":
			files["ConfigMap/"+o.Metadata.Name] = o.Data
		case "Secret":
			files["Secret/"+o.Metadata.Name] = o.StringData
		case "Deployment":
			deployment = &o
		}
	}
	if deployment == nil || len(deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: no Deployment of one container", deploymentExample)
	}
	pod := deployment.Spec.Template.Spec
	// the Pod's file system: every mount of the container, under a directory of the test's
	root := t.TempDir()
	caPEM, err := os.ReadFile(testpki.New(t, "edges").File)
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, m := range pod.Containers[0].VolumeMounts {
		var src map[string]string
		for _, v := range pod.Volumes {
			switch {
			case v.Name != m.Name:
			case v.ConfigMap != nil:
				src = files["ConfigMap/"+v.ConfigMap.Name]
			case v.Secret != nil:
				src = files["Secret/"+v.Secret.SecretName]
			}
		}
		if src == nil {
			t.Fatalf("the mount %s names no ConfigMap or Secret of the example", m.Name)
		}
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range src {
			if strings.Contains(content, "BEGIN CERTIFICATE") {
				if b, _ := pem.Decode([]byte(content)); b != nil {
					t.Errorf("%s holds a certificate: the example's is a placeholder a user replaces", name)
				}
				content = string(caPEM)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mounts = append(mounts, m.MountPath)
	}
	args := pod.Containers[0].Args
	if len(args) != 2 || args[0] != "--config" {
		t.Fatalf("the container's args are %q, want [--config FILE]", args)
	}
	conf, err := os.ReadFile(filepath.Join(root, args[1]))
	if err != nil {
		t.Fatalf("the connector file the container is given: %v", err)
	}
	// the paths the file names, where the test put the Pod's volumes
	for _, p := range mounts {
		conf = bytes.ReplaceAll(conf, []byte(" "+p+"/"), []byte(" "+filepath.Join(root, p)+"/"))
	}
	c, err := tunnel.ParseConnectorConfig(args[1], conf, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("the example's connector file: %v", err)
	}
	if len(c.Services) == 0 || !strings.Contains(c.Services[0].To, ".svc.cluster.local:") {
		t.Errorf("the example's connector publishes %+v, want a Service of the cluster", c.Services)
	}
}

// The example is Kubernetes objects a real API server accepts as written: the
// machine's kubectl, apply --server-side --dry-run=server, against the real
// kube-apiserver (internal/kube/kubetest).
func TestConnectorDeploymentApplies(t *testing.T) {
	bin, missing := kubetest.Binary("../..")
	if missing != "" {
		testenv.Missing(t, missing)
	}
	if err := hostprog.Check(hostprog.Kubectl); err != nil {
		testenv.Missing(t, err)
	}
	c, err := kubetest.Start(kubetest.Options{Bin: bin, DeployDir: "../../deploy/kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Stop(t.Failed()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := hostprog.CommandContext(ctx, hostprog.Kubectl, "--kubeconfig", c.Kubeconfig(), "--namespace", "default",
		"apply", "--server-side", "--dry-run=server", "-f", deploymentExample).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --server-side --dry-run=server -f %s: %v\n%s", deploymentExample, err, out)
	}
	for _, want := range []string{"secret/manifold-connect-token", "configmap/manifold-connect", "deployment.apps/manifold-connect"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl did not apply %s:\n%s", want, out)
		}
	}
}
