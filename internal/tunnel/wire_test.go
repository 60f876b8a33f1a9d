package tunnel

import (
	"encoding/json"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire/wiretest"
)

// The API shows the edge's status as the edge has it: every field of TunnelStatus
// and EdgeCounters, filled, comes out of the conversion as the same JSON (a field
// WireTunnels forgets is missing, two it swaps differ).
func TestWireStatus(t *testing.T) {
	var ts TunnelStatus
	var c EdgeCounters
	wiretest.Fill(&ts)
	wiretest.Fill(&c)
	same(t, []TunnelStatus{ts}, WireTunnels([]TunnelStatus{ts}))
	same(t, c, WireCounters(c))
	same(t, []TunnelStatus(nil), WireTunnels(nil))
}

func same(t *testing.T, own, onWire any) {
	t.Helper()
	a, err := json.Marshal(own)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(onWire)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("%T on the wire differs:\n own: %s\nwire: %s", own, a, b)
	}
}
