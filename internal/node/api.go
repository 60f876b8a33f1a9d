package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/listen"
	"github.com/manifoldlb/manifold/internal/metrics"
)

// serveAPI starts the REST API and /metrics on node.api, and the rate sampler the
// status needs, and returns their stopper.
func (n *Node) serveAPI() (func(), error) {
	token, err := apiToken(&n.cfg.Node)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", n.cfg.Node.API)
	if err != nil {
		return nil, fmt.Errorf("node.api: listen on %s: %w", n.cfg.Node.API, err)
	}
	loopback := ln.Addr().(*net.TCPAddr).IP.IsLoopback()
	if token == "" && !loopback {
		n.log.Warn("the API listens beyond loopback without a token: whoever reaches it can change the node (set node.api_token_file)", "address", ln.Addr().String())
	}

	n.api = &api.Server{Node: n, Store: n.file.Store(), Token: token, OpenReads: loopback, Log: n.log, Flows: n.flows}
	if n.edge != nil {
		n.api.Tunnels = n.tunnelsStatus
	}
	n.api.Metrics = metrics.Handler(n)
	if n.fleet != nil {
		n.api.Steering = func() api.SteeringStatus {
			return api.SteeringStatus{Site: n.fleet.Site(), Services: n.fleet.Steering()}
		}
	}

	stopRates := make(chan struct{})
	// owned by Run: stopped by the returned func before Run returns
	// (waited for: its last read of the maps must happen before they are closed)
	ratesDone := make(chan struct{})
	go func() {
		defer close(ratesDone)
		n.rates.run(n.ctrl.View, n.lb, clock.Real(), stopRates)
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
	srv := listen.ServeHTTP(ln, n.api.Handler(), listen.HTTPOptions{Log: n.log})
	n.log.Info("API listening", "address", ln.Addr().String(), "token", token != "", "open_reads", loopback || token == "")
	return func() {
		srv.Close()
		close(stopRates)
		<-ratesDone
		stopHistory()
		<-historyDone
	}, nil
}

// apiToken is node.api_token, or the contents of node.api_token_file.
func apiToken(n *config.Node) (string, error) {
	if n.APITokenFile == "" {
		return n.APIToken, nil
	}
	b, err := os.ReadFile(n.APITokenFile)
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
	return token, nil
}
