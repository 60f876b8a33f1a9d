package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// manifold ctl link shows a link's tunnels from its own API.
func TestCtlLink(t *testing.T) {
	st := wire.LinkStatus{Name: "dc1-dc2", Local: "192.0.2.1", Remote: "192.0.2.2", PublicKey: "izTqe+ZOAKLCDswnn493abfOwTLaIqzONdOPANl1KSY=",
		Prefixes: []string{"10.2.0.0/16"}, Route: "resilient", Tunnels: []wire.LinkTunnel{
			{Index: 0, Device: "mlink0", Port: 51820, SourcePort: 40977, State: wire.LinkTunnelUp, InRoute: true, TxBytes: 3 << 30, RxBytes: 1 << 20, TxPackets: 2200000,
				RxPackets: 900, Handshakes: 4, ProbesSent: 3000, ProbesLost: 2, LastProbeRTTMillis: 0.41, Transitions: 1},
			{Index: 1, Device: "mlink1", Port: 51821, SourcePort: 51821, State: wire.LinkTunnelDown, TxBytes: 900, RxBytes: 12, TxPackets: 20, RxPackets: 1,
				Handshakes: 1, ProbesSent: 3000, ProbesLost: 61, LastProbeRTTMillis: 0.52, Transitions: 2},
		}}
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.Path
		_ = json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	t.Setenv("MANIFOLD_API", "")
	out, err := runCtl(t, "--api", srv.URL, "link")
	if err != nil {
		t.Fatal(err)
	}
	if got != "GET "+wire.LinkPath {
		t.Errorf("sent %s", got)
	}
	golden(t, "link", out)

	// Without --api it asks the link's default address, and says which daemon it expects.
	_, err = runCtl(t, "link")
	if err == nil || !strings.Contains(err.Error(), defaultLinkAPI) || !strings.Contains(err.Error(), "manifold link") {
		t.Errorf("ctl link with no link running: %v", err)
	}
}
