package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/steer"
	"github.com/manifoldlb/manifold/internal/store"
)

func weighted(origin string, weights ...uint32) []config.Backend {
	var out []config.Backend
	for i, w := range weights {
		out = append(out, config.Backend{Address: netip.AddrFrom4([4]byte{10, byte(len(origin)), 0, byte(i + 1)}), Weight: w, Origin: origin})
	}
	return out
}

func weightsOf(bs []config.Backend) []uint32 {
	var out []uint32
	for _, b := range bs {
		out = append(out, b.Weight)
	}
	return out
}

// A backend weighs its origin's share times its part of the origin's weights; draining
// stays draining; no share, no weight; a tiny share still weighs; no shares for the site,
// or none of the service's origins, leave the weights as configured.
func TestSteeredWeights(t *testing.T) {
	origins := []config.Origin{{Name: "us", Capacity: 200}, {Name: "eu", Capacity: 1000}}
	backends := append(weighted("us", 1, 3), weighted("eu", 1, 0)...)
	for _, c := range []struct {
		name    string
		origins []config.Origin
		shares  wire.Shares
		want    []uint32
	}{
		{"half and half", origins, wire.Shares{"sjc": {"us": 0.5, "eu": 0.5}}, []uint32{1250, 3750, 5000, 0}},
		{"all to eu", origins, wire.Shares{"sjc": {"us": 0, "eu": 1}}, []uint32{0, 0, 10000, 0}},
		{"a crumb to us", origins, wire.Shares{"sjc": {"us": 0.00001, "eu": 0.99999}}, []uint32{1, 1, 10000, 0}},
		{"other site only", origins, wire.Shares{"ams": {"us": 1, "eu": 0}}, []uint32{1, 3, 1, 0}},
		{"origins the service no longer has", origins, wire.Shares{"sjc": {"asia": 1}}, []uint32{1, 3, 1, 0}},
		{"no origins", nil, wire.Shares{"sjc": {"us": 1, "eu": 0}}, []uint32{1, 3, 1, 0}},
	} {
		svc := config.Service{Name: "web", Origins: c.origins, Backends: backends}
		got := steered([]config.Service{svc}, "sjc", map[string]wire.Steering{"web": {Shares: c.shares}})
		if w := weightsOf(got[0].Backends); !reflect.DeepEqual(w, c.want) {
			t.Errorf("%s: weights %v, want %v", c.name, w, c.want)
		}
		if w := weightsOf(backends); !reflect.DeepEqual(w, []uint32{1, 3, 1, 0}) {
			t.Fatalf("%s: the services given were changed: %v", c.name, w)
		}
	}
}

// An origin reached by tunnel weighs its share on the backends' scale (the weight of
// the node's local pseudo-backend); no share, weight 0; no shares for the site, its
// configured weight.
func TestSteeredTunnelledOriginWeight(t *testing.T) {
	origins := []config.Origin{{Name: "dc", Capacity: 100}, {Name: "home", Capacity: 50, Tunnel: true, Weight: 1}}
	for _, c := range []struct {
		name   string
		shares wire.Shares
		want   uint32 // home's weight
		dc     []uint32
	}{
		{"half and half", wire.Shares{"sjc": {"dc": 0.5, "home": 0.5}}, 5000, []uint32{2500, 2500}},
		{"home none", wire.Shares{"sjc": {"dc": 1, "home": 0}}, 0, []uint32{5000, 5000}},
		{"home all", wire.Shares{"sjc": {"dc": 0, "home": 1}}, 10000, []uint32{0, 0}},
		{"other site only", wire.Shares{"ams": {"home": 1}}, 1, []uint32{1, 1}},
	} {
		svc := config.Service{Name: "web", Forwarding: config.IPIP, Origins: origins, Backends: weighted("dc", 1, 1)}
		got := steered([]config.Service{svc}, "sjc", map[string]wire.Steering{"web": {Shares: c.shares}})
		if w := got[0].Origins[1].Weight; w != c.want {
			t.Errorf("%s: home weighs %d, want %d", c.name, w, c.want)
		}
		if w := weightsOf(got[0].Backends); !reflect.DeepEqual(w, c.dc) {
			t.Errorf("%s: dc's backends weigh %v, want %v", c.name, w, c.dc)
		}
		if origins[1].Weight != 1 {
			t.Fatalf("%s: the origins given were changed: %+v", c.name, origins)
		}
	}
}

