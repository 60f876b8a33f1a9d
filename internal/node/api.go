package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/listen"
	"github.com/manifoldlb/manifold/internal/metrics"
	"github.com/manifoldlb/manifold/internal/secretfile"
)

// serveAPI starts the REST API and /metrics on node.api, and the rate sampler the
// status needs, and returns their stopper.
func (n *Node) serveAPI() (func(), error) {
	cfg := &n.cfg.Node
	token, err := apiToken(cfg, n.log)
	if err != nil {
		return nil, err
	}
	hosts := cfg.APIHosts
	var tlsConfig *tls.Config
	if cfg.APICertFile != "" {
		if tlsConfig, err = listen.LoadTLS(cfg.APICertFile, cfg.APIKeyFile, n.log); err != nil {
			return nil, fmt.Errorf("node.api_cert_file, node.api_key_file: %w", err)
		}
		// the certificate's names are the API's: a client that checks it asks for one
		hosts = append(slices.Clip(hosts), tlsConfig.Certificates[0].Leaf.DNSNames...)
	}
	ln, err := net.Listen("tcp", cfg.API)
	if err != nil {
		return nil, fmt.Errorf("node.api: listen on %s: %w", cfg.API, err)
	}
	loopback := ln.Addr().(*net.TCPAddr).IP.IsLoopback()
	if !loopback && (token == "" || tlsConfig == nil) {
		n.log.Warn("INSECURE: the API listens beyond loopback without a token or without TLS, as node.api_insecure_remote allows: "+
			"whoever reaches the port (or watches it, without TLS) can change this node",
			"address", ln.Addr().String(), "token", token != "", "tls", tlsConfig != nil)
	}

	n.api = &api.Server{Node: n, Store: n.file.Store(), Token: token, OpenReads: loopback, Hosts: hosts, Log: n.log, Flows: n.flows}
	if n.edge != nil {
		n.api.Tunnels = n.tunnelsStatus
	}
	n.api.Metrics = metrics.Handler(n)
	if n.fleet != nil {
		n.api.Steering = func() wire.SteeringStatus {
			return wire.SteeringStatus{Site: n.fleet.Site(), Services: n.fleet.Steering()}
		}
	}

	stopRates := make(chan struct{})
	// owned by Run: stopped by the returned func before Run returns
	// (waited for: its last read of the maps must happen before they are closed)
	ratesDone := make(chan struct{})
	go func() {
		defer close(ratesDone)
		n.rates.run(n.lb, n.tunnelCounters, clock.Real(), stopRates)
	}()

	// the status page's plots; like the rate meter, it reads the maps, so it is waited
	// for before they are closed
	historyCtx, stopHistory := context.WithCancel(context.Background())
	historyDone := make(chan struct{})
	go func() {
		defer close(historyDone)
		n.api.RecordHistory(historyCtx)
	}()

	// owned by Run: stopped by the returned func before Run returns
	srv := listen.ServeHTTP(ln, n.api.Handler(), listen.HTTPOptions{TLS: tlsConfig, Log: n.log})
	n.log.Info("API listening", "address", ln.Addr().String(), "token", token != "", "tls", tlsConfig != nil, "open_reads", loopback || token == "")
	return func() {
		srv.Close()
		close(stopRates)
		<-ratesDone
		stopHistory()
		<-historyDone
	}, nil
}

// apiToken is node.api_token, or the contents of node.api_token_file (a warning when
// others may read the file).
func apiToken(n *config.Node, log *slog.Logger) (string, error) {
	if n.APITokenFile == "" {
		return n.APIToken, nil
	}
	b, err := secretfile.Read(n.APITokenFile, log)
	if err != nil {
		return "", fmt.Errorf("node.api_token_file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("node.api_token_file: %s is empty", n.APITokenFile)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("node.api_token_file: %s holds more than one word; the token is one word", n.APITokenFile)
	}
	if msg := config.APITokenProblem(token); msg != "" {
		return "", fmt.Errorf("node.api_token_file: %s: %s", n.APITokenFile, msg)
	}
	return token, nil
}
