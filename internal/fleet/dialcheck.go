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

// verdictWait is how long the look waits after a TLS 1.3 handshake for the member to
// refuse the node's certificate, which it does at once when it does: every https://
// dial takes that much longer.
const verdictWait = 300 * time.Millisecond

// checkEndpoints looks once at each endpoint for what the etcd client reports only as "context
// deadline exceeded", after its requests' timeouts (30 s for an import): an https://
// endpoint that does not speak TLS, an http:// one that does, a member's certificate
// that the config's CA does not sign or that does not name the endpoint's address, a
// member that wants a client certificate the config does not give or refuses the one
// it gives. An
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
		if _, alert := remoteAlert(err); err == nil || alert {
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
	c := tls.Client(conn, cfg)
	err = c.HandshakeContext(ctx)
	if err == nil {
		// TLS 1.3 ends the handshake before the member checks the node's certificate:
		// its verdict comes with the first read; a member content with it waits for
		// the client to speak. Anything but an alert is no word on the config.
		conn.SetReadDeadline(time.Now().Add(verdictWait))
		if _, err = c.Read(make([]byte, 1)); err != nil {
			if alert, refused := remoteAlert(err); !refused || !strings.Contains(alert, "certificate") {
				return nil
			}
		}
	}
	var header tls.RecordHeaderError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	alert, refused := remoteAlert(err)
	refused = refused && strings.Contains(alert, "certificate")
	switch {
	case err == nil:
		return nil
	case refused && len(cfg.Certificates) == 0:
		return fmt.Errorf("fleet.etcd.cert_file: %s asks for a client certificate, and the config gives none (%s): give cert_file and key_file, a certificate of the CA of the member's --trusted-ca-file", endpoint, alert)
	case refused:
		return fmt.Errorf("fleet.etcd.cert_file: %s refused the node's certificate (%s): it must be signed by the CA of the member's --trusted-ca-file, with the clientAuth usage", endpoint, alert)
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

// remoteAlert is the alert the other side sent, if err is one (crypto/tls reports it
// as a net.OpError "remote error" around a type of its own).
func remoteAlert(err error) (string, bool) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return op.Err.Error(), true
	}
	return "", false
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
