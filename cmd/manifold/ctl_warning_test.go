package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// A change the node made with a warning (the Warning header of a 2xx answer) succeeds,
// and ctl shows the warning on its error stream.
func TestCtlShowsTheWarningOfAChangeMade(t *testing.T) {
	web := fixture().Services[1]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("Warning", wire.WarningHeader("the config file was written but may not survive a power cut: fsync /etc/manifold: input/output error"))
		json.NewEncoder(w).Encode(web)
	}))
	defer srv.Close()
	var out, warn bytes.Buffer
	if err := ctl([]string{"--api", srv.URL, "drain", "web", "10.0.1.1"}, &out, &warn); err != nil {
		t.Fatalf("a change made with a warning failed: %v", err)
	}
	if want := "warning: the config file was written but may not survive a power cut: fsync /etc/manifold: input/output error\n"; warn.String() != want {
		t.Errorf("error stream %q, want %q", warn.String(), want)
	}
	if !strings.Contains(out.String(), "10.0.1.1") {
		t.Errorf("the change is not shown: %q", out.String())
	}
}
