package steer

import (
	"encoding/json"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire/wiretest"
)

// The API and the fleet store carry a Decision as steer makes it: every field, filled,
// comes out of WireDecision as the same JSON; no origins or sites stay null.
func TestWireDecision(t *testing.T) {
	var d Decision
	wiretest.Fill(&d)
	for _, d := range []Decision{d, {}} {
		own, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		onWire, err := json.Marshal(WireDecision(d))
		if err != nil {
			t.Fatal(err)
		}
		if string(own) != string(onWire) {
			t.Errorf("a decision on the wire differs:\n own: %s\nwire: %s", own, onWire)
		}
	}
}