func record(name, site string, demand float64, backends ...wire.BackendLoad) wire.NodeRecord {
	return wire.NodeRecord{Name: name, Site: site, Services: []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: demand, Backends: backends}}}
}

var webSpec = wire.ServiceSpec{Name: "web", Origins: []wire.OriginSpec{{Name: "us", Capacity: 200}, {Name: "eu", Capacity: 1000}},
	Backends: []wire.BackendSpec{{Address: "10.1.0.11", Origin: "us"}, {Address: "10.2.0.11", Origin: "eu"}}}

// Demand sums per site, load per origin over every node, an origin is healthy when a
// node sees one of its backends healthy.
func TestObserve(t *testing.T) {
	recs := []wire.NodeRecord{
		record("n1", "sjc", 300, wire.BackendLoad{Address: "10.1.0.11", Healthy: true, NewFlowsPerSecond: 200}, wire.BackendLoad{Address: "10.2.0.11", NewFlowsPerSecond: 100}),
		record("n2", "sjc", 100, wire.BackendLoad{Address: "10.1.0.11", Healthy: true, NewFlowsPerSecond: 100}, wire.BackendLoad{Address: "10.2.0.11", NewFlowsPerSecond: 0}),
		record("n3", "ams", 50, wire.BackendLoad{Address: "10.1.0.11", NewFlowsPerSecond: 50}, wire.BackendLoad{Address: "10.2.0.11", NewFlowsPerSecond: 0}),
	}
	obs, ok := Observe(webSpec, recs)
	rtt := map[string]time.Duration{"us": 0, "eu": 0}
	want := steer.Observation{
		Origins: []steer.Origin{{Name: "us", Capacity: 200, Load: 350, Healthy: true}, {Name: "eu", Capacity: 1000, Load: 100}},
		Sites:   []steer.Site{{Name: "ams", Demand: 50, RTT: rtt}, {Name: "sjc", Demand: 400, RTT: rtt}},
	}
	if !ok || !reflect.DeepEqual(obs, want) {
		t.Errorf("got %+v %v\nwant %+v", obs, ok, want)
	}
	if _, ok := Observe(webSpec, []wire.NodeRecord{{Name: "n4", Site: "sjc"}}); ok {
		t.Error("a service no node carries is observed")
	}
}

// A site's RTT to an origin is the mean over its nodes of each node's mean over the
// origin's healthy backends; unhealthy or unmeasured backends do not count, an origin
// the site measured nothing of is unreachable from it, and a site that measured
// nothing at all has every origin at 0 (the origins' order decides).
func TestObserveRTT(t *testing.T) {
	spec := webSpec
	spec.Backends = append(slices.Clone(spec.Backends), wire.BackendSpec{Address: "10.1.0.12", Origin: "us"}, wire.BackendSpec{Address: "10.2.0.12", Origin: "eu"})
	us := func(a string, healthy bool, ms float64) wire.BackendLoad {
		return wire.BackendLoad{Address: a, Healthy: healthy, RTTMilliseconds: ms}
	}
	recs := []wire.NodeRecord{
		// sjc: n1 sees us at (10+20)/2 = 15 ms, n2 at 25 ms (its second us backend is down:
		// the 900 ms of its failing checks is no RTT); eu at 150 and 170 ms
		record("n1", "sjc", 10, us("10.1.0.11", true, 10), us("10.1.0.12", true, 20), us("10.2.0.11", true, 150), us("10.2.0.12", true, 150)),
		record("n2", "sjc", 10, us("10.1.0.11", true, 25), us("10.1.0.12", false, 900), us("10.2.0.11", true, 170), us("10.2.0.12", true, 0)),
		// ams: eu measured, us not (its backends are down from here although up from sjc)
		record("n3", "ams", 10, us("10.1.0.11", false, 0), us("10.1.0.12", false, 0), us("10.2.0.11", true, 12), us("10.2.0.12", true, 12)),
		// fra: a node whose checks measured nothing yet
		record("n4", "fra", 10, us("10.1.0.11", true, 0), us("10.2.0.11", true, 0)),
	}
	obs, ok := Observe(spec, recs)
	if !ok {
		t.Fatal("not observed")
	}
	want := map[string]map[string]time.Duration{
		"sjc": {"us": 20 * time.Millisecond, "eu": 160 * time.Millisecond},
		"ams": {"eu": 12 * time.Millisecond},
		"fra": {"us": 0, "eu": 0},
	}
	got := map[string]map[string]time.Duration{}
	for _, s := range obs.Sites {
		got[s.Name] = s.RTT
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RTT per site %v, want %v", got, want)
	}
	// us, listed first and healthy, is unreachable from ams: all of ams goes to eu
	d := steer.Manifold{}.Decide(time.Now(), obs, nil)
	if sh := d.Shares()["ams"]; sh["eu"] != 1 {
		t.Errorf("ams shares %v, want all on eu", sh)
	}
}

