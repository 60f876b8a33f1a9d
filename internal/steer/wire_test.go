package steer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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

// A decision too large for the store keeps, per site, the rows of the origins it has
// a share or a target of, the origins' reasons, and says how many rows it left out; one
// that fits keeps every row and every reason.
func TestWireDecisionAtScale(t *testing.T) {
	obs := World{Sites: 200, Origins: 100, Seed: 3, Utilisation: 0.95}.Observations(1)[0]
	d := Manifold{}.Decide(time.Time{}, obs, nil)
	w := WireDecision(d)
	shares := d.Shares()
	rows := 0
	for i, s := range w.Sites {
		kept := map[string]bool{}
		for _, sh := range s.Shares {
			if sh.Share == 0 && sh.Target == 0 {
				t.Fatalf("%s → %s has neither a share nor a target, and is kept", s.Site, sh.Origin)
			}
			if sh.Reason != "" {
				t.Fatalf("%s → %s has a reason, at scale", s.Site, sh.Origin)
			}
			kept[sh.Origin] = true
		}
		for o := range shares[s.Site] {
			if !kept[o] {
				t.Fatalf("%s's share of %s is left out", s.Site, o)
			}
		}
		if s.Site != obs.Sites[i].Name {
			t.Fatalf("site %d is %s, want %s", i, s.Site, obs.Sites[i].Name)
		}
		rows += len(s.Shares)
	}
	if want := fmt.Sprintf("%d of 20000 site × origin rows shown", rows); !strings.Contains(w.Note, want) {
		t.Errorf("note %q, want it to say %q", w.Note, want)
	}
	for _, o := range w.Origins {
		if o.Reason == "" {
			t.Fatalf("origin %s has no reason", o.Origin)
		}
	}
	if data, _ := json.Marshal(w); len(data) > 1<<20 {
		t.Errorf("the decision is %d bytes on the wire, above 1 MiB", len(data))
	}
	small := WireDecision(Manifold{}.Decide(time.Time{}, twoOrigins(400, true), nil))
	if len(small.Sites[0].Shares) != 2 || small.Note != "" || small.Sites[0].Shares[1].Reason == "" {
		t.Errorf("a small decision lost rows or gained a note: %+v", small)
	}
}

// Shares are equal when every site sends every origin the same share, an absent
// entry reading as 0.
func TestSharesEqual(t *testing.T) {
	a := Shares{"sjc": {"us": 0.75, "eu": 0.25}, "ams": {"eu": 1}}
	for _, tc := range []struct {
		b    Shares
		want bool
	}{
		{Shares{"sjc": {"us": 0.75, "eu": 0.25}, "ams": {"eu": 1, "us": 0}}, true},
		{Shares{"sjc": {"us": 0.75, "eu": 0.25}, "ams": {"eu": 1}, "sea": {}}, true},
		{Shares{"sjc": {"us": 0.75, "eu": 0.25}, "ams": {"eu": 1}, "sea": {"eu": 0}}, true},
		{Shares{"sjc": {"us": 0.75, "eu": 0.25}}, false},
		{Shares{"sjc": {"us": 0.7, "eu": 0.3}, "ams": {"eu": 1}}, false},
		{Shares{"sjc": {"us": 0.75, "eu": 0.25}, "ams": {"eu": 1}, "sea": {"eu": 1}}, false},
	} {
		if got := a.Equal(tc.b); got != tc.want || tc.b.Equal(a) != tc.want {
			t.Errorf("%v equal to %v: %v, want %v", a, tc.b, got, tc.want)
		}
	}
}
