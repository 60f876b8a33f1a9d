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

// `ctl fleet` counts a record's services from its totals when it has them (it lists
// only the services of note), from its list when it is of a release before them; a
// record cut to its bound says so.
func TestCtlFleetCountsFromTotals(t *testing.T) {
	var out bytes.Buffer
	printFleet(&out, &wire.FleetStatus{Prefix: "/manifold", Nodes: []wire.FleetNode{
		{NodeRecord: wire.NodeRecord{Name: "new", Totals: &wire.RecordTotals{Services: 100000, Announced: 99990},
			Services: []wire.ServiceLoad{{Name: "web"}}, Truncated: &wire.RecordTruncation{Services: 7000, Refused: 3}}, Alive: true},
		{NodeRecord: wire.NodeRecord{Name: "old", Services: []wire.ServiceLoad{{Name: "web", Announced: true}, {Name: "dns"}}}, Alive: true},
	}})
	for _, want := range []string{"99990/100000", "1/2", "record cut to its bound: 7000 services, 3 refusals left out"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("fleet table without %q:\n%s", want, out.String())
		}
	}
}