const steeredWeb = "name: web\nvip: 198.51.100.10\nport: 80\norigins: [{name: us, capacity: 200}, {name: eu, capacity: 1000}]\n" +
	"backends: [{address: 10.1.0.11, origin: us}, {address: 10.2.0.11, origin: eu}]\n"

// putRecord publishes a node's record as a node does, alive under a lease.
func putRecord(t *testing.T, cli *clientv3.Client, r wire.NodeRecord) {
	t.Helper()
	ctx := context.Background()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(r)
	k := newKeys(prefix)
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut(k.node(r.Name), string(data)), clientv3.OpPut(k.alive(r.Name), "", clientv3.WithLease(lease.ID))).Commit(); err != nil {
		t.Fatal(err)
	}
}

// following runs ctl's view of the fleet (which Run runs) for a test that runs its
// rounds itself.
func following(t *testing.T, ctl *Controller) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ctl.view.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// caughtUp waits until ctl's view holds every write made to the store so far.
func caughtUp(t *testing.T, cli *clientv3.Client, ctl *Controller) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ctl.view.caughtUp(ctx, storeRevision(t, cli)); err != nil {
		t.Fatalf("the controller's view is not at the store's revision: %v", err)
	}
}

// nextSteering waits for the next write of a service's shares.
func nextSteering(t *testing.T, watch clientv3.WatchChan) wire.Steering {
	t.Helper()
	select {
	case resp := <-watch:
		for _, ev := range resp.Events {
			var st wire.Steering
			if err := json.Unmarshal(ev.Kv.Value, &st); err != nil {
				t.Fatal(err)
			}
			return st
		}
		t.Fatalf("watch: %v", resp.Err())
	case <-time.After(10 * time.Second):
		t.Fatal("no shares written")
	}
	return wire.Steering{}
}

