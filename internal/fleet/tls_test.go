package fleet

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
	"github.com/manifoldlb/manifold/internal/testpki"
)

// A fleet on an etcd that takes only TLS clients with a certificate of its CA, as the
// docs/fleet.md's set-up has it: the node's client certificate is let in; a client without
// one, or one that trusts another CA, is not.
func TestDialTLSToARealEtcd(t *testing.T) {
	if _, err := hostprog.Etcd.Path(); err != nil {
		testenv.Missingf(t, "needs etcd: %v", err)
	}
	p := testpki.New(t, "fleet-ca")
	serverCert, serverKey := p.Issue(t, "etcd", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := p.Issue(t, "lb1", x509.ExtKeyUsageClientAuth)
	caFile := p.File

	clientURL, peerURL := "https://"+freePort(t), "http://"+freePort(t)
	m := &member{name: "tls", dir: filepath.Join(t.TempDir(), "data"), out: &syncBuffer{}, client: clientURL, peer: peerURL}
	m.args = []string{"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", m.name + "=" + peerURL, "--logger", "zap", "--log-level", "warn",
		"--cert-file", serverCert, "--key-file", serverKey, "--trusted-ca-file", caFile, "--client-cert-auth"}
	c := &cluster{t: t, members: []*member{m}}
	c.start(m)
	t.Cleanup(func() {
		c.kill(m)
		if t.Failed() {
			t.Logf("etcd:\n%s", m.out.String())
		}
	})

	good := config.Fleet{Endpoints: []string{clientURL}, CertFile: clientCert, KeyFile: clientKey, CAFile: caFile, Prefix: prefix}
	cli, err := Dial(good)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Put(ctx, prefix+"/probe", "x")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a client with the fleet's certificate cannot write: %v", err)
		}
	}

	other := testpki.New(t, "another-ca")
	for name, cfg := range map[string]config.Fleet{
		"no client certificate": {Endpoints: []string{clientURL}, CAFile: caFile},
		"another CA trusted":    {Endpoints: []string{clientURL}, CertFile: clientCert, KeyFile: clientKey, CAFile: other.File},
	} {
		bad, err := Dial(cfg)
		if err != nil {
			continue // refused at dial: as good
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = bad.Get(ctx, prefix+"/probe")
		cancel()
		bad.Close()
		if err == nil {
			t.Errorf("%s: the read succeeded", name)
		}
	}
}

// With etcd's authentication on, the node logs in with username and password_file; a
// wrong password is refused.
func TestDialPasswordToARealEtcd(t *testing.T) {
	c := startEtcd(t, 1)
	admin := c.client()
	ctx := context.Background()
	if _, err := admin.UserAdd(ctx, "root", "r00t-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("r00t-pw\n"), 0o600)
	os.WriteFile(bad, []byte("guess\n"), 0o600)

	cli, err := Dial(config.Fleet{Endpoints: c.endpoints(), Username: "root", PasswordFile: good})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Put(cctx, prefix+"/probe", "x"); err != nil {
		t.Fatalf("the right password: %v", err)
	}
	wrong, err := Dial(config.Fleet{Endpoints: c.endpoints(), Username: "root", PasswordFile: bad})
	if err == nil {
		defer wrong.Close()
		_, err = wrong.Get(cctx, prefix+"/probe")
	}
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("a wrong password: %v, want authentication failed", err)
	}
}
