package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/store"
)

const prefix = "/test"

func nopLogger() *zap.Logger { return zap.NewNop() }

// sink is the node's run loop as a source sees it: it takes every update, unless
// refuse (the kernel) says no. As the controller, it folds a Delta update into the
// services it took before: refuse and the updates channel see every service the node
// would run (Services), with the update's Delta and Gone as sent; sent keeps the
// updates as the source sent them.
type sink struct {
	updates chan reconcile.Update
	refuse  func(reconcile.Update) error

	mu      sync.Mutex
	applied []config.Service
	sent    []reconcile.Update
}

func (k *sink) Submit(ctx context.Context, u reconcile.Update) error {
	k.mu.Lock()
	k.sent = append(k.sent, u)
	full := u
	full.Services = folded(k.applied, u)
	k.mu.Unlock()
	if k.refuse != nil {
		if err := k.refuse(full); err != nil {
			return err
		}
	}
	select {
	case k.updates <- full:
		k.took(full)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// took records that the node runs u's services (u folded already, or whole).
func (k *sink) took(u reconcile.Update) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.applied = u.Services
}

// folded is the services a node runs once it takes u on top of applied.
func folded(applied []config.Service, u reconcile.Update) []config.Service {
	if !u.Delta {
		return u.Services
	}
	byName := map[string]config.Service{}
	for _, s := range applied {
		byName[s.Name] = s
	}
	for _, name := range u.Gone {
		delete(byName, name)
	}
	for _, s := range u.Services {
		byName[s.Name] = s
	}
	out := make([]config.Service, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[name])
	}
	return out
}

// sentSince is the updates sent from the nth on, as the source sent them.
func (k *sink) sentSince(n int) []reconcile.Update {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.sent[n:])
}

// next waits for the next update that matches want, dropping the others.
func (k *sink) next(t *testing.T, what string, want func(reconcile.Update) bool) reconcile.Update {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case u := <-k.updates:
			if want(u) {
				return u
			}
		case <-timeout:
			t.Fatalf("no update: %s", what)
		}
	}
}

// none checks that no update is pending.
func (k *sink) none(t *testing.T) {
	t.Helper()
	select {
	case u := <-k.updates:
		t.Fatalf("unexpected update at revision %s: %v", u.Revision, names(u.Services))
	default:
	}
}

func names(svcs []config.Service) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, s.Name)
	}
	return out
}

// node is one node's fleet source, running until the test ends.
type node struct {
	*Source
	sink *sink
}

func startNode(t *testing.T, cli *clientv3.Client, name string, refuse func(reconcile.Update) error) *node {
	t.Helper()
	k := &sink{updates: make(chan reconcile.Update, 1000), refuse: refuse}
	n := &node{Source: NewSource(cli, prefix, nodeFile(t, name), k, slog.New(slog.NewTextHandler(io.Discard, nil))), sink: k}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	n.sink.next(t, name+" reads the store", func(reconcile.Update) bool { return true })
	return n
}

// nodeFile is a node's config file in a fleet: its own sections, no services.
func nodeFile(t testing.TB, name string) *store.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	doc := fmt.Sprintf("node:\n  name: %s\n  interfaces: [eth0]\n  address: 10.0.0.11\n  address6: 2001:db8::11\n", name)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eventually waits until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		<-tick.C
	}
}

func put(name, body string) func(*store.Store) (*store.Change, error) {
	return func(s *store.Store) (*store.Change, error) { return s.PutService(name, []byte(body)) }
}

func drain(svc, backend string) func(*store.Store) (*store.Change, error) {
	return func(s *store.Store) (*store.Change, error) { return s.Drain(svc, backend) }
}

const web = `{"vip": "198.51.100.10", "port": 80, "backends": [{"address": "10.0.1.1", "weight": 3}, {"address": "10.0.1.2"}]}`

// settles waits until the node recorded the update its sink took as applied (the sink
// takes it a moment before).
func (n *node) settles(t *testing.T, u reconcile.Update) {
	t.Helper()
	eventually(t, "revision "+u.Revision+" recorded as applied", func() bool { return n.State().AppliedRevision == revisionOf(t, u) })
}

func revisionOf(t *testing.T, u reconcile.Update) int64 {
	rev, err := strconv.ParseInt(u.Revision, 10, 64)
	if err != nil {
		t.Fatalf("revision %q: %v", u.Revision, err)
	}
	return rev
}

func storeError(t *testing.T, err error, kind store.Kind) *store.Error {
	t.Helper()
	var se *store.Error
	if !errors.As(err, &se) || se.Kind != kind {
		t.Fatalf("want a store.Error of kind %d, got %#v (%v)", kind, err, err)
	}
	return se
}

