package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/steer"
)

// statuses is n services as a node's status shows them, each with two backends, all
// up and announced; the service's index picks its name and addresses.
func statuses(n int) []wire.ServiceStatus {
	out := make([]wire.ServiceStatus, n)
	for i := range out {
		out[i] = wire.ServiceStatus{Name: fmt.Sprintf("svc-%06d", i), Announced: true, Reason: "2 of 2 backends healthy",
			Backends: []wire.BackendStatus{backendStatus(i, 1), backendStatus(i, 2)}}
	}
	return out
}

func backendStatus(i, j int) wire.BackendStatus {
	return wire.BackendStatus{Address: fmt.Sprintf("10.%d.%d.%d", i>>8&0xff, i&0xff, j), Weight: 1, State: wire.BackendUp,
		Health: wire.BackendHealth{Check: "tcp://", Up: true}}
}

func noRTT(string, string) float64 { return 0 }

// A record lists the steered services first (the steering controller reads their
// loads), then the services not as desired; a service as desired is only counted.
func TestRecordServicesListsWhatTheFleetReads(t *testing.T) {
	st := statuses(7)
	st[1].Spec.Origins = []wire.OriginSpec{{Name: "eu"}} // steered, all well
	st[1].Spec.Backends = []wire.BackendSpec{{Address: st[1].Backends[0].Address, Origin: "eu"}, {Address: st[1].Backends[1].Address, Origin: "eu"}}
	st[1].Backends[0].NewFlowsPerSecond, st[1].Backends[1].NewFlowsPerSecond = 3, 4
	st[2].Backends[1].State, st[2].Backends[1].Health.Up = wire.BackendDown, false
	st[3].Announced, st[3].Reason = false, reconcile.ReasonNoBackend
	st[4].Announced, st[4].Reason = false, reconcile.ReasonNoBGP // no BGP on the node: as desired
	st[5].Backends[0].State, st[5].Backends[0].Weight = wire.BackendDraining, 0
	st[6].Backends[0].Health.Up = false // not checked yet, or failing: not in the ring for long
	rtt := func(service, backend string) float64 {
		if service == st[1].Name && backend == st[1].Backends[0].Address {
			return 12.5
		}
		return 0
	}
	got, totals := RecordServices(st, rtt, nil)
	var names []string
	for _, l := range got {
		names = append(names, l.Name)
	}
	if want := []string{st[1].Name, st[2].Name, st[3].Name, st[6].Name}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("listed %v, want %v", names, want)
	}
	// the steered service: one entry per origin, its backends' loads summed, the RTT of
	// the one that measured one
	if want := []wire.OriginLoad{{Name: "eu", Healthy: true, NewFlowsPerSecond: 7, RTTMilliseconds: 12.5}}; !reflect.DeepEqual(got[0].Origins, want) || got[0].Backends != nil ||
		len(got[1].Backends) != 2 || got[1].Backends[1].Healthy {
		t.Errorf("steered %+v, with a down backend %+v", got[0], got[1])
	}
	if want := (wire.RecordTotals{Services: 7, Announced: 5, Backends: 14, BackendsUp: 11, BackendsDown: 2}); totals != want {
		t.Errorf("totals %+v, want %+v", totals, want)
	}
}

// worstRecord is what a node of n services publishes, every service listed (the worst
// case: each has a backend down) with as many refused documents.
func worstRecord(n int) wire.NodeRecord {
	st := statuses(n)
	for i := range st {
		st[i].Backends[0].State, st[i].Backends[0].Health.Up = wire.BackendDown, false
		if i%1000 == 0 {
			st[i].Spec.Origins = []wire.OriginSpec{{Name: "eu"}}
			st[i].Spec.Backends = []wire.BackendSpec{{Address: st[i].Backends[0].Address, Origin: "eu"}, {Address: st[i].Backends[1].Address, Origin: "eu"}}
		}
	}
	rec := wire.NodeRecord{V: wire.RecordVersion, Name: "lb1", Site: "ams1", Addresses: []string{"10.0.0.11"},
		AppliedRevision: 42, ApplyError: strings.Repeat("a problem; ", 500), Tunnels: &wire.TunnelEdgeRecord{Relay: "10.0.0.11:7443"}}
	var totals wire.RecordTotals
	rec.Services, totals = RecordServices(st, noRTT, nil)
	rec.Totals = &totals
	for i := range n {
		rec.Refused = append(rec.Refused, wire.FleetRefusal{Service: fmt.Sprintf("bad-%06d", i), Revision: int64(i), Error: "/manifold/services/bad:3: vip: not an address"})
	}
	for i := range 100 {
		rec.Tunnels.Services = append(rec.Tunnels.Services, fmt.Sprintf("tun-%03d", i))
	}
	return rec
}