// Two controllers: one leads and writes the shares decided from the nodes' records;
// the leader dies (its client closes, its lease runs out) and the standby takes over,
// going on from the shares in force.
func TestControllerLeadsAndFailsOver(t *testing.T) {
	c := startEtcd(t, 1)
	cli := c.client()
	if err := Import(context.Background(), cli, prefix, []store.ServiceDoc{{Name: "web", YAML: []byte(steeredWeb)}}, false); err != nil {
		t.Fatal(err)
	}
	putRecord(t, cli, record("n1", "sjc", 400, wire.BackendLoad{Address: "10.1.0.11", Healthy: true, NewFlowsPerSecond: 400}, wire.BackendLoad{Address: "10.2.0.11", Healthy: true}))
	watch := cli.Watch(context.Background(), newKeys(prefix).steeringOf("web"))

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctls := map[string]*Controller{}
	clients := map[string]*clientv3.Client{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, name := range []string{"a", "b"} {
		clients[name] = c.client()
		ctl := NewController(clients[name], prefix, name, 50*time.Millisecond, 2*time.Second, log)
		ctls[name] = ctl
		wg.Go(func() { _ = ctl.Run(ctx) })
	}

	first := nextSteering(t, watch)
	leader, standby := first.Leader, map[string]string{"a": "b", "b": "a"}[first.Leader]
	if leader == "" || ctls[standby].Leading() || !ctls[leader].Leading() {
		t.Fatalf("leader %q; a leading %v, b leading %v", leader, ctls["a"].Leading(), ctls["b"].Leading())
	}
	// 400/s at sjc, us takes 200: half spills to eu (at equal RTT, in the origins' order)
	if got := first.Shares["sjc"]; math.Abs(got["us"]-0.5) > 1e-9 || math.Abs(got["eu"]-0.5) > 1e-9 || first.Round != 1 {
		t.Fatalf("first round: %+v", first)
	}
	if len(first.Decision.Sites) != 1 || first.Decision.Sites[0].Shares[0].Reason == "" {
		t.Fatalf("the decision has no explanation: %+v", first.Decision)
	}

	if err := clients[leader].Close(); err != nil { // the leader dies: its lease is no longer kept alive
		t.Fatal(err)
	}
	var took wire.Steering
	for took.Leader != standby {
		took = nextSteering(t, watch)
	}
	if !reflect.DeepEqual(took.Shares, first.Shares) || took.Round <= first.Round {
		t.Fatalf("the standby moved the shares: %+v after %+v", took, first)
	}
	// the count follows the write: read it once the standby's next round is written,
	// which a change of the demand makes (a round whose shares stay writes nothing)
	putRecord(t, cli, record("n1", "sjc", 300, wire.BackendLoad{Address: "10.1.0.11", Healthy: true, NewFlowsPerSecond: 300}, wire.BackendLoad{Address: "10.2.0.11", Healthy: true}))
	next := nextSteering(t, watch)
	if next.Leader != standby || !ctls[standby].Leading() || ctls[standby].Rounds() == 0 {
		t.Fatalf("the standby wrote but does not say it leads")
	}
	// what it says it wrote (its metrics): its first round or a later one
	if w := ctls[standby].Written(); len(w) != 1 || w[0].Leader != standby || w[0].Round < took.Round || w[0].Decision.Sites == nil {
		t.Fatalf("the new leader says it wrote %+v, after its round %d", w, took.Round)
	}
}

// A round writes the services whose shares changed, and only those: all of them in
// the term's first round (the leader they name changes), none while nothing moves,
// and only api's while a change of api's demand moves its shares to their target.
func TestControllerWritesWhatChanged(t *testing.T) {
	c := startEtcd(t, 1)
	cli := c.client()
	api := strings.Replace(steeredWeb, "name: web", "name: api", 1)
	if err := Import(context.Background(), cli, prefix, []store.ServiceDoc{{Name: "web", YAML: []byte(steeredWeb)}, {Name: "api", YAML: []byte(api)}}, false); err != nil {
		t.Fatal(err)
	}
	// both services at 100/s per site: all on us (200/s), the first of equal RTTs
	both := func(name, site string, apiDemand float64) wire.NodeRecord {
		r := record(name, site, 100, wire.BackendLoad{Address: "10.1.0.11", Healthy: true}, wire.BackendLoad{Address: "10.2.0.11", Healthy: true})
		r.Services = append(r.Services, r.Services[0])
		r.Services[1].Name, r.Services[1].NewFlowsPerSecond = "api", apiDemand
		return r
	}
	putRecord(t, cli, both("n1", "sjc", 100))
	putRecord(t, cli, both("n2", "ams", 100))
	ctl := NewController(cli, prefix, "a", time.Second, 2*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	always := clientv3.Compare(clientv3.CreateRevision(prefix+"/no such key"), "=", 0)
	following(t, ctl)
	round := func() RoundStats {
		t.Helper()
		caughtUp(t, cli, ctl)
		if err := ctl.round(context.Background(), time.Now(), always); err != nil {
			t.Fatal(err)
		}
		st := ctl.LastRound()
		if st.Records != 2 || st.Services != 2 || (st.Bytes == 0) != (st.Writes == 0) {
			t.Fatalf("a round read %d records, decided %d services and wrote %d keys of %d bytes", st.Records, st.Services, st.Writes, st.Bytes)
		}
		return st
	}
	if st := round(); st.Writes != 2 {
		t.Fatalf("the term's first round wrote %d services, want both", st.Writes)
	}
	if st := round(); st.Writes != 0 {
		t.Fatalf("a round with nothing changed wrote %d services", st.Writes)
	}
	// the law gave both back their shares: while nothing changes, neither is decided again
	if st := round(); st.Writes != 0 || st.Settled != 2 {
		t.Fatalf("a second round with nothing changed wrote %d services, left %d as they were, want 0 and 2", st.Writes, st.Settled)
	}
	putRecord(t, cli, both("n2", "ams", 300)) // api: 400/s for us's 200: half spills
	moved := 0
	for st := round(); st.Writes > 0; st = round() {
		if st.Writes != 1 || st.Settled != 1 {
			t.Fatalf("api's demand moved, and a round wrote %d services and left %d as they were, want 1 and web", st.Writes, st.Settled)
		}
		if moved++; moved > 20 {
			t.Fatal("api's shares still move after 20 rounds")
		}
	}
	var st wire.Steering
	resp, err := cli.Get(context.Background(), newKeys(prefix).steeringOf("web"))
	if err != nil || len(resp.Kvs) != 1 || json.Unmarshal(resp.Kvs[0].Value, &st) != nil || st.Round != 1 {
		t.Fatalf("web's shares: %v %v, want those of the first round alone", resp, err)
	}
	if moved == 0 {
		t.Fatal("api's shares did not move")
	}
	// unchanged shares are written again once their decision is decisionRefresh old, so
	// that the demand and loads it shows are of now: one service a round (the quota of
	// two services), web's first, the older
	later := time.Now().Add(decisionRefresh)
	for _, want := range []string{"web", "api"} {
		caughtUp(t, cli, ctl)
		if err := ctl.round(context.Background(), later, always); err != nil {
			t.Fatal(err)
		}
		if st := ctl.LastRound(); st.Writes != 1 || st.Refreshed != 1 || ctl.mine[want].st.At != later.UTC().Format(time.RFC3339Nano) {
			t.Fatalf("a round %s after the last writes wrote %d services, refreshed %d, want %s's decision alone", decisionRefresh, st.Writes, st.Refreshed, want)
		}
	}
	// a round that decides api for a change of its demand leaves web's refresh, due, to
	// a later round; once web's is overdue, a round busy with api refreshes it too
	for _, step := range []struct {
		apiDemand float64
		at        time.Time
		refreshed bool
	}{{200, later.Add(decisionRefresh), false}, {250, later.Add(decisionRefresh + refreshDefer*time.Second), true}} {
		putRecord(t, cli, both("n2", "ams", step.apiDemand))
		caughtUp(t, cli, ctl)
		if err := ctl.round(context.Background(), step.at, always); err != nil {
			t.Fatal(err)
		}
		st := ctl.LastRound()
		if webAt := ctl.mine["web"].st.At; st.Services-st.Settled < 1 || (webAt == step.at.UTC().Format(time.RFC3339Nano)) != step.refreshed || (st.Refreshed == 1) != step.refreshed {
			t.Fatalf("api's demand changed, web's decision %v old: decided %d services, refreshed %d, web's decision of %s; want web refreshed: %v",
				step.at.Sub(later), st.Services-st.Settled, st.Refreshed, webAt, step.refreshed)
		}
	}
}

// The services whose decisions come due together (all of them after a term's first
// round) are refreshed over refreshRounds rounds, the oldest first, at most
// refreshQuota a round; no decision in force gets older than the refresh age and
// refreshRounds intervals more; and every service is refreshed, again and again.
// The rounds run on a clock of the test's (each round's now), one interval apart.
func TestControllerSpreadsRefreshes(t *testing.T) {
	c := startEtcd(t, 1)
	cli := c.client()
	const n = 25 // a quota of 3: the last round of a spread refreshes 1
	var docs []store.ServiceDoc
	r := wire.NodeRecord{Name: "n1", Site: "sjc"}
	for i := range n {
		name := fmt.Sprintf("s%02d", i)
		docs = append(docs, store.ServiceDoc{Name: name, YAML: []byte(strings.Replace(steeredWeb, "name: web", "name: "+name, 1))})
		r.Services = append(r.Services, wire.ServiceLoad{Name: name, NewFlowsPerSecond: 100,
			Backends: []wire.BackendLoad{{Address: "10.1.0.11", Healthy: true}, {Address: "10.2.0.11", Healthy: true}}})
	}
	if err := Import(context.Background(), cli, prefix, docs, false); err != nil {
		t.Fatal(err)
	}
	putRecord(t, cli, r)
	const interval = time.Second
	ctl := NewController(cli, prefix, "a", interval, 2*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	always := clientv3.Compare(clientv3.CreateRevision(prefix+"/no such key"), "=", 0)
	following(t, ctl)
	quota, bound := refreshQuota(n), ctl.refreshAge()+(refreshDefer+refreshRounds)*interval
	if quota != 3 {
		t.Fatalf("the quota of %d services is %d, want 3", n, quota)
	}
	start := time.Now()
	refreshed := map[string]int{}
	for i := range 60 { // six refresh periods
		now := start.Add(time.Duration(i) * interval)
		caughtUp(t, cli, ctl)
		if err := ctl.round(context.Background(), now, always); err != nil {
			t.Fatal(err)
		}
		st := ctl.LastRound()
		if i == 0 {
			if st.Writes != n {
				t.Fatalf("the term's first round wrote %d services, want all %d", st.Writes, n)
			}
			continue
		}
		if st.Refreshed > quota || st.Writes > quota || st.Writes != st.Refreshed {
			t.Fatalf("round %d (%v after the first) refreshed %d services and wrote %d: want at most the quota, %d, and nothing else written",
				i, now.Sub(start), st.Refreshed, st.Writes, quota)
		}
		// the second round finds every service at its fixed point; from then on a round
		// decides the services it refreshes alone (a refreshed one is not decided
		// again the round after)
		if decided := st.Services - st.Settled; i >= 2 && decided != st.Refreshed {
			t.Fatalf("round %d decided %d services and refreshed %d: want those refreshed alone decided", i, decided, st.Refreshed)
		}
		written := ctl.Written()
		if len(written) != n {
			t.Fatalf("round %d: %d services in force, want %d", i, len(written), n)
		}
		for _, w := range written {
			at, err := time.Parse(time.RFC3339Nano, w.At)
			if err != nil {
				t.Fatal(err)
			}
			if age := now.Sub(at); age > bound {
				t.Fatalf("round %d: %s's decision is %v old, above the bound %v", i, w.Service, age, bound)
			}
			if !at.Equal(start) && now.Equal(at) {
				refreshed[w.Service]++
			}
		}
	}
	for i := range n {
		// first due 10 s in, then every 10 s: 5 refreshes in 60 rounds, 4 for the last
		// ones of the first spread
		if name := fmt.Sprintf("s%02d", i); refreshed[name] < 4 {
			t.Errorf("%s was refreshed %d times in 60 rounds, want 4 at least", name, refreshed[name])
		}
	}
}

// A service whose shares and decision outgrow what one write carries is written with
// its shares and origins, the sites' rows left out and the note saying so; services
// go in as many transactions as their sizes need.
func TestControllerWritesWithinBounds(t *testing.T) {
	c := startEtcd(t, 1)
	cli := c.client()
	api := strings.Replace(steeredWeb, "name: web", "name: api", 1)
	if err := Import(context.Background(), cli, prefix, []store.ServiceDoc{{Name: "web", YAML: []byte(steeredWeb)}, {Name: "api", YAML: []byte(api)}}, false); err != nil {
		t.Fatal(err)
	}
	r := record("n1", "sjc", 400, wire.BackendLoad{Address: "10.1.0.11", Healthy: true}, wire.BackendLoad{Address: "10.2.0.11", Healthy: true})
	r.Services = append(r.Services, r.Services[0])
	r.Services[1].Name = "api"
	putRecord(t, cli, r)
	defer func(was int) { maxWriteBytes = was }(maxWriteBytes)
	maxWriteBytes = 700 // below one service's document (841 bytes), above its shares and origins (607)
	ctl := NewController(cli, prefix, "a", time.Second, 2*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	always := clientv3.Compare(clientv3.CreateRevision(prefix+"/no such key"), "=", 0)
	following(t, ctl)
	caughtUp(t, cli, ctl)
	if err := ctl.round(context.Background(), time.Now(), always); err != nil {
		t.Fatal(err)
	}
	if st := ctl.LastRound(); st.Writes != 2 {
		t.Fatalf("wrote %d keys, want both services", st.Writes)
	}
	resp, err := cli.Get(context.Background(), newKeys(prefix).steering(), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("the store holds %v (%v), want both services' shares", resp, err)
	}
	for _, kv := range resp.Kvs {
		var st wire.Steering
		if err := json.Unmarshal(kv.Value, &st); err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.Shares["sjc"]["us"]-0.5) > 1e-9 || len(st.Decision.Origins) != 2 || len(st.Decision.Sites) != 0 ||
			!strings.Contains(st.Decision.Note, "the sites' rows left out") || len(kv.Value) > maxWriteBytes {
			t.Fatalf("%s: %d bytes: %s", kv.Key, len(kv.Value), kv.Value)
		}
	}
}

// A node applies its site's shares as weights, at once, and keeps them; the shares of
// another site change nothing for it.
func TestSourceAppliesShares(t *testing.T) {
	cli := startEtcd(t, 1).client()
	if err := Import(context.Background(), cli, prefix, []store.ServiceDoc{{Name: "web", YAML: []byte(steeredWeb)}}, false); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, cli, "a", nil) // its site is its name: a
	write := func(st wire.Steering) {
		data, _ := json.Marshal(st)
		if _, err := cli.Put(context.Background(), newKeys(prefix).steeringOf("web"), string(data)); err != nil {
			t.Fatal(err)
		}
	}
	write(wire.Steering{Service: "web", Round: 1, Shares: wire.Shares{"a": {"us": 0.25, "eu": 0.75}}})
	u := n.sink.next(t, "the shares applied", func(reconcile.Update) bool { return true })
	if w := weightsOf(u.Services[0].Backends); !reflect.DeepEqual(w, []uint32{2500, 7500}) {
		t.Fatalf("weights %v", w)
	}
	if got := n.Steering(); len(got) != 1 || got[0].Round != 1 {
		t.Fatalf("the node's view of the shares: %+v", got)
	}
	write(wire.Steering{Service: "web", Round: 2, Shares: wire.Shares{"a": {"us": 0.25, "eu": 0.75}, "b": {"us": 1}}})
	write(wire.Steering{Service: "web", Round: 3, Shares: wire.Shares{"a": {"us": 0, "eu": 1}}})
	u = n.sink.next(t, "the next shares applied", func(reconcile.Update) bool { return true })
	if w := weightsOf(u.Services[0].Backends); !reflect.DeepEqual(w, []uint32{0, 10000}) {
		t.Fatalf("weights %v after a change of another site's only, then of its own", w)
	}
}

// tunnelRecord is a node's record of a tunnel service whose origins its tunnel edge
// reaches through connectors.
func tunnelRecord(name, site string, demand float64, origins ...wire.OriginLoad) wire.NodeRecord {
	return wire.NodeRecord{Name: name, Site: site, Services: []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: demand, Backends: []wire.BackendLoad{}, Origins: origins}}}
}