// A write through one node reaches the other, with the same services, at the revision
// the writer applied; the writer returns only once it applied it itself.
func TestChangeReachesEveryNode(t *testing.T) {
	cli := startEtcd(t, 1).client()
	a, b := startNode(t, cli, "a", nil), startNode(t, cli, "b", nil)
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	got := b.sink.next(t, "web reaches b", func(u reconcile.Update) bool { return len(u.Services) == 1 })
	mine := a.sink.next(t, "a applied web", func(reconcile.Update) bool { return true })
	if !reflect.DeepEqual(got.Services, mine.Services) || got.Source != SourceName {
		t.Fatalf("a serves %+v, b %+v", mine.Services, got.Services)
	}
	if st := a.State(); st.AppliedRevision != revisionOf(t, got) || st.ApplyError != "" || !st.Reachable {
		t.Fatalf("a's state %+v, b applied revision %s", st, got.Revision)
	}
	// and back: a drain through b reaches a, comments and all
	if err := b.Change(context.Background(), drain("web", "10.0.1.1")); err != nil {
		t.Fatal(err)
	}
	u := a.sink.next(t, "the drain reaches a", func(u reconcile.Update) bool { return u.Services[0].Backends[0].Weight == 0 })
	docs, err := Export(context.Background(), cli, prefix)
	if err != nil || len(docs) != 1 || !strings.Contains(string(docs[0].YAML), "undrain restores weight 3") {
		t.Fatalf("export: %v %+v", err, docs)
	}
	if b.State().AppliedRevision != revisionOf(t, u) {
		t.Fatalf("b applied %d, a %s", b.State().AppliedRevision, u.Revision)
	}
	// an edit that changes nothing writes nothing
	a.settles(t, u)
	before := storeRevision(t, cli)
	if err := a.Change(context.Background(), drain("web", "10.0.1.1")); err != nil {
		t.Fatal(err)
	}
	if rev := storeRevision(t, cli); rev != before {
		t.Fatalf("an unchanged drain wrote: revision %d → %d", before, rev)
	}
}