// A record stays under wire.MaxRecordBytes at 100 000 services: as a fleet of healthy
// services (counted, not listed) and in the worst case (every service listed and as
// many documents refused), where it is cut to the bound and says what it left out,
// keeping the steered services.
func TestRecordBoundAt100000Services(t *testing.T) {
	for _, n := range []int{10000, 100000} {
		st := statuses(n)
		for i := 0; i < n; i += 100 { // 1 % of the services with a backend down
			st[i].Backends[1].State, st[i].Backends[1].Health.Up = wire.BackendDown, false
		}
		for i := 50; i < 60; i++ { // ten steered
			st[i].Spec.Origins = []wire.OriginSpec{{Name: "eu"}, {Name: "us"}}
			st[i].NewFlowsPerSecond = 1500
		}
		rec := wire.NodeRecord{V: wire.RecordVersion, Name: "lb1", Site: "ams1", Addresses: []string{"10.0.0.11"}, AppliedRevision: 42}
		var totals wire.RecordTotals
		rec.Services, totals = RecordServices(st, noRTT, nil)
		rec.Totals = &totals
		data, cut, err := encodeRecord(rec)
		if err != nil || cut != nil || len(data) > wire.MaxRecordBytes {
			t.Fatalf("%d services, 1 %% with a backend down: %d bytes, cut %+v, %v", n, len(data), cut, err)
		}
		if listed, _ := RecordServices(statuses(n), noRTT, nil); listed == nil || len(listed) != 0 {
			t.Fatalf("%d services as desired: listed %v, want [] (the API's schema has an array)", n, listed)
		}
		t.Logf("%d services, 1 %% with a backend down, 10 steered: a record of %d bytes (%d services listed)", n, len(data), len(rec.Services))

		worst := worstRecord(n)
		data, cut, err = encodeRecord(worst)
		if err != nil || len(data) > wire.MaxRecordBytes || cut == nil {
			t.Fatalf("%d services, every one listed: %d bytes (bound %d), cut %+v, %v", n, len(data), wire.MaxRecordBytes, cut, err)
		}
		var back wire.NodeRecord
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		whole, err := json.Marshal(worst)
		if err != nil {
			t.Fatal(err)
		}
		if back.Truncated == nil || *back.Truncated != *cut ||
			len(back.Services)+cut.Services != len(worst.Services) || len(back.Refused)+cut.Refused != len(worst.Refused) ||
			len(back.Tunnels.Services) != 100 || cut.TunnelServices != 0 || *back.Totals != *worst.Totals {
			t.Fatalf("%d services cut: %+v, %d services %d refused kept", n, back.Truncated, len(back.Services), len(back.Refused))
		}
		for i := range n / 1000 {
			if len(back.Services[i].Origins) != 1 || back.Services[i].Name != fmt.Sprintf("svc-%06d", 1000*i) {
				t.Fatalf("the steered services first: %d is %+v", i, back.Services[i])
			}
		}
		if !strings.HasSuffix(back.ApplyError, "… (cut)") || len(back.ApplyError) > maxApplyError {
			t.Errorf("apply error of %d bytes", len(back.ApplyError))
		}
		t.Logf("%d services, every one listed and as many documents refused: %d bytes whole, cut to %d (%d services, %d refusals left out)",
			n, len(whole), len(data), cut.Services, cut.Refused)
	}
}

// A record over etcd's request limit is published cut to its bound, its truncation
// counted, rather than refused by etcd and never written.
func TestARecordOverEtcdsLimitIsPublishedCut(t *testing.T) {
	cli := startEtcd(t, 1).client()
	a := startNode(t, cli, "a", nil)
	worst := worstRecord(20000)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Publish(ctx, func() wire.NodeRecord { return worst }) })
	defer func() { stop(); wg.Wait() }()
	var rec wire.NodeRecord
	eventually(t, "a's record", func() bool {
		resp, err := cli.Get(context.Background(), prefix+"/nodes/a")
		return err == nil && len(resp.Kvs) == 1 && json.Unmarshal(resp.Kvs[0].Value, &rec) == nil
	})
	if whole, _ := json.Marshal(worst); len(whole) <= 3<<20/2 {
		t.Fatalf("the record is %d bytes whole: not over etcd's limit", len(whole))
	}
	if rec.Truncated == nil || rec.Truncated.Services == 0 || rec.Name != "a" {
		t.Fatalf("record: truncated %+v, %d services listed", rec.Truncated, len(rec.Services))
	}
	if st := a.State(); st.RecordsTruncated == 0 || st.RecordBytes > wire.MaxRecordBytes || st.RecordBytes == 0 {
		t.Fatalf("state: %d bytes, %d records cut", st.RecordBytes, st.RecordsTruncated)
	}
}

