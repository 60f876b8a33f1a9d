package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// The service documents a node refused show in `ctl status` and `ctl fleet`, named.
func TestCtlShowsRefusedDocuments(t *testing.T) {
	refused := []wire.FleetRefusal{{Service: "web", Revision: 12, Error: "/manifold/services/web:3: vip: not an address"}}
	line := fleetLine(&wire.FleetState{Prefix: "/manifold", AppliedRevision: 12, StoreRevision: 12, Reachable: true, Refused: refused})
	if !strings.Contains(line, "refused 1 service documents, each service keeps its last good state: web (revision 12: /manifold/services/web:3: vip: not an address)") {
		t.Errorf("status line: %s", line)
	}
	var out bytes.Buffer
	printFleet(&out, &wire.FleetStatus{Prefix: "/manifold", Nodes: []wire.FleetNode{{NodeRecord: wire.NodeRecord{Name: "lb1", Refused: refused}, Alive: true}}})
	if !strings.Contains(out.String(), "refused: web") {
		t.Errorf("fleet table:\n%s", out.String())
	}
}
