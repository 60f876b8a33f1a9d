package api_test

import (
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/apitest"
	"github.com/manifoldlb/manifold/internal/api/wire"
)

// A write that was made although a step after it failed (store.Committed) answers as a
// success, with the warning in a Warning header: the caller must not retry or report
// a failure for a change the file holds.
func TestAWriteMadeWithAWarningSucceeds(t *testing.T) {
	check, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, check, false)
	e.node.warn = `fsync /etc/manifold: input/output error "(injected)"`
	x := e.do("POST", "/api/v1/services/web/backends/10.0.1.1/drain", "")
	if x.Status != 200 {
		t.Fatalf("status %d, want 200: %s", x.Status, x.Body)
	}
	if got := wire.WarningText(x.Header.Get("Warning")); got != `fsync /etc/manifold: input/output error "(injected)"` {
		t.Errorf("Warning header %q (text %q), want the warning", x.Header.Get("Warning"), got)
	}
	if s := decode[wire.ServiceStatus](t, x); s.Backends[0].Weight != 0 {
		t.Errorf("the body is not the service as changed: %+v", s.Backends[0])
	}
	if !strings.Contains(e.file(), "weight: 0") {
		t.Errorf("the file does not hold the change:\n%s", e.file())
	}
}