// BenchmarkRecord100000 is a node's record of 100 000 services, built from its status
// and encoded, once a second on every node: as desired but 1 % with a backend down,
// and every service listed (cut to the bound).
func BenchmarkRecord100000(b *testing.B) {
	st := statuses(100000)
	for i := 0; i < len(st); i += 100 {
		st[i].Backends[1].State, st[i].Backends[1].Health.Up = wire.BackendDown, false
	}
	worst := worstRecord(100000)
	b.Run("one-percent-down", func(b *testing.B) {
		for b.Loop() {
			rec := wire.NodeRecord{Name: "lb1"}
			rec.Services, _ = RecordServices(st, noRTT, nil)
			if _, _, err := encodeRecord(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("all-listed-cut", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := encodeRecord(worst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The steering controller decides on a bounded record as on the whole one of the
// release before (every service listed, every rate written): the steered services'
// loads, health and RTTs are all there. A reader of that release decodes the record
// into its own types (no totals, no truncated), and finds them too.
func TestObserveABoundedRecordAsAWholeOne(t *testing.T) {
	st := statuses(1000)
	steered := &st[500]
	steered.Name, steered.Spec = webSpec.Name, webSpec
	steered.NewFlowsPerSecond = 300
	steered.Backends = []wire.BackendStatus{backendStatus(1, 11), backendStatus(2, 11)}
	steered.Backends[0].Address, steered.Backends[1].Address = "10.1.0.11", "10.2.0.11"
	steered.Backends[0].NewFlowsPerSecond = 300
	steered.Backends[1].State, steered.Backends[1].Health.Up = wire.BackendDown, false
	rtt := func(service, backend string) float64 {
		if service == "web" && backend == "10.1.0.11" {
			return 21.5
		}
		return 0
	}
	// the previous release's record: every service, as it built it
	whole := wire.NodeRecord{Name: "n1", Site: "sjc"}
	for _, s := range st {
		l := wire.ServiceLoad{Name: s.Name, Announced: s.Announced, NewFlowsPerSecond: s.NewFlowsPerSecond}
		for _, b := range s.Backends {
			l.Backends = append(l.Backends, wire.BackendLoad{Address: b.Address, State: b.State, Healthy: b.Health.Up,
				NewFlowsPerSecond: b.NewFlowsPerSecond, RTTMilliseconds: rtt(s.Name, b.Address)})
		}
		whole.Services = append(whole.Services, l)
	}
	bounded := wire.NodeRecord{V: wire.RecordVersion, Name: "n1", Site: "sjc"}
	bounded.Services, _ = RecordServices(st, rtt, nil)
	data, cut, err := encodeRecord(bounded)
	if err != nil || cut != nil {
		t.Fatal(cut, err)
	}
	// as the previous release decodes it: its own NodeRecord, without the new fields
	var previous struct {
		V        int                `json:"v"`
		Name     string             `json:"name"`
		Site     string             `json:"site"`
		Services []wire.ServiceLoad `json:"services"`
	}
	if err := json.Unmarshal(data, &previous); err != nil {
		t.Fatal(err)
	}
	read := wire.NodeRecord{V: previous.V, Name: previous.Name, Site: previous.Site, Services: previous.Services}
	want, ok := Observe(webSpec, []wire.NodeRecord{whole})
	got, gotOK := Observe(webSpec, []wire.NodeRecord{read})
	if !ok || !gotOK || !reflect.DeepEqual(got, want) || !read.Readable() {
		t.Fatalf("observed on the bounded record %+v (%v), on the whole one %+v (%v)", got, gotOK, want, ok)
	}
	if len(read.Services) >= len(whole.Services)/10 {
		t.Fatalf("the bounded record lists %d of %d services", len(read.Services), len(whole.Services))
	}
}

// perBackend is a steered service's entry as a node of the release before published
// it: one per backend, and its tunnel edge's origins as they are.
func perBackend(s wire.ServiceStatus, rtt func(service, backend string) float64, tunnelled []wire.OriginLoad) wire.ServiceLoad {
	l := wire.ServiceLoad{Name: s.Name, Announced: s.Announced, NewFlowsPerSecond: s.NewFlowsPerSecond, Origins: tunnelled}
	for _, b := range s.Backends {
		l.Backends = append(l.Backends, wire.BackendLoad{Address: b.Address, State: b.State, Healthy: b.Health.Up,
			NewFlowsPerSecond: b.NewFlowsPerSecond, RTTMilliseconds: rtt(s.Name, b.Address)})
	}
	return l
}

// The controller observes the same fleet alike from records of one entry per backend
// (the release before), of one entry per origin (this one's), and from a fleet of
// both: loads, health, demand, and each site's RTT to each origin, with origins
// reached by backends and by tunnel, backends down, unmeasured or idle.
func TestObservePerOriginAsPerBackend(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 4))
	spec := wire.ServiceSpec{Name: "web"}
	for j := range 6 {
		spec.Origins = append(spec.Origins, wire.OriginSpec{Name: fmt.Sprintf("o%d", j), Capacity: uint32(100 * (j + 1)), Tunnel: j == 5})
		for k := range 3 {
			if j < 5 {
				spec.Backends = append(spec.Backends, wire.BackendSpec{Address: fmt.Sprintf("10.0.%d.%d", j, k+1), Origin: spec.Origins[j].Name})
			}
		}
	}
	var old, cur, mixed []wire.NodeRecord
	for n := range 40 {
		s := wire.ServiceStatus{Name: "web", Announced: true, NewFlowsPerSecond: float64(rng.IntN(1000)) / 7, Spec: spec}
		rtts := map[string]float64{}
		for _, b := range spec.Backends {
			up := rng.IntN(5) > 0
			s.Backends = append(s.Backends, wire.BackendStatus{Address: b.Address, State: wire.BackendUp, Health: wire.BackendHealth{Up: up},
				NewFlowsPerSecond: float64(rng.IntN(300)) / 3})
			if rng.IntN(4) > 0 {
				rtts[b.Address] = 1 + rng.Float64()*200
			}
		}
		rtt := func(_, backend string) float64 { return rtts[backend] }
		tunnelled := []wire.OriginLoad{{Name: "o5", Healthy: rng.IntN(3) > 0, NewFlowsPerSecond: float64(rng.IntN(100)), RTTMilliseconds: rng.Float64() * 50},
			{Name: "gone", Healthy: true, NewFlowsPerSecond: 5, RTTMilliseconds: 1}} // not an origin of the service
		name, site := fmt.Sprintf("n%02d", n), fmt.Sprintf("site%d", n%12)
		listed, _ := RecordServices([]wire.ServiceStatus{s}, rtt, map[string][]wire.OriginLoad{"web": tunnelled})
		o := wire.NodeRecord{Name: name, Site: site, Services: []wire.ServiceLoad{perBackend(s, rtt, tunnelled)}}
		c := wire.NodeRecord{Name: name, Site: site, Services: listed}
		if len(c.Services[0].Backends) != 0 || len(c.Services[0].Origins) > len(spec.Origins) {
			t.Fatalf("a per-origin entry of %d backends and %d origins", len(c.Services[0].Backends), len(c.Services[0].Origins))
		}
		// through JSON, as the controller reads them
		for _, r := range []*wire.NodeRecord{&o, &c} {
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			*r = wire.NodeRecord{}
			if err := json.Unmarshal(data, r); err != nil {
				t.Fatal(err)
			}
		}
		old, cur = append(old, o), append(cur, c)
		mixed = append(mixed, map[bool]wire.NodeRecord{true: o, false: c}[n%3 == 0])
	}
	want, ok := Observe(spec, old)
	if !ok || len(want.Sites) != 12 {
		t.Fatalf("observed %d sites (%v)", len(want.Sites), ok)
	}
	for what, recs := range map[string][]wire.NodeRecord{"per origin": cur, "a fleet of both": mixed} {
		got, ok := Observe(spec, recs)
		if !ok || !sameObservation(got, want) {
			t.Errorf("%s: observed\n%+v\nper backend:\n%+v", what, got, want)
		}
	}
}

// sameObservation compares two observations, their figures to 1e-9: a sum of the same
// numbers in another grouping may differ in its last bits.
func sameObservation(a, b steer.Observation) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*max(1, math.Abs(x), math.Abs(y)) }
	if len(a.Origins) != len(b.Origins) || len(a.Sites) != len(b.Sites) {
		return false
	}
	for i, o := range a.Origins {
		p := b.Origins[i]
		if o.Name != p.Name || o.Capacity != p.Capacity || o.Healthy != p.Healthy || !near(o.Load, p.Load) {
			return false
		}
	}
	for i, s := range a.Sites {
		p := b.Sites[i]
		if s.Name != p.Name || !near(s.Demand, p.Demand) || len(s.RTT) != len(p.RTT) {
			return false
		}
		for o, d := range s.RTT {
			e, ok := p.RTT[o]
			if !ok || math.Abs(float64(d-e)) > 1 { // a nanosecond: the rounding of a Duration
				return false
			}
		}
	}
	return true
}