var tunnelSpec = wire.ServiceSpec{Name: "web", Forwarding: "tunnel", Origins: []wire.OriginSpec{{Name: "home", Capacity: 100}, {Name: "office", Capacity: 100}}}

// A tunnelled origin is observed as a routed one: its load the streams the edges
// opened to it, healthy while a connector of it is attached to some edge, each site's
// RTT the mean of its edges' round trips on its tunnels; an origin the service does
// not have is left out. One of the origins losing its connectors everywhere moves its
// share at once.
func TestObserveTunnelledOrigins(t *testing.T) {
	up := func(o string, load, ms float64) wire.OriginLoad {
		return wire.OriginLoad{Name: o, Healthy: true, NewFlowsPerSecond: load, RTTMilliseconds: ms}
	}
	recs := []wire.NodeRecord{
		tunnelRecord("n1", "ams", 40, up("home", 30, 4), up("office", 10, 40), up("attic", 5, 1)),
		tunnelRecord("n2", "ams", 20, up("home", 20, 6), up("office", 0, 60)),
		tunnelRecord("n3", "nyc", 30, up("home", 0, 50), up("office", 30, 8)),
	}
	obs, ok := Observe(tunnelSpec, recs)
	want := steer.Observation{
		Origins: []steer.Origin{{Name: "home", Capacity: 100, Load: 50, Healthy: true}, {Name: "office", Capacity: 100, Load: 40, Healthy: true}},
		Sites: []steer.Site{
			{Name: "ams", Demand: 60, RTT: map[string]time.Duration{"home": 5 * time.Millisecond, "office": 50 * time.Millisecond}},
			{Name: "nyc", Demand: 30, RTT: map[string]time.Duration{"home": 50 * time.Millisecond, "office": 8 * time.Millisecond}},
		},
	}
	if !ok || !reflect.DeepEqual(obs, want) {
		t.Fatalf("got %+v %v\nwant %+v", obs, ok, want)
	}
	if sh := (steer.Manifold{}).Decide(time.Now(), obs, nil).Shares(); sh["ams"]["home"] != 1 || sh["nyc"]["office"] != 1 {
		t.Errorf("each site not on its closest origin: %v", sh)
	}

	// office's connectors detached from every edge: its records say unhealthy, no RTT
	gone := wire.OriginLoad{Name: "office"}
	recs = []wire.NodeRecord{
		tunnelRecord("n1", "ams", 40, up("home", 40, 4), gone),
		tunnelRecord("n3", "nyc", 30, up("home", 0, 50), gone),
	}
	obs, _ = Observe(tunnelSpec, recs)
	if obs.Origins[1].Healthy {
		t.Fatalf("office without a connector observed healthy: %+v", obs.Origins)
	}
	if sh := (steer.Manifold{}).Decide(time.Now(), obs, steer.Shares{"ams": {"home": 1}, "nyc": {"office": 1}}).Shares(); sh["nyc"]["home"] != 1 || sh["nyc"]["office"] != 0 {
		t.Errorf("nyc's share not moved off office, whose connectors are gone: %v", sh)
	}
}

