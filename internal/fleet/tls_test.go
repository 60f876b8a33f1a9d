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

// startTLSEtcd starts one etcd member that serves its clients over TLS with a
// certificate of p, with extra flags; it returns the client URL.
func startTLSEtcd(t *testing.T, p *testpki.CA, extra ...string) string {
	t.Helper()
	testenv.Need(t, hostprog.Check(hostprog.Etcd))
	serverCert, serverKey := p.Issue(t, "etcd", x509.ExtKeyUsageServerAuth)
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
// docs/fleet.md's set-up has it: the node's client certificate is let in; a client without
// one, or one that trusts another CA, is not.
func TestDialTLSToARealEtcd(t *testing.T) {
	p := testpki.New(t, "fleet-ca")
	caFile := p.File
	clientURL := startTLSEtcd(t, p, "--trusted-ca-file", caFile, "--client-cert-auth")
	clientCert, clientKey := p.Issue(t, "lb1", x509.ExtKeyUsageClientAuth)

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

// With etcd's authentication on, the node logs in with username and password_file
// over https://; a wrong password is refused, and so is any login over http://, which
// would send the password in clear (the dialer refuses it before connecting).
func TestDialPasswordToARealEtcd(t *testing.T) {
	p := testpki.New(t, "fleet-ca")
	caFile := p.File
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

// A TLS mismatch between the config and the member is named by Dial, in a few seconds
// at most, not left to the client's "context deadline exceeded" at its first request's
// timeout: an https:// endpoint to a plain member, an http:// one to a TLS member, an
// https:// one without the CA of the member's certificate, one whose address the
// certificate does not name, and a member that wants a client certificate the config
// does not give, or refuses the one it gives.
func TestDialNamesATLSMismatch(t *testing.T) {
	plain := startEtcd(t, 1).endpoints()[0]
	p := testpki.New(t, "fleet-ca")
	secure := startTLSEtcd(t, p)
	strict := startTLSEtcd(t, p, "--trusted-ca-file", p.File, "--client-cert-auth")
	clientCert, clientKey := p.Issue(t, "lb1", x509.ExtKeyUsageClientAuth)
	other := testpki.New(t, "another-ca")
	otherCert, otherKey := other.Issue(t, "lb1", x509.ExtKeyUsageClientAuth)
	byName := "https://localhost:" + secure[strings.LastIndex(secure, ":")+1:] // the certificate names 127.0.0.1 only
	// both members answer a config that is right, and Dial has no word for it
	for _, cfg := range []config.Fleet{{Endpoints: []string{plain}}, {Endpoints: []string{secure}, CAFile: p.File},
		{Endpoints: []string{strict}, CAFile: p.File, CertFile: clientCert, KeyFile: clientKey}} {
		cli, err := Dial(cfg)
		if err != nil {
			t.Fatalf("%v: %v", cfg.Endpoints, err)
		}
		eventually(t, cfg.Endpoints[0]+" answers", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := cli.Get(ctx, prefix+"/probe")
			return err == nil
		})
		cli.Close()
	}
	cases := []struct {
		name string
		cfg  config.Fleet
		want string
	}{
		{"https:// to a plain member", config.Fleet{Endpoints: []string{"https://" + strings.TrimPrefix(plain, "http://")}, CAFile: p.File},
			"fleet.etcd.endpoints[0]: https://" + strings.TrimPrefix(plain, "http://") + " does not speak TLS"},
		{"http:// to a TLS member", config.Fleet{Endpoints: []string{plain, "http://" + strings.TrimPrefix(secure, "https://")}},
			"fleet.etcd.endpoints[1]: http://" + strings.TrimPrefix(secure, "https://") + " speaks TLS, but the endpoint says http://: write " + secure},
		{"https:// without ca_file", config.Fleet{Endpoints: []string{secure}},
			"fleet.etcd.ca_file: " + secure + "'s certificate is not signed by a CA this system trusts, and no ca_file is given"},
		{"https:// with another CA", config.Fleet{Endpoints: []string{secure}, CAFile: other.File},
			"fleet.etcd.ca_file: " + secure + "'s certificate is not signed by a CA of ca_file"},
		{"https:// to a name the certificate lacks", config.Fleet{Endpoints: []string{byName}, CAFile: p.File},
			"fleet.etcd.endpoints[0]: " + byName + "'s certificate is not for localhost"},
		{"no client certificate for a member that wants one", config.Fleet{Endpoints: []string{strict}, CAFile: p.File},
			"fleet.etcd.cert_file: " + strict + " asks for a client certificate, and the config gives none"},
		{"a client certificate of another CA", config.Fleet{Endpoints: []string{strict}, CAFile: p.File, CertFile: otherCert, KeyFile: otherKey},
			"fleet.etcd.cert_file: " + strict + " refused the node's certificate"},
	}
	for _, c := range cases {
		done := make(chan error, 1)
		go func() {
			cli, err := Dial(c.cfg)
			if err == nil {
				cli.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want %q", c.name, err, c.want)
			}
		case <-time.After(4 * endpointCheckTimeout): // a bound on a hang, not a figure: the client alone waits its requests' timeouts
			t.Errorf("%s: Dial has not returned after %v", c.name, 4*probeTimeout)
		}
	}
}
