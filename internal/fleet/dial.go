// Package fleet keeps the desired state of a fleet of nodes in etcd: every node reads
// the same services, applies each revision through its reconciler, and writes through
// a transaction that refuses an edit made against an older revision.
//
// Keys, under the fleet's prefix P (/manifold by default):
//
//	P/services/<name>  the service's YAML document, as in a config file (comments kept)
//	P/generation       written in the transaction of every change of the services: a
//	                   write made against revision R commits only while its mod
//	                   revision is still ≤ R (a delete leaves no key to compare)
//	P/nodes/<name>     the node's last record (JSON api.NodeRecord): a gone node stays listed
//	P/alive/<name>     empty, under the node's lease: present while the node lives
package fleet

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/manifoldlb/manifold/internal/config"
)

// DefaultPrefix is the key prefix of a fleet whose config names none.
const DefaultPrefix = "/manifold"

// dialTimeout bounds connecting to etcd: a node that cannot reach the store at start
// has no desired state to serve, and should say so rather than hang.
const dialTimeout = 3 * time.Second

// importSendLimit is the largest request `manifold fleet import` sends: one
// transaction of every service (100 000 services are about 15 MB), beyond the client's
// default of 2 MiB. The members take what their --max-request-bytes allows.
const importSendLimit = 64 << 20

// Dial connects to the fleet's etcd. Errors name the config field at fault.
func Dial(cfg config.Fleet) (*clientv3.Client, error) { return dial(cfg, 0) }

// DialImport is Dial for `manifold fleet import`, whose one transaction may be larger
// than a node's requests (importSendLimit).
func DialImport(cfg config.Fleet) (*clientv3.Client, error) { return dial(cfg, importSendLimit) }

// dial connects; sendLimit, when not 0, is the largest request the client sends.
func dial(cfg config.Fleet, sendLimit int) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("fleet.etcd.endpoints: required")
	}
	cc := clientv3.Config{
		Endpoints:          cfg.Endpoints,
		DialTimeout:        dialTimeout,
		MaxCallSendMsgSize: sendLimit,
		// the client's own retries and reconnects are not news; this package logs what
		// they mean for the node (unreachable, stale since)
		Logger: zap.NewNop(),
		// gRPC's reconnect backoff grows to two minutes: a node would catch up that
		// long after etcd is back. A few endpoints can afford a try a second.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: dialTimeout,
		})},
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	cc.TLS = tlsCfg
	switch {
	case cfg.Username != "" && cfg.PasswordFile == "":
		return nil, errors.New("fleet.etcd.password_file: required with a username")
	case cfg.Username == "" && cfg.PasswordFile != "":
		return nil, errors.New("fleet.etcd.username: required with a password_file")
	}
	if i, problem := cfg.PasswordInClear(); i >= 0 {
		return nil, fmt.Errorf("fleet.etcd.endpoints[%d]: %s", i, problem)
	}
	if cfg.Username != "" {
		pw, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("fleet.etcd.password_file: %w", err)
		}
		cc.Username, cc.Password = cfg.Username, strings.TrimSpace(string(pw))
	}
	// the client says no more of a TLS mismatch than "context deadline exceeded", at
	// its first request's timeout: a look at each endpoint names it now
	if err := checkEndpoints(cfg.Endpoints, tlsCfg); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("fleet.etcd.endpoints: cannot connect to %s: %w", strings.Join(cfg.Endpoints, ", "), err)
	}
	return cli, nil
}

// tlsConfig is nil for plain http endpoints without certificates.
func tlsConfig(cfg config.Fleet) (*tls.Config, error) {
	https := false
	for _, e := range cfg.Endpoints {
		https = https || strings.HasPrefix(e, "https://")
	}
	if !https && cfg.CertFile == "" && cfg.KeyFile == "" && cfg.CAFile == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case (cfg.CertFile == "") != (cfg.KeyFile == ""):
		return nil, errors.New("fleet.etcd.cert_file, key_file: give both or neither")
	case cfg.CertFile != "":
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("fleet.etcd.cert_file: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("fleet.etcd.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("fleet.etcd.ca_file: no PEM certificate in %s", cfg.CAFile)
		}
		t.RootCAs = pool
	}
	return t, nil
}
