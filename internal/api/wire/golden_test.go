package wire_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/api/wire/wiretest"
)

var update = flag.Bool("update", false, "rewrite testdata/bodies.json from the wire types")

// bodies are the types that are a body or a record of their own, by name.
func bodies() map[string]any {
	return map[string]any{
		"Status": &wire.Status{}, "ServiceStatus": &wire.ServiceStatus{}, "ConfigView": &wire.ConfigView{},
		"Error": &wire.Error{}, "WeightRequest": &wire.WeightRequest{}, "FlowsView": &wire.FlowsView{},
		"FleetStatus": &wire.FleetStatus{}, "NodeRecord": &wire.NodeRecord{}, "SteeringStatus": &wire.SteeringStatus{},
		"Steering": &wire.Steering{}, "TunnelsStatus": &wire.TunnelsStatus{}, "LinkStatus": &wire.LinkStatus{},
		"ServiceSpec": &wire.ServiceSpec{},
	}
}

// The JSON of every body, every field filled, is the one in testdata/bodies.json:
// a change of a field's name or shape, which clients and nodes of the previous release
// would not read, shows as a diff there (go test -update writes the new one; the
// first was written from the types in internal/api before they moved here, and
// matched byte for byte).
func TestBodiesAreTheGoldenOnes(t *testing.T) {
	got := map[string]json.RawMessage{}
	for name, v := range bodies() {
		wiretest.Fill(v)
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = b
	}
	out, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, '\n')
	path := filepath.Join("testdata", "bodies.json")
	if *update {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want) {
		t.Errorf("the bodies' JSON differs from %s (go test -update rewrites it; a client of the previous release may not read the new one):\n%s", path, out)
	}
}
