package api_test

import (
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/apitest"
	"github.com/manifoldlb/manifold/internal/api/wire"
)

// A write body nested deeper than decode.MaxDepth is refused with a 400 that names the
// limit, and the file is untouched. At de322de a body of 520 000 nested arrays (under
// the 1 MiB limit) passed the JSON reader and overflowed the stack of the YAML
// writer: "fatal error: stack overflow", the node (here the test binary) died.
func TestNestedBodyIsRefused(t *testing.T) {
	check, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, check, true)
	before := e.file()
	deep := strings.Repeat("[", 520_000) + strings.Repeat("]", 520_000)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/services/api", `{"vip": ` + deep + `}`},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{"weight": ` + deep + `}`},
	} {
		x := e.do(c.method, c.path, c.body)
		b := decode[wire.Error](t, x)
		if x.Status != 400 || !strings.Contains(b.Message, "nested more than 64 levels deep (the limit)") {
			t.Errorf("%s %s with a body nested 520 000 deep: %d %+v, want 400 naming the limit", c.method, c.path, x.Status, b)
		}
	}
	if e.file() != before {
		t.Errorf("refused writes changed the file:\n%s", e.file())
	}
}