const tunnelledWeb = "name: web\nvip: 198.51.100.10\nport: 80\nforwarding: tunnel\norigins: [{name: home, capacity: 100}, {name: office, capacity: 100}]\n"

// The live controller, on a real etcd, steers a tunnel service from the records the
// edges publish: each site to the origin its edges are closest to; when the records
// say an origin's connectors are gone, its share moves in the next round.
func TestControllerSteersTunnelledOrigins(t *testing.T) {
	c := startEtcd(t, 1)
	cli := c.client()
	if err := Import(context.Background(), cli, prefix, []store.ServiceDoc{{Name: "web", YAML: []byte(tunnelledWeb)}}, false); err != nil {
		t.Fatal(err)
	}
	up := func(o string, ms float64) wire.OriginLoad {
		return wire.OriginLoad{Name: o, Healthy: true, NewFlowsPerSecond: 10, RTTMilliseconds: ms}
	}
	putRecord(t, cli, tunnelRecord("n1", "ams", 20, up("home", 4), up("office", 40)))
	putRecord(t, cli, tunnelRecord("n2", "nyc", 20, up("home", 50), up("office", 8)))
	watch := cli.Watch(context.Background(), newKeys(prefix).steeringOf("web"))
	ctl := NewController(c.client(), prefix, "a", 50*time.Millisecond, 2*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() { _ = ctl.Run(ctx); close(done) }()

	first := nextSteering(t, watch)
	if first.Shares["ams"]["home"] != 1 || first.Shares["nyc"]["office"] != 1 {
		t.Fatalf("first round: %+v", first.Shares)
	}
	var office *wire.SteeringOrigin
	for i, o := range first.Decision.Origins {
		if o.Origin == "office" {
			office = &first.Decision.Origins[i]
		}
	}
	if office == nil || !office.Healthy || office.Load != 20 || office.Capacity != 100 {
		t.Fatalf("the decision's office: %+v", first.Decision.Origins)
	}

	putRecord(t, cli, tunnelRecord("n2", "nyc", 20, up("home", 50), wire.OriginLoad{Name: "office"}))
	putRecord(t, cli, tunnelRecord("n1", "ams", 20, up("home", 4), wire.OriginLoad{Name: "office"}))
	for {
		st := nextSteering(t, watch)
		if st.Shares["nyc"]["office"] == 0 && st.Shares["nyc"]["home"] == 1 {
			break
		}
		if st.Round > first.Round+20 {
			t.Fatalf("office's connectors gone 20 rounds ago, nyc's shares still %v", st.Shares["nyc"])
		}
	}
}
