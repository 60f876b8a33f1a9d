package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/manifoldlb/manifold/internal/metrics"
)

// serveAPI starts the read-only status API and /metrics on node.api and returns its
// stopper.
func (n *Node) serveAPI() (func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.status.read(n.lb))
	})
	mux.HandleFunc("GET /api/v1/services", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.status.read(n.lb).Services)
	})
	mux.Handle("GET /metrics", metrics.Handler(n))
	ln, err := net.Listen("tcp", n.cfg.Node.API)
	if err != nil {
		return nil, fmt.Errorf("node.api: listen on %s: %w", n.cfg.Node.API, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	// owned by Run: stopped by the returned func before Run returns
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("API server stopped", "err", err)
		}
	}()
	n.log.Info("API listening", "address", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
