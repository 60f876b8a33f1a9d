package fleet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

// pki is a CA and certificates it signed, as PEM files.
type pki struct {
	dir      string
	ca       *x509.Certificate
	caKey    *ecdsa.PrivateKey
	certFile map[string]string // name → cert file; its key is name+".key"
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), ca: ca, caKey: key, certFile: map[string]string{}}
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for loopback with the given usage; it returns the cert
// and key files.
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+".key", "EC PRIVATE KEY", kder)
}

// startTLSEtcd starts one etcd member that serves its clients over TLS with a
// certificate of p, with extra flags; it returns the client URL.
func startTLSEtcd(t *testing.T, p *pki, extra ...string) string {
	t.Helper()
	if _, err := hostprog.Etcd.Path(); err != nil {
		t.Skipf("needs etcd: %v", err)
	}
	serverCert, serverKey := p.issue(t, "etcd", x509.ExtKeyUsageServerAuth)
	clientURL, peerURL := "https://"+freePort(t), "http://"+freePort(t)
	m := &member{name: "tls", dir: filepath.Join(t.TempDir(), "data"), out: &syncBuffer{}, client: clientURL, peer: peerURL}
	m.args = append([]string{"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", m.name + "=" + peerURL, "--logger", "zap", "--log-level", "warn",
		"--cert-file", serverCert, "--key-file", serverKey}, extra...)
	c := &cluster{t: t, members: []*member{m}}
	c.start(m)
	t.Cleanup(func() {
		c.kill(m)
		if t.Failed() {
			t.Logf("etcd:\n%s", m.out.String())
		}
	})
	return clientURL
}

// A fleet on an etcd that takes only TLS clients with a certificate of its CA, as the
// README's set-up has it: the node's client certificate is let in; a client without
// one, or one that trusts another CA, is not.
func TestDialTLSToARealEtcd(t *testing.T) {
	p := newPKI(t, "fleet-ca")
	caFile := filepath.Join(p.dir, "ca.pem")
	clientURL := startTLSEtcd(t, p, "--trusted-ca-file", caFile, "--client-cert-auth")
	clientCert, clientKey := p.issue(t, "lb1", x509.ExtKeyUsageClientAuth)

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

	other := newPKI(t, "another-ca")
	for name, cfg := range map[string]config.Fleet{
		"no client certificate": {Endpoints: []string{clientURL}, CAFile: caFile},
		"another CA trusted":    {Endpoints: []string{clientURL}, CertFile: clientCert, KeyFile: clientKey, CAFile: filepath.Join(other.dir, "ca.pem")},
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

// With etcd's authentication on, the node logs in with username and password_file
// over https://; a wrong password is refused, and so is any login over http://, which
// would send the password in clear (the dialer refuses it before connecting).
func TestDialPasswordToARealEtcd(t *testing.T) {
	p := newPKI(t, "fleet-ca")
	caFile := filepath.Join(p.dir, "ca.pem")
	endpoint := startTLSEtcd(t, p)
	admin, err := Dial(config.Fleet{Endpoints: []string{endpoint}, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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

	cli, err := Dial(config.Fleet{Endpoints: []string{endpoint}, CAFile: caFile, Username: "root", PasswordFile: good})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, prefix+"/probe", "x"); err != nil {
		t.Fatalf("the right password: %v", err)
	}
	wrong, err := Dial(config.Fleet{Endpoints: []string{endpoint}, CAFile: caFile, Username: "root", PasswordFile: bad})
	if err == nil {
		defer wrong.Close()
		_, err = wrong.Get(ctx, prefix+"/probe")
	}
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("a wrong password: %v, want authentication failed", err)
	}
	plain := "http://" + strings.TrimPrefix(endpoint, "https://")
	if clear, err := Dial(config.Fleet{Endpoints: []string{endpoint, plain}, CAFile: caFile, Username: "root", PasswordFile: good}); err == nil {
		clear.Close()
		t.Fatal("a login with an http:// endpoint was dialled")
	} else if !strings.HasPrefix(err.Error(), "fleet.etcd.endpoints[1]: ") || !strings.Contains(err.Error(), "in clear") {
		t.Fatalf("a login over http://: %v, want it refused naming fleet.etcd.endpoints[1]", err)
	}
}
