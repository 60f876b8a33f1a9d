package tunnel

// The parts the tests put together, all real: a CA and the edge's certificate, an
// edge on loopback, net/http origins, connectors (in this process, or in a child
// process that can be killed), and an HTTP client opening one connection per request.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

const childConnectorEnv = "TUNNEL_TEST_CONNECTOR_CONFIG"

// TestMain runs a connector instead of the tests when started as the child of a test
// that kills it.
func TestMain(m *testing.M) {
	if path := os.Getenv(childConnectorEnv); path != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := RunConnector(ctx, path, slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pki is a CA and an edge certificate it signed, for 127.0.0.1 and localhost.
type pki struct {
	dir                       string
	caFile, certFile, keyFile string
}

func newPKI(t testing.TB) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test tunnel CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "edge"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := pki{dir: dir, caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "edge.pem"), keyFile: filepath.Join(dir, "edge.key")}
	writeFile(t, p.caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	writeFile(t, p.certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, p.keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return p
}

func writeFile(t testing.TB, path, contents string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
}

// logBuffer collects a component's log lines, to check what they leave out.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testEdge struct {
	*Edge
	pki  pki
	logs *logBuffer
	stop func() // stops the edge (Run returns), as the test's end does
}

// startEdge runs an edge with the given tokens file and limits, until the test ends.
func startEdge(t *testing.T, p pki, tokens string, cfg EdgeConfig) *testEdge {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.CertFile, cfg.KeyFile = p.certFile, p.keyFile
	cfg.TokensFile = filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, cfg.TokensFile, tokens)
	logs := &logBuffer{}
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	e, err := NewEdge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("edge: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("edge log:\n%s", logs)
		}
	})
	return &testEdge{Edge: e, pki: p, logs: logs, stop: stop}
}

// serve makes the edge accept clients of service on a loopback port; it returns
// the port's address.
func (e *testEdge) serve(t *testing.T, service string) string {
	t.Helper()
	return e.serveAt(t, service, "127.0.0.1:0")
}

// serveAt is serve on the address at ("[::1]:0": IPv6).
func (e *testEdge) serveAt(t *testing.T, service, at string) string {
	t.Helper()
	ln, err := net.Listen("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Serve(ctx, service, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %s: %v", service, err)
		}
	})
	return ln.Addr().String()
}

// tunnelOf returns the status of the tunnel of the named connector, if attached.
func (e *testEdge) tunnelOf(connector string) (TunnelStatus, bool) {
	for _, s := range e.Tunnels() {
		if s.Connector == connector {
			return s, true
		}
	}
	return TunnelStatus{}, false
}

// waitFor waits until cond holds, re-checking at every change n announces; it fails
// the test after timeout.
func waitFor(t *testing.T, n *notifier, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := n.changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("after %s: %s", timeout, what)
		}
	}
}

// origin is an HTTP server that names itself in X-Origin, echoes POST bodies, and
// holds requests to /hold until released.
type origin struct {
	name    string
	addr    string
	served  atomic.Int64
	held    chan struct{} // one value per request that reached /hold
	release chan struct{} // closed: every held request answers
}

func startOrigin(t *testing.T, name string) *origin {
	t.Helper()
	o := &origin{name: name, held: make(chan struct{}, 1000), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.served.Add(1)
		w.Header().Set("X-Origin", name)
		if r.URL.Path == "/hold" {
			o.held <- struct{}{}
			<-o.release
		}
		if r.Method == http.MethodPost {
			_, _ = io.Copy(w, r.Body)
			return
		}
		fmt.Fprintf(w, "hello from %s\n", name)
	}))
	t.Cleanup(func() {
		o.releaseHeld()
		srv.Close()
	})
	o.addr = srv.Listener.Addr().String()
	return o
}

func (o *origin) releaseHeld() {
	select {
	case <-o.release:
	default:
		close(o.release)
	}
}

// transports are the transports the tests of the tunnel's main paths run over.
var transports = []string{TransportQUIC, TransportTCP}

// overTransports runs test once per transport, as subtests named after them: the
// connectors a subtest configures (connectorFile) use its transport.
func overTransports(t *testing.T, test func(t *testing.T)) {
	for _, tr := range transports {
		t.Run(tr, test)
	}
}

// transportOf is the transport of the subtest t is (or is under), auto outside
// overTransports.
func transportOf(t *testing.T) string {
	for _, tr := range transports {
		if strings.HasSuffix(t.Name(), "/"+tr) || strings.Contains(t.Name(), "/"+tr+"/") {
			return tr
		}
	}
	return TransportAuto
}

// connectorFile writes a connector's config, with its token file, and returns its path.
func connectorFile(t *testing.T, name, token, caFile string, edges []string, services string) string {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, token+"\n")
	path := filepath.Join(dir, "connect.yaml")
	writeFile(t, path, fmt.Sprintf("name: %s\nedges: [%s]\ntoken_file: %s\nca_file: %s\ndrain_time: 10s\ntransport: %s\nservices:\n%s",
		name, strings.Join(edges, ", "), tokenFile, caFile, transportOf(t), services))
	return path
}

// connectorFile writes the config of a connector of this edge.
func (e *testEdge) connectorFile(t *testing.T, name, token, services string) string {
	t.Helper()
	return connectorFile(t, name, token, e.pki.caFile, []string{e.Addr().String()}, services)
}

// web is the services section of a connector serving web from origin.
func web(o *origin) string { return "  - {name: web, to: " + o.addr + "}\n" }

type testConnector struct {
	*Connector
	logs *logBuffer
	stop func() // drains, and waits for Run to return
}

// startConnector runs a connector in this process until stop (or the test's end).
func startConnector(t *testing.T, path string) *testConnector {
	t.Helper()
	return startConnectorWith(t, path, nil)
}

// startConnectorWith is startConnector with setup applied to the connector before it
// runs (a test's protocol versions, a spy on its origin).
func startConnectorWith(t *testing.T, path string, setup func(*Connector)) *testConnector {
	t.Helper()
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	cfg, err := LoadConnectorConfig(path, log)
	if err != nil {
		t.Fatal(err)
	}
	c := NewConnector(cfg, log)
	if setup != nil {
		setup(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = c.Run(ctx)
		close(done)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("connector %s did not stop within 30s of its drain", cfg.Name)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("connector %s log:\n%s", cfg.Name, logs)
		}
	})
	return &testConnector{Connector: c, logs: logs, stop: stop}
}

// startChildConnector runs a connector in a child process, which the test can kill.
func startChildConnector(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	// the test binary itself, built by go test, runs the connector in its TestMain
	cmd := hostprog.Command(hostprog.Built(os.Args[0]), "-test.run=^$")
	cmd.Env = append(os.Environ(), childConnectorEnv+"="+path)
	logs := &logBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("child connector log:\n%s", logs)
		}
	})
	return cmd
}

// newClient opens a new TCP connection for every request, so that every request is
// a new stream the edge places.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
}

// get does one request and returns the origin that answered.
func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return resp.Header.Get("X-Origin"), nil
}

// listenEcho runs a TCP server that reads to EOF, then writes it all back and closes.
func listenEcho(t *testing.T) string {
	t.Helper()
	return listenReadAll(t, func(conn net.Conn, got []byte) { _, _ = conn.Write(got) })
}

// listenReadAll runs a TCP server that reads every connection to EOF, hands what it
// read to then, and closes the connection.
func listenReadAll(t *testing.T, then func(conn net.Conn, got []byte)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				got, _ := io.ReadAll(conn)
				then(conn, got)
			}()
		}
	}()
	return ln.Addr().String()
}
