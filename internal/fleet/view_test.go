package fleet

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
)

// The steering controller's view of the fleet follows the store's records from its
// watch: a changed record is decoded once and shows; one rewritten with the same
// bytes is not decoded again; a deleted record goes; a node whose lease expires is no
// longer alive and its record is left out; a record of a newer format is passed by,
// and a record names the node of its key, whatever it says.
func TestViewFollowsTheRecords(t *testing.T) {
	cli := startEtcd(t, 1).client()
	v := newFleetView(cli, newKeys(prefix), clock.Real(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { v.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	k := newKeys(prefix)
	putRaw := func(key string, r wire.NodeRecord, opts ...clientv3.OpOption) {
		t.Helper()
		data, _ := json.Marshal(r)
		if _, err := cli.Put(context.Background(), key, string(data), opts...); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() (fleetSnapshot, map[string]float64) {
		t.Helper()
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := v.caughtUp(wctx, storeRevision(t, cli)); err != nil {
			t.Fatal(err)
		}
		s, err := v.snapshot(wctx)
		if err != nil {
			t.Fatal(err)
		}
		demand := map[string]float64{}
		for _, r := range s.records {
			demand[r.Name] = r.Services[0].NewFlowsPerSecond
		}
		return s, demand
	}

	putRecord(t, cli, record("n1", "sjc", 100))
	putRecord(t, cli, record("n2", "sjc", 200))
	s, demand := snapshot()
	if len(demand) != 2 || demand["n1"] != 100 || demand["n2"] != 200 || s.decoded != 2 {
		t.Fatalf("records %v, %d decoded", demand, s.decoded)
	}

	// web's generation: what its observation stands on
	gen := func() uint64 {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.gen["web"]
	}
	g := gen()
	putRaw(k.node("n1"), record("n1", "sjc", 100)) // the same bytes again
	if s, demand = snapshot(); s.decoded != 0 || demand["n1"] != 100 || gen() != g {
		t.Fatalf("an unchanged record: %d decoded, records %v, web's generation %d → %d", s.decoded, demand, g, gen())
	}
	other := record("n1", "sjc", 100)
	other.Addresses = []string{"10.0.0.1"} // changed, but not web's entry
	putRaw(k.node("n1"), other)
	if s, _ = snapshot(); s.decoded != 1 || gen() != g {
		t.Fatalf("a record changed but not in web: %d decoded, web's generation %d → %d", s.decoded, g, gen())
	}
	putRaw(k.node("n1"), record("n1", "sjc", 150))
	if s, demand = snapshot(); s.decoded != 1 || demand["n1"] != 150 || gen() == g {
		t.Fatalf("a changed record: %d decoded, records %v, web's generation %d → %d", s.decoded, demand, g, gen())
	}

	if _, err := cli.Delete(context.Background(), k.node("n2")); err != nil {
		t.Fatal(err)
	}
	if _, demand = snapshot(); len(demand) != 1 {
		t.Fatalf("a deleted record is still read: %v", demand)
	}

	// n3 alive under a lease that is not kept: it expires (etcd's shortest TTL)
	lease, err := cli.Grant(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(k.node("n3"), record("n3", "ams", 300))
	if _, err := cli.Put(context.Background(), k.alive("n3"), "", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, demand = snapshot(); demand["n3"] != 300 {
		t.Fatalf("n3 alive: %v", demand)
	}
	wctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	g = gen()
	if err := v.waitFor(wctx, func() bool { return !v.alive["n3"] }); err != nil {
		t.Fatalf("n3's lease did not expire in the view: %v", err)
	}
	if gen() == g {
		t.Fatal("n3 gone, and web's generation did not move")
	}
	if _, demand = snapshot(); len(demand) != 1 || demand["n1"] != 150 {
		t.Fatalf("after n3's lease expired: %v", demand)
	}

	// a record of a newer format, and one that speaks for another node
	newer := record("n4", "ams", 400)
	newer.V = wire.RecordVersion + 1
	putRecord(t, cli, newer)
	putRecord(t, cli, record("n5", "ams", 500))
	putRaw(k.node("n5"), record("n1", "ams", 500))
	if _, demand = snapshot(); len(demand) != 2 || demand["n5"] != 500 || demand["n1"] != 150 {
		t.Fatalf("with a newer record and one naming another node: %v", demand)
	}
}

// A view read again after its watch ended (a compaction, etcd away) keeps what it had
// decoded of the records whose bytes did not change, and takes in what changed.
func TestViewReadAgainKeepsWhatItDecoded(t *testing.T) {
	cli := startEtcd(t, 1).client()
	v := newFleetView(cli, newKeys(prefix), clock.Real(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	putRecord(t, cli, record("n1", "sjc", 100))
	putRecord(t, cli, record("n2", "sjc", 200))
	if _, err := v.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	putRecord(t, cli, record("n2", "sjc", 250))
	if _, err := cli.Delete(context.Background(), newKeys(prefix).node("n1")); err != nil {
		t.Fatal(err)
	}
	if _, err := v.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := v.snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.decoded != 3 || len(s.records) != 1 || s.records[0].Name != "n2" || s.records[0].Services[0].NewFlowsPerSecond != 250 {
		t.Fatalf("read again: %d decoded in all (want 2, then n2 again), records %+v", s.decoded, s.records)
	}
}
