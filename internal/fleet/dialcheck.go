package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// endpointCheckTimeout bounds the look at each endpoint before the client dials (all at once).
const endpointCheckTimeout = 2 * time.Second

// checkEndpoints looks once at each endpoint for what the etcd client reports only as "context
// deadline exceeded", after its requests' timeouts (30 s for an import): an https://
// endpoint that does not speak TLS, an http:// one that does, a member's certificate
// that the config's CA does not sign or that does not name the endpoint's address. An
// endpoint that does not answer in time, refuses or looks right is left to the client,
// which retries it (a member may be down while the others serve). The errors name the
// config field at fault, in the order of the endpoints.
func checkEndpoints(endpoints []string, tlsCfg *tls.Config) error {
	errs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	for i, e := range endpoints {
		wg.Go(func() { errs[i] = checkEndpoint(i, e, tlsCfg) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func checkEndpoint(i int, endpoint string, tlsCfg *tls.Config) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil // the config's validation names it; the client refuses it
	}
	field := fmt.Sprintf("fleet.etcd.endpoints[%d]", i)
	ctx, cancel := context.WithTimeout(context.Background(), endpointCheckTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil // down, refused, filtered: the client retries
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if u.Scheme == "http" {
		// a TLS handshake tells a TLS member from a plain one: a plain one answers it
		// with something that is not TLS, or hangs up
		c := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) // #nosec G402 -- only asks whether it speaks TLS; nothing is sent
		err := c.HandshakeContext(ctx)
		var alert tls.AlertError
		if err == nil || errors.As(err, &alert) {
			return fmt.Errorf("%s: %s speaks TLS, but the endpoint says http://: write https://%s (and fleet.etcd.ca_file, the CA of the members' certificates)", field, endpoint, u.Host)
		}
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname() // as the etcd client checks it
	}
	err = tls.Client(conn, cfg).HandshakeContext(ctx)
	var header tls.RecordHeaderError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &header):
		answer := "a first record that does not look like TLS"
		if strings.HasPrefix(string(header.RecordHeader[:]), "HTTP/") {
			answer = "plain HTTP"
		}
		return fmt.Errorf("%s: %s does not speak TLS (it answered a TLS handshake with %s): write http://%s, or give the member TLS (--cert-file, --key-file)", field, endpoint, answer, u.Host)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		// a plain etcd does this; one with TLS would answer with an alert
		return fmt.Errorf("%s: %s does not speak TLS (it hung up on a TLS handshake): write http://%s, or give the member TLS (--cert-file, --key-file)", field, endpoint, u.Host)
	case errors.As(err, &unknown):
		if tlsCfg == nil || tlsCfg.RootCAs == nil {
			return fmt.Errorf("fleet.etcd.ca_file: %s's certificate is not signed by a CA this system trusts, and no ca_file is given: give the CA of the members' certificates", endpoint)
		}
		return fmt.Errorf("fleet.etcd.ca_file: %s's certificate is not signed by a CA of ca_file (issuer %q)", endpoint, unknown.Cert.Issuer)
	case errors.As(err, &host):
		return fmt.Errorf("%s: %s's certificate is not for %s (it names %s): use an address it names, or add this one to its subjectAltName", field, endpoint, host.Host, certNames(host.Certificate))
	case errors.As(err, &invalid):
		return fmt.Errorf("%s: %s's certificate: %v", field, endpoint, invalid)
	}
	return nil // a timeout or another failure: the client retries
}

// certNames is the addresses and names a certificate is for.
func certNames(c *x509.Certificate) string {
	var names []string
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	names = append(names, c.DNSNames...)
	if len(names) == 0 {
		return "no address (no subjectAltName)"
	}
	return strings.Join(names, ", ")
}
