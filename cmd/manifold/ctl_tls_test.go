package main

import (
	"crypto/x509"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/listen"
	"github.com/manifoldlb/manifold/internal/testpki"
)

// ctl reaches an API served over TLS, as the node serves it (listen.LoadTLS,
// listen.ServeHTTP), when --ca-file names the CA of its certificate, and refuses it
// without that CA.
func TestCtlTLS(t *testing.T) {
	ca, other := testpki.New(t, "manifold test CA"), testpki.New(t, "another CA")
	certFile, keyFile := ca.Issue(t, "api", x509.ExtKeyUsageServerAuth, "lb1.example")
	caFile, otherFile := ca.File, other.File
	tlsConfig, err := listen.LoadTLS(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if names := tlsConfig.Certificates[0].Leaf.DNSNames; len(names) != 1 || names[0] != "lb1.example" {
		t.Fatalf("the certificate's names: %v", names)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{st: fixture()}
	srv := listen.ServeHTTP(ln, f, listen.HTTPOptions{TLS: tlsConfig})
	t.Cleanup(srv.Close)
	url := "https://" + ln.Addr().String()

	out, err := runCtl(t, "--api", url, "--ca-file", caFile, "status")
	if err != nil || !strings.Contains(out, "lb1") {
		t.Fatalf("ctl status over TLS with the API's CA: %v\n%s", err, out)
	}
	if _, err := runCtl(t, "--api", url, "--ca-file", caFile, "weight", "web", "10.0.1.1", "5"); err != nil {
		t.Fatalf("ctl weight over TLS: %v", err)
	}
	if f.lastReq != "POST /api/v1/services/web/backends/10.0.1.1/weight" || f.lastType != "application/json" {
		t.Errorf("ctl weight sent %s with Content-Type %q, want a POST of application/json", f.lastReq, f.lastType)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--api", url, "status"}, "has a certificate this host does not trust (--ca-file names the CA that signed it)"},
		{[]string{"--api", url, "--ca-file", otherFile, "status"}, "has a certificate this host does not trust"},
		{[]string{"--api", "http://" + ln.Addr().String(), "--ca-file", caFile, "status"}, "--ca-file checks the certificate of an https:// API"},
		{[]string{"--api", url, "--ca-file", certFile + ".missing", "status"}, "--ca-file: open"},
		{[]string{"--api", url, "--ca-file", keyFile, "status"}, "no PEM certificate in it"},
	} {
		if _, err := runCtl(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ctl %v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