// storeRevision is etcd's revision now.
func storeRevision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "any")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// Two nodes drain different backends of one service at the same time: every write
// that succeeded is in the final state, every refused one changed nothing.
func TestConcurrentWritersLoseNoUpdate(t *testing.T) {
	cli := startEtcd(t, 1).client()
	const perNode = 20
	doc := "name: web\nvip: 198.51.100.10\nport: 80\nbackends:\n"
	for i := range 2 * perNode {
		doc += fmt.Sprintf("  - address: 10.0.1.%d\n", i+1)
	}
	seed := []store.ServiceDoc{{Name: "web", YAML: []byte(doc)}}
	if err := Import(context.Background(), cli, prefix, seed, false); err != nil {
		t.Fatal(err)
	}
	a, b := startNode(t, cli, "a", nil), startNode(t, cli, "b", nil)
	var wg sync.WaitGroup
	var refused [2]int
	for i, n := range []*node{a, b} {
		wg.Go(func() {
			for j := range perNode {
				backend := fmt.Sprintf("10.0.1.%d", i*perNode+j+1)
				for {
					err := n.Change(context.Background(), drain("web", backend))
					if err == nil {
						break
					}
					var se *store.Error
					if !errors.As(err, &se) || se.Kind != store.Conflict {
						t.Errorf("drain %s: %v", backend, err)
						return
					}
					refused[i]++
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	docs, err := Export(context.Background(), cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(docs[0].YAML), "weight: 0"); n != 2*perNode {
		t.Fatalf("%d of %d drains in the store:\n%s", n, 2*perNode, docs[0].YAML)
	}
	// one write per successful drain after the import, none for a refused one
	g, err := cli.Get(context.Background(), prefix+"/generation")
	if err != nil || g.Kvs[0].Version != 1+2*perNode {
		t.Fatalf("the guard was written %d times, want %d (%v)", g.Kvs[0].Version, 1+2*perNode, err)
	}
	if a.State().WriteConflicts != uint64(refused[0]) || b.State().WriteConflicts != uint64(refused[1]) {
		t.Fatalf("conflicts counted %d, %d; refused %v", a.State().WriteConflicts, b.State().WriteConflicts, refused)
	}
	t.Logf("write conflicts: %v", refused)
}

// Bad input is refused as the file store refuses it, and nothing is written.
func TestBadInputChangesNothing(t *testing.T) {
	cli := startEtcd(t, 1).client()
	a := startNode(t, cli, "a", nil)
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	before := storeRevision(t, cli)
	err := a.Change(context.Background(), put("web", `{"vip": "198.51.100.10", "port": 99999, "backends": [{"address": "10.0.1.1"}]}`))
	if se := storeError(t, err, store.Invalid); se.Problems[0].Field != "port" {
		t.Fatalf("problems %+v", se.Problems)
	}
	storeError(t, a.Change(context.Background(), drain("nope", "10.0.1.1")), store.NotFound)
	storeError(t, a.Change(context.Background(), put("other", web)), store.Conflict) // web's VIP:port
	// the API's writes name their service: the fleet edits it alone and checks it
	// against the services it keeps
	se := storeError(t, a.Change(store.ForService(context.Background(), "other"), put("other", web)), store.Conflict)
	if se.Problems[0].Field != "vip" || se.Problems[0].Message != `198.51.100.10 port 80/tcp is served by service "web" already` {
		t.Fatalf("problems %+v", se.Problems)
	}
	err = a.Change(store.ForService(context.Background(), "web"), put("web", `{"vip": "198.51.100.10", "port": 99999, "backends": [{"address": "10.0.1.1"}]}`))
	if se := storeError(t, err, store.Invalid); se.Problems[0].Field != "port" {
		t.Fatalf("problems %+v", se.Problems)
	}
	storeError(t, a.Change(store.ForService(context.Background(), "nope"), drain("nope", "10.0.1.1")), store.NotFound)
	if after := storeRevision(t, cli); after != before {
		t.Fatalf("refused edits wrote: revision %d → %d", before, after)
	}
}

// A bad document refuses that service only: it keeps its last good state (or stays
// absent), the refusal is named in the state, the log (once) and a counter, and every
// other change applies, through the API too. On de322de the whole revision was refused
// and every later one with it: "the fleet's services at revision N do not validate, no
// edit can be made against them", and the change of another service never reached the
// node.
func TestBadDocumentRefusesThatServiceOnly(t *testing.T) {
	cli := startEtcd(t, 1).client()
	k := &sink{updates: make(chan reconcile.Update, 1000)}
	var logged syncBuffer
	a := &node{Source: NewSource(cli, prefix, nodeFile(t, "a"), k, slog.New(slog.NewTextHandler(&logged, nil))), sink: k}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	a.sink.next(t, "a reads the store", func(reconcile.Update) bool { return true })
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	a.sink.next(t, "web applied", func(reconcile.Update) bool { return true })

	// written past the API: a malformed document, and one on web's VIP:port
	directPut := func(name, doc string) int64 {
		t.Helper()
		resp, err := cli.Put(context.Background(), prefix+"/services/"+name, doc)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	badRev := directPut("bad", "name: bad\nvip: [198.51.100.20\n")
	dupRev := directPut("dup", "name: dup\nvip: 198.51.100.10\nport: 80\nbackends: [{address: 10.0.1.9}]\n")
	refusedAs := func(want map[string]string) func() bool {
		return func() bool {
			got := map[string]string{}
			for _, r := range a.State().Refused {
				got[r.Service] = r.Error
			}
			for name, msg := range want {
				if !strings.Contains(got[name], msg) {
					return false
				}
			}
			return len(got) == len(want)
		}
	}
	eventually(t, "both refused", refusedAs(map[string]string{
		"bad": prefix + "/services/bad:2: ",
		"dup": "duplicate service: same vip/port/protocol as service web",
	}))
	st := a.State()
	if st.Refused[0].Revision != badRev || st.Refused[1].Revision != dupRev || st.DocumentsRefused != 2 || st.ApplyError != "" {
		t.Fatalf("state after two bad documents: %+v", st)
	}

	// another service changes through the API: applied, beside web, without the refused
	if err := a.Change(context.Background(), put("dns", `{"vip": "198.51.100.53", "port": 53, "protocol": "udp", "backends": [{"address": "10.0.1.1"}]}`)); err != nil {
		t.Fatalf("a change of another service after a bad document: %v", err)
	}
	// and as the API writes it, the service alone
	if err := a.Change(store.ForService(context.Background(), "dns"), drain("dns", "10.0.1.1")); err != nil {
		t.Fatalf("a change of another service after a bad document, named: %v", err)
	}
	u := a.sink.next(t, "dns applied", func(u reconcile.Update) bool { return slices.Contains(names(u.Services), "dns") })
	if got := names(u.Services); !reflect.DeepEqual(got, []string{"dns", "web"}) {
		t.Fatalf("services applied: %v", got)
	}
	// a bad document of a service that has a good state: it keeps that state
	directPut("web", "name: web\nvip: 198.51.100.10\nport: 80\nbackends: [{address: 10.0.1.1, weight: -1}]\n")
	eventually(t, "web's bad document refused", refusedAs(map[string]string{"bad": "", "dup": "", "web": "backends[0].weight"}))
	if err := a.Change(store.ForService(context.Background(), "web"), drain("web", "10.0.1.1")); err != nil {
		t.Fatalf("an API edit of the refused service's last good state: %v", err)
	}
	u = a.sink.next(t, "web drained", func(u reconcile.Update) bool { return len(u.Services) == 2 && u.Services[1].Backends[0].Weight == 0 })
	if len(u.Services[1].Backends) != 2 {
		t.Fatalf("web after the drain: %+v", u.Services[1])
	}
	// the drain wrote web's good document again: no longer refused; then web goes, and
	// dup, valid alone, is taken
	eventually(t, "web taken", refusedAs(map[string]string{"bad": "", "dup": ""}))
	if _, err := cli.Delete(context.Background(), prefix+"/services/web"); err != nil {
		t.Fatal(err)
	}
	u = a.sink.next(t, "dup taken once web went", func(u reconcile.Update) bool { return slices.Contains(names(u.Services), "dup") })
	if got := names(u.Services); !reflect.DeepEqual(got, []string{"dns", "dup"}) {
		t.Fatalf("services after web went: %v", got)
	}
	eventually(t, "only bad refused", refusedAs(map[string]string{"bad": ""}))
	// a key that names another service than its document
	directPut("other", "name: x\nvip: 198.51.100.54\nport: 53\nbackends: [{address: 10.0.1.9}]\n")
	eventually(t, "a misnamed service is refused", refusedAs(map[string]string{"bad": "", "other": "a service's key must be its name"}))
	// each refused document is logged once
	if n := strings.Count(logged.String(), "service=bad revision="+strconv.FormatInt(badRev, 10)); n != 1 {
		t.Fatalf("the bad document logged %d times:\n%s", n, logged.String())
	}
	if st := a.State(); st.DocumentsRefused != 4 || st.ApplyError != "" || st.WatchLag != 0 {
		t.Fatalf("final state: %+v", st)
	}
}

// fleet has it but it could not apply it; the other node applies it.
func TestKernelRefusalOnOneNode(t *testing.T) {
	cli := startEtcd(t, 1).client()
	refuse := func(u reconcile.Update) error {
		if slices.Contains(names(u.Services), "big") {
			return &reconcile.KernelError{Err: errors.New("map full")}
		}
		return nil
	}
	a, b := startNode(t, cli, "a", refuse), startNode(t, cli, "b", nil)
	err := a.Change(context.Background(), put("big", web))
	if se := storeError(t, err, store.Failed); !strings.Contains(se.Error(), "could not apply") || !strings.Contains(se.Error(), "map full") {
		t.Fatalf("error: %v", err)
	}
	u := b.sink.next(t, "b applies big", func(reconcile.Update) bool { return true })
	if st := a.State(); st.AppliedRevision >= revisionOf(t, u) || st.ApplyError == "" {
		t.Fatalf("a's state: %+v", st)
	}
}

// etcd gone: the node keeps its state, is stale, and refuses writes at once; etcd back
// on its data: the node catches up by itself.
func TestStoreDownAndBack(t *testing.T) {
	c := startEtcd(t, 1)
	cli := c.client()
	a := startNode(t, cli, "a", nil)
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	a.sink.next(t, "web applied", func(reconcile.Update) bool { return true })
	c.kill(c.members[0])
	eventually(t, "the source sees etcd gone", func() bool { return !a.State().Reachable })
	if st := a.State(); st.StaleSince.IsZero() || st.AppliedRevision == 0 {
		t.Fatalf("state with etcd down: %+v", st)
	}
	start := time.Now()
	storeError(t, a.Change(context.Background(), drain("web", "10.0.1.1")), store.Unreachable)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a write with etcd down took %s", d)
	}
	a.sink.none(t)

	c.restart(c.members[0])
	if _, err := cli.Put(context.Background(), prefix+"/services/web", "name: web\nvip: 198.51.100.10\nport: 80\nbackends: [{address: 10.0.1.7}]\n"); err != nil {
		t.Fatal(err)
	}
	u := a.sink.next(t, "the write made while it was away is applied", func(u reconcile.Update) bool {
		return u.Services[0].Backends[0].Address.String() == "10.0.1.7"
	})
	a.settles(t, u)
	if st := a.State(); !st.Reachable || !st.StaleSince.IsZero() {
		t.Fatalf("state after etcd is back: %+v", st)
	}
	if err := a.Change(context.Background(), drain("web", "10.0.1.7")); err != nil {
		t.Fatalf("write after etcd is back: %v", err)
	}
}

// Three members, the leader killed: writes through both nodes and reads go on (a
// write in flight waits out the election).
func TestOneOfThreeMembersLost(t *testing.T) {
	c := startEtcd(t, 3)
	cli := c.client()
	a, b := startNode(t, cli, "a", nil), startNode(t, c.client(), "b", nil)
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	b.sink.next(t, "web reaches b", func(reconcile.Update) bool { return true })
	c.kill(c.leader(cli))
	if err := b.Change(context.Background(), drain("web", "10.0.1.1")); err != nil {
		t.Fatalf("write with one member down: %v", err)
	}
	a.sink.next(t, "the drain reaches a", func(u reconcile.Update) bool { return u.Services[0].Backends[0].Weight == 0 })
	if err := a.Change(context.Background(), drain("web", "10.0.1.2")); err != nil {
		t.Fatalf("write with one member down: %v", err)
	}
	u := b.sink.next(t, "the second drain reaches b", func(u reconcile.Update) bool { return u.Services[0].Backends[1].Weight == 0 })
	b.settles(t, u)
	if st := a.State(); !st.Reachable || a.State().AppliedRevision != b.State().AppliedRevision {
		t.Fatalf("a %+v, b %+v", st, b.State())
	}
}

// seededStore starts an etcd holding one service, web, and returns a client of it.
func seededStore(t *testing.T) *clientv3.Client {
	t.Helper()
	cli := startEtcd(t, 1).client()
	seed := []store.ServiceDoc{{Name: "web", YAML: []byte("name: web\nvip: 198.51.100.10\nport: 80\nbackends: [{address: 10.0.1.1}]\n")}}
	if err := Import(context.Background(), cli, prefix, seed, false); err != nil {
		t.Fatal(err)
	}
	return cli
}

// A node starts on the store's current services (Initial) and follows it from there;
// a store whose services do not validate gives it nothing to start on.
func TestInitialThenFollow(t *testing.T) {
	cli := seededStore(t)
	k := &sink{updates: make(chan reconcile.Update, 10)}
	s := NewSource(cli, prefix, nodeFile(t, "a"), k, slog.New(slog.NewTextHandler(io.Discard, nil)))
	u, err := s.Initial(context.Background())
	if err != nil || len(u.Services) != 1 || u.Commit == nil {
		t.Fatalf("initial: %v %+v", err, u)
	}
	k.took(u) // the node applies it
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	if st := s.State(); st.AppliedRevision != revisionOf(t, u) || !st.Reachable {
		t.Fatalf("after the initial update: %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	if _, err := cli.Put(context.Background(), prefix+"/services/dns", "name: dns\nvip: 198.51.100.53\nport: 53\nprotocol: udp\nbackends: [{address: 10.0.1.1}]\n"); err != nil {
		t.Fatal(err)
	}
	next := k.next(t, "the next revision", func(reconcile.Update) bool { return true })
	if got := names(next.Services); !reflect.DeepEqual(got, []string{"dns", "web"}) || revisionOf(t, next) <= revisionOf(t, u) {
		t.Fatalf("after the initial one: %v at %s", got, next.Revision)
	}

	if _, err := cli.Put(context.Background(), prefix+"/services/bad", "name: bad\nvip: 198.51.100.10\nport: 99999\nbackends: [{address: 10.0.1.1}]\n"); err != nil {
		t.Fatal(err)
	}
	// a node that starts beside a bad document starts with the others
	b := NewSource(cli, prefix, nodeFile(t, "b"), k, slog.New(slog.NewTextHandler(io.Discard, nil)))
	u, err = b.Initial(context.Background())
	if err != nil || !reflect.DeepEqual(names(u.Services), []string{"dns", "web"}) {
		t.Fatalf("initial beside a bad document: %v %v", err, names(u.Services))
	}
	if r := b.State().Refused; len(r) != 1 || r[0].Service != "bad" || !strings.Contains(r[0].Error, "port: ") {
		t.Fatalf("refused: %+v", r)
	}
}

// The revision a node would watch from was compacted away before it watched (it read
// the store, then etcd went on and compacted its history, as `--auto-compaction-*`
// does): the watch fails with "required revision has been compacted", and the node reads
// the store again and applies what it holds now, the changes it never saw as events
// included.
func TestWatchFromACompactedRevisionReadsAgain(t *testing.T) {
	cli := seededStore(t)
	k := &sink{updates: make(chan reconcile.Update, 10)}
	var logged syncBuffer
	s := NewSource(cli, prefix, nodeFile(t, "a"), k, slog.New(slog.NewTextHandler(&logged, nil)))
	u, err := s.Initial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	// while the node is not watching: a change, and a compaction past it
	put, err := cli.Put(context.Background(), prefix+"/services/web", "name: web\nvip: 198.51.100.10\nport: 80\nbackends: [{address: 10.0.1.9}]\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), prefix+"/other", "x"); err != nil { // a revision past the change
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), put.Header.Revision+1, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	got := k.next(t, "the change made before the compaction", func(u reconcile.Update) bool {
		return len(u.Services) == 1 && u.Services[0].Backends[0].Address.String() == "10.0.1.9"
	})
	if revisionOf(t, got) < put.Header.Revision {
		t.Errorf("applied revision %s, want at least %d", got.Revision, put.Header.Revision)
	}
	if !strings.Contains(logged.String(), "fleet watch revision compacted") {
		t.Errorf("the watch did not meet the compaction (the test no longer tests it); log:\n%s", logged.String())
	}
	// and it follows from there
	if _, err := cli.Put(context.Background(), prefix+"/services/dns", "name: dns\nvip: 198.51.100.53\nport: 53\nprotocol: udp\nbackends: [{address: 10.0.1.1}]\n"); err != nil {
		t.Fatal(err)
	}
	k.next(t, "a change after it", func(u reconcile.Update) bool { return reflect.DeepEqual(names(u.Services), []string{"dns", "web"}) })
}

// A node whose lease is gone (it expired while etcd was away longer than its TTL, or
// an operator revoked it) shows gone only until its next publish: it grants a new
// lease and puts its alive key back under it.
func TestALostLeaseIsGrantedAgain(t *testing.T) {
	cli := startEtcd(t, 1).client()
	a := startNode(t, cli, "a", nil)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Publish(ctx, func() wire.NodeRecord { return wire.NodeRecord{Site: "s1"} }) })
	defer func() { stop(); wg.Wait() }()
	aliveLease := func() clientv3.LeaseID {
		resp, err := cli.Get(context.Background(), prefix+"/alive/a")
		if err != nil || len(resp.Kvs) == 0 {
			return 0
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	eventually(t, "a is alive", func() bool { return aliveLease() != 0 })
	first := aliveLease()
	if _, err := cli.Revoke(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	if aliveLease() != 0 {
		t.Fatal("the alive key outlived its revoked lease")
	}
	eventually(t, "a is alive again under a new lease", func() bool { l := aliveLease(); return l != 0 && l != first })
	fs, err := a.Fleet(context.Background())
	if err != nil || len(fs.Nodes) != 1 || !fs.Nodes[0].Alive {
		t.Fatalf("the fleet after the new lease: %+v %v", fs, err)
	}
}

// Each node's record and alive key; the fleet's view of who agrees and who lags; a
// node that stops publishing shows gone at once and stays listed.
func TestNodeRecordsAndFleet(t *testing.T) {
	cli := startEtcd(t, 1).client()
	refuse := func(u reconcile.Update) error {
		if len(u.Services) > 0 && u.Services[0].Backends[0].Weight == 0 {
			return &reconcile.KernelError{Err: errors.New("map full")}
		}
		return nil
	}
	a, b := startNode(t, cli, "a", nil), startNode(t, cli, "b", refuse)
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	b.sink.next(t, "web reaches b", func(reconcile.Update) bool { return true })
	if err := a.Change(context.Background(), drain("web", "10.0.1.1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b refuses the drain", func() bool { return b.State().ApplyError != "" })

	ctxA, stopA := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		a.Publish(ctxA, func() wire.NodeRecord { return wire.NodeRecord{Site: "s1", Addresses: []string{"10.0.0.11"}} })
	})
	ctxB, stopB := context.WithCancel(context.Background())
	defer func() { stopA(); stopB(); wg.Wait() }()
	wg.Go(func() { b.Publish(ctxB, func() wire.NodeRecord { return wire.NodeRecord{Site: "s1"} }) })

	var fs wire.FleetStatus
	eventually(t, "both nodes published", func() bool {
		var err error
		fs, err = a.Fleet(context.Background())
		return err == nil && len(fs.Nodes) == 2 && fs.Nodes[1].ApplyError != ""
	})
	na, nb := fs.Nodes[0], fs.Nodes[1]
	if fs.Revision != a.State().AppliedRevision || !fs.Reachable || fs.Prefix != prefix {
		t.Fatalf("fleet %+v, a %+v", fs, a.State())
	}
	if na.Name != "a" || !na.Alive || !na.Agrees || na.Lag != 0 || na.Site != "s1" || na.AppliedAt == "" {
		t.Fatalf("a as the fleet sees it: %+v", na)
	}
	if nb.Name != "b" || !nb.Alive || nb.Agrees || nb.Lag != 1 || nb.AppliedRevision >= fs.Revision {
		t.Fatalf("b as the fleet sees it: %+v", nb)
	}

	stopA()
	eventually(t, "a's publisher stopped", func() bool {
		resp, err := cli.Get(context.Background(), prefix+"/alive/a")
		return err == nil && len(resp.Kvs) == 0
	})
	fs, err := b.Fleet(context.Background())
	if err != nil || len(fs.Nodes) != 2 || fs.Nodes[0].Alive || !fs.Nodes[1].Alive {
		t.Fatalf("after a stopped: %v %+v", err, fs)
	}
}

// Import seeds an empty store and refuses a full one unless forced; Export gives back
// what was imported.
func TestImportExport(t *testing.T) {
	cli := startEtcd(t, 1).client()
	file, err := store.Open("../store/testdata/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := store.ServiceDocsOf(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Import(ctx, cli, prefix, docs, false); err != nil {
		t.Fatal(err)
	}
	got, err := Export(ctx, cli, prefix)
	sortDocs(docs)
	if err != nil || !reflect.DeepEqual(got, docs) {
		t.Fatalf("export: %v\n%+v\nwant %+v", err, got, docs)
	}
	before := storeRevision(t, cli)
	if err := Import(ctx, cli, prefix, docs[:1], false); err == nil || !strings.Contains(err.Error(), "holds 2 services") {
		t.Fatalf("import into a full store: %v", err)
	}
	if storeRevision(t, cli) != before {
		t.Fatal("a refused import wrote")
	}
	if err := Import(ctx, cli, prefix, docs[:1], true); err != nil {
		t.Fatal(err)
	}
	if got, err := Export(ctx, cli, prefix); err != nil || !reflect.DeepEqual(got, docs[:1]) {
		t.Fatalf("export after a forced import: %v %+v", err, got)
	}
	// more services than etcd takes in one transaction (128 operations by default):
	// refused whole, saying how to raise the limit
	var many []store.ServiceDoc
	for i := range 130 {
		name := fmt.Sprintf("svc%03d", i)
		many = append(many, store.ServiceDoc{Name: name, YAML: []byte(strings.ReplaceAll(string(docs[0].YAML), "name: "+docs[0].Name, "name: "+name))})
	}
	before = storeRevision(t, cli)
	if err := Import(ctx, cli, prefix, many, true); err == nil || !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("an import above etcd's operations per transaction: %v", err)
	}
	if storeRevision(t, cli) != before {
		t.Fatal("a refused import wrote")
	}
}

// Dial's errors name the config field at fault.
func TestDialErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  config.Fleet
		want string
	}{
		{config.Fleet{}, "fleet.etcd.endpoints"},
		{config.Fleet{Endpoints: []string{"https://127.0.0.1:1"}, CAFile: filepath.Join(dir, "none.pem")}, "fleet.etcd.ca_file"},
		{config.Fleet{Endpoints: []string{"http://127.0.0.1:1"}, CertFile: "c.pem"}, "fleet.etcd.cert_file"},
		{config.Fleet{Endpoints: []string{"https://127.0.0.1:1"}, Username: "u", PasswordFile: filepath.Join(dir, "none")}, "fleet.etcd.password_file"},
		{config.Fleet{Endpoints: []string{"http://127.0.0.1:1"}, Username: "u", PasswordFile: filepath.Join(dir, "none")}, "fleet.etcd.endpoints[0]"},
		{config.Fleet{Endpoints: []string{"http://127.0.0.1:1"}, PasswordFile: "p"}, "fleet.etcd.username"},
	} {
		if _, err := Dial(tc.cfg); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

// Documents and records carry a format version, and a node one release older works
// beside this one. A service document of version 1 is what every release before the
// field wrote (no v); this node reads it and `v: 1`, and refuses a newer version for
// that service alone. What this node writes through the API is version 1 without the
// field, read by the previous release's reader (store.Compose, the whole-document parse
// it ran on every revision). Node records carry v: 1; older readers ignore the field,
// and the steering controller passes by a record of a newer version.
func TestFormatVersions(t *testing.T) {
	cli := startEtcd(t, 1).client()
	a := startNode(t, cli, "a", nil)
	for name, doc := range map[string]string{
		"old":   "name: old\nvip: 198.51.100.20\nport: 80\nbackends: [{address: 10.0.1.1}]\n",
		"v1":    "v: 1\nname: v1\nvip: 198.51.100.21\nport: 80\nbackends: [{address: 10.0.1.1}]\n",
		"newer": "v: 2\nname: newer\nvip: 198.51.100.22\nport: 80\nbackends: [{address: 10.0.1.1}]\n",
	} {
		if _, err := cli.Put(context.Background(), prefix+"/services/"+name, doc); err != nil {
			t.Fatal(err)
		}
	}
	a.sink.next(t, "the documents it reads", func(u reconcile.Update) bool {
		return reflect.DeepEqual(names(u.Services), []string{"old", "v1"})
	})
	eventually(t, "the newer document refused, named", func() bool {
		r := a.State().Refused
		return len(r) == 1 && r[0].Service == "newer" && strings.Contains(r[0].Error, "format version 2 is newer than this node reads (1)")
	})
	if _, err := cli.Delete(context.Background(), prefix+"/services/newer"); err != nil {
		t.Fatal(err)
	}
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	if err := a.Change(context.Background(), drain("old", "10.0.1.1")); err != nil {
		t.Fatal(err)
	}
	docs, err := Export(context.Background(), cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var written []store.ServiceDoc
	for _, d := range docs {
		if d.Name != "v1" { // the one written past the API
			written = append(written, d)
		} else if !strings.HasPrefix(string(d.YAML), "v: 1\n") {
			t.Fatalf("an edit of other services rewrote v1's document:\n%s", d.YAML)
		}
	}
	mem, err := store.Compose(nodeFile(t, "previous"), written)
	if err != nil || len(mem.Config().Services) != 2 {
		t.Fatalf("the previous release's reader on this one's documents: %v", err)
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Publish(ctx, func() wire.NodeRecord { return wire.NodeRecord{Site: "s1"} }) })
	defer func() { stop(); wg.Wait() }()
	var rec struct {
		V    int    `json:"v"`
		Name string `json:"name"`
	}
	eventually(t, "a's record", func() bool {
		resp, err := cli.Get(context.Background(), prefix+"/nodes/a")
		return err == nil && len(resp.Kvs) == 1 && json.Unmarshal(resp.Kvs[0].Value, &rec) == nil
	})
	if rec.V != wire.RecordVersion || rec.Name != "a" {
		t.Fatalf("record: %+v", rec)
	}
	var previous, newer wire.NodeRecord
	if err := json.Unmarshal([]byte(`{"name": "b", "site": "s1"}`), &previous); err != nil || !previous.Readable() {
		t.Fatalf("a record of the previous release: %v %+v", err, previous)
	}
	if err := json.Unmarshal([]byte(`{"v": 2, "name": "c", "site": "s1"}`), &newer); err != nil || newer.Readable() {
		t.Fatalf("a record of a newer format: %v %+v", err, newer)
	}
}

// A named write commits unless an API write came since or its own service's document
// changed: a document of another service put past the API meanwhile does not refuse it
// (each node checks that document on its own), one of the same service does.
func TestNamedWriteComparesItsOwnService(t *testing.T) {
	cli := startEtcd(t, 1).client()
	a := startNode(t, cli, "a", nil)
	if err := a.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	meanwhile := func(name, doc string, edit func(*store.Store) (*store.Change, error)) func(*store.Store) (*store.Change, error) {
		return func(st *store.Store) (*store.Change, error) {
			if _, err := cli.Put(context.Background(), prefix+"/services/"+name, doc); err != nil {
				t.Fatal(err)
			}
			return edit(st)
		}
	}
	ctx := store.ForService(context.Background(), "web")
	other := "name: dns\nvip: 198.51.100.53\nport: 53\nprotocol: udp\nbackends: [{address: 10.0.1.1}]\n"
	if err := a.Change(ctx, meanwhile("dns", other, drain("web", "10.0.1.1"))); err != nil {
		t.Fatalf("a named write while another service was put: %v", err)
	}
	same := "name: web\nvip: 198.51.100.10\nport: 80\nbackends: [{address: 10.0.1.1}]\n"
	storeError(t, a.Change(ctx, meanwhile("web", same, drain("web", "10.0.1.2"))), store.Conflict)
	eventually(t, "both put documents taken", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.want.services["dns"] != nil && len(a.want.services["web"].Backends) == 1
	})
}

// CatchUp returns only once the node applied what the store holds when it is called: a
// node held from applying (its run loop busy, or it did not run) is not caught up, and
// says so when its time is up; let go, it is.
func TestCatchUpWaitsForTheStoreRevision(t *testing.T) {
	cli := startEtcd(t, 1).client()
	release := make(chan struct{})
	var held atomic.Bool
	a := startNode(t, cli, "a", func(reconcile.Update) error {
		if held.Load() {
			<-release
		}
		return nil
	})
	b := startNode(t, cli, "b", nil)
	held.Store(true)
	if err := b.Change(context.Background(), put("web", web)); err != nil {
		t.Fatal(err)
	}
	want := storeRevision(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := a.CatchUp(ctx); err == nil {
		t.Fatalf("caught up while the change (revision %d) waits to be applied: applied %d", want, a.State().AppliedRevision)
	}
	held.Store(false)
	close(release)
	if err := a.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := a.State().AppliedRevision; got < want {
		t.Fatalf("caught up at revision %d, the store had %d", got, want)
	}
}

// A node writes its record when it changed, not every second: an unchanged record is
// not written again (its lease is kept alive), nor one whose demand jitters within its
// deadband; a changed one is at the next second, and an unchanged one again, the same
// bytes, once recordRefresh has passed. A fake clock drives the publisher; each call
// for the node's record marks a publication.
func TestARecordIsWrittenWhenItChanges(t *testing.T) {
	cli := startEtcd(t, 1).client()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	k := &sink{updates: make(chan reconcile.Update, 1000)}
	a := NewSource(cli, prefix, nodeFile(t, "a"), k, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.clock = fake
	var site, demand atomic.Value
	site.Store("s1")
	demand.Store(100.0)
	calls := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		a.Publish(ctx, func() wire.NodeRecord {
			select {
			case calls <- struct{}{}:
			case <-ctx.Done():
			}
			return wire.NodeRecord{Site: site.Load().(string), Services: []wire.ServiceLoad{{Name: "web", NewFlowsPerSecond: demand.Load().(float64)}}}
		})
	})
	defer func() { cancel(); wg.Wait() }()
	<-calls // the first publication
	// tick lets the publication under way finish and the next one start
	tick := func(d time.Duration) {
		t.Helper()
		bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer bcancel()
		if err := fake.BlockUntilContext(bctx, 1); err != nil {
			t.Fatal("the publisher armed no ticker")
		}
		fake.Advance(d)
		<-calls
	}
	written := func() (version int64, value string) {
		t.Helper()
		resp, err := cli.Get(context.Background(), newKeys(prefix).node("a"))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("a's record: %v %v", resp, err)
		}
		return resp.Kvs[0].Version, string(resp.Kvs[0].Value)
	}
	tick(publishEvery)
	v1, first := written()
	for _, d := range []float64{100, 101.9, 98.1, 100.5, 99} { // within 2 % of 100
		demand.Store(d)
		tick(publishEvery)
	}
	if v, _ := written(); v != v1 {
		t.Fatalf("a record whose demand stayed within its deadband written %d times in 5 s", v-v1)
	}
	demand.Store(97.0) // out of it: published as it is
	tick(publishEvery)
	tick(publishEvery)
	v1, first = written()
	var rec wire.NodeRecord
	if err := json.Unmarshal([]byte(first), &rec); err != nil || len(rec.Services) != 1 || rec.Services[0].NewFlowsPerSecond != 97 {
		t.Fatalf("after the demand moved 3 %%: %s", first)
	}
	if resp, err := cli.Get(context.Background(), newKeys(prefix).alive("a")); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("a's alive key: %v %v", resp, err)
	}
	site.Store("s2")
	tick(publishEvery) // the changed record is read
	tick(publishEvery) // and written
	v2, changed := written()
	if err := json.Unmarshal([]byte(changed), &rec); err != nil || v2 != v1+1 || rec.Site != "s2" || changed == first {
		t.Fatalf("after a change: version %d (was %d), %s", v2, v1, changed)
	}
	tick(recordRefresh)
	tick(publishEvery)
	if v3, again := written(); v3 != v2+1 || again != changed {
		t.Fatalf("after %v unchanged: version %d (was %d), %s, want the same bytes again", recordRefresh, v3, v2, again)
	}
}

// A revision hands the node the services it changed and the names of those it
// removed, not every service (Update.Delta); a bad document refuses its service alone
// and sends nothing, and the next change to another service goes as a delta still;
// after the node refused an update, the next carries every service.
func TestUpdatesNameWhatChanged(t *testing.T) {
	cli := startEtcd(t, 1).client()
	var refuseNext atomic.Bool
	a := startNode(t, cli, "a", func(reconcile.Update) error {
		if refuseNext.CompareAndSwap(true, false) {
			return &reconcile.KernelError{Err: errors.New("map full")}
		}
		return nil
	})
	doc := func(port, weight int) string {
		return fmt.Sprintf(`{"vip": "198.51.100.10", "port": %d, "backends": [{"address": "10.0.1.1", "weight": %d}]}`, port, weight)
	}
	ctx := context.Background()
	for i, name := range []string{"s1", "s2", "s3"} {
		if err := a.Change(ctx, put(name, doc(80+i, 1))); err != nil {
			t.Fatal(err)
		}
	}
	// what each update named, as sent, and what the node then runs
	step := func(what string, change func(), delta bool, changed, gone, runs []string) {
		t.Helper()
		for len(a.sink.updates) > 0 { // those of the changes before, taken already
			<-a.sink.updates
		}
		from := len(a.sink.sentSince(0))
		change()
		u := a.sink.next(t, what, func(reconcile.Update) bool { return true })
		sent := a.sink.sentSince(from)
		if len(sent) != 1 {
			t.Fatalf("%s: %d updates sent", what, len(sent))
		}
		s := sent[0]
		if s.Delta != delta || !slices.Equal(names(s.Services), changed) || !slices.Equal(s.Gone, gone) {
			t.Fatalf("%s: sent delta %v, services %v, gone %v; want %v, %v, %v", what, s.Delta, names(s.Services), s.Gone, delta, changed, gone)
		}
		if got := names(u.Services); !slices.Equal(got, runs) {
			t.Fatalf("%s: the node runs %v, want %v", what, got, runs)
		}
		a.settles(t, u)
	}
	step("a weight", func() {
		if err := a.Change(ctx, put("s2", doc(81, 5))); err != nil {
			t.Fatal(err)
		}
	}, true, []string{"s2"}, nil, []string{"s1", "s2", "s3"})
	step("a delete", func() {
		if err := a.Change(ctx, func(s *store.Store) (*store.Change, error) { return s.DeleteService("s3") }); err != nil {
			t.Fatal(err)
		}
	}, true, nil, []string{"s3"}, []string{"s1", "s2"})

	// a bad document straight into etcd: refused alone, nothing sent
	from := len(a.sink.sentSince(0))
	if _, err := cli.Put(ctx, prefix+"/services/s1", "name: s1\nvip: [198.51.100.20\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "s1's document refused", func() bool { r := a.State().Refused; return len(r) == 1 && r[0].Service == "s1" })
	if sent := a.sink.sentSince(from); len(sent) != 0 {
		t.Fatalf("a refused document sent %d updates: %+v", len(sent), sent)
	}
	step("another service beside the bad document", func() {
		if err := a.Change(ctx, put("s2", doc(81, 7))); err != nil {
			t.Fatal(err)
		}
	}, true, []string{"s2"}, nil, []string{"s1", "s2"})
	if u := a.sink.sentSince(0); u[len(u)-1].Services[0].Backends[0].Weight != 7 {
		t.Fatalf("s2 sent with weight %d", u[len(u)-1].Services[0].Backends[0].Weight)
	}

	// the node refuses an update: the next carries every service
	refuseNext.Store(true)
	from = len(a.sink.sentSince(0))
	if err := a.Change(ctx, put("s4", doc(90, 1))); err == nil {
		t.Fatal("a write the node refused answered no error")
	}
	if sent := a.sink.sentSince(from); len(sent) != 1 || !sent[0].Delta || !slices.Equal(names(sent[0].Services), []string{"s4"}) {
		t.Fatalf("the refused update: %+v", sent)
	}
	step("the next change after a refusal", func() {
		if err := a.Change(ctx, put("s2", doc(81, 8))); err != nil {
			t.Fatal(err)
		}
	}, false, []string{"s1", "s2", "s4"}, nil, []string{"s1", "s2", "s4"})
}
