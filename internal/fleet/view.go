package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/decode"
)

// The fleet as the steering controller reads it, kept from one watch on the fleet's
// prefix rather than read whole every round: at 1 000 sites the nodes' records are
// hundreds of megabytes, and a round that read and decoded them all took seconds.
//
//	run (a goroutine of Controller.Run):
//	    read P/ once ─► decode every service, record, alive key ─┐
//	    watch P/ from the next revision ─► decode what changed ──┴─► the view (mu)
//	    the watch ends (compacted, no leader, etcd away) ─► read P/ again
//	round: snapshot ─► the alive nodes' records, the services with origins, the
//	       steering keys, as of the view's revision
//
// A record is decoded once per change of its bytes; one whose bytes did not change
// (a node that rewrites an unchanged record) is not decoded again. Each service has a
// generation, moved by every change of what the controller observes of it (its spec,
// an entry of it in a record, a node listing it coming or going): a round does not
// observe and decide again a service whose generation did not move since it decided
// it at a fixed point (steer.Manifold is a function of the observation and the shares
// in force alone).

// fleetView is the fleet's services, node records, alive keys and steering keys, kept
// from a watch.
type fleetView struct {
	cli   *clientv3.Client
	keys  keys
	log   *slog.Logger
	clock clock.Clock // paces the reads after a watch ended
	seed  maphash.Seed

	mu       sync.Mutex
	moved    chan struct{} // closed when the view moves to a later revision
	loaded   bool          // read whole once
	rev      int64         // the store's revision the view is at
	specs    map[string]wire.ServiceSpec
	records  map[string]viewRecord
	alive    map[string]bool
	steering map[string]steeringValue
	decoded  int           // records decoded since the last snapshot
	decoding time.Duration // and the time it took
	// gen is each service's generation; epoch moves at each read of the whole
	// prefix, after which any service may have changed
	gen   map[string]uint64
	epoch uint64
}

// viewGen is where a service's observation stands in the view: equal ones observe the
// same.
type viewGen struct{ epoch, gen uint64 }

// viewRecord is a node's record as decoded, with the hash of its bytes; rec is nil
// when the record is not readable (not JSON of a record, or of a newer format).
type viewRecord struct {
	hash uint64
	rec  *wire.NodeRecord
}

// steeringValue is a service's steering key as stored: the controller decodes it
// only when it did not write it itself.
type steeringValue struct {
	value []byte
	rev   int64 // its ModRevision
}

func newFleetView(cli *clientv3.Client, k keys, c clock.Clock, log *slog.Logger) *fleetView {
	return &fleetView{cli: cli, keys: k, log: log, clock: c, seed: maphash.MakeSeed(), moved: make(chan struct{}),
		specs: map[string]wire.ServiceSpec{}, records: map[string]viewRecord{}, alive: map[string]bool{}, steering: map[string]steeringValue{},
		gen: map[string]uint64{}}
}

// run keeps the view until ctx ends: it reads the prefix whole, then follows its
// watch; when the watch ends it reads the prefix again, a second later.
func (v *fleetView) run(ctx context.Context) {
	for {
		rev, err := v.load(ctx)
		if err == nil {
			err = v.follow(ctx, rev)
		}
		if ctx.Err() != nil {
			return
		}
		v.log.Warn("steering: the fleet's watch ended, reading the fleet again", "err", err)
		if !clock.Sleep(v.clock, time.Second, ctx.Done()) {
			return
		}
	}
}

// load reads the prefix whole into the view: what it held and is no longer in the
// store goes; a record whose bytes are those already decoded is not decoded again.
func (v *fleetView) load(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute) // hundreds of megabytes at 1 000 sites
	defer cancel()
	resp, err := v.cli.Get(rctx, v.keys.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("read the fleet: %w", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	held := v.records
	v.specs, v.records, v.alive, v.steering = map[string]wire.ServiceSpec{}, map[string]viewRecord{}, map[string]bool{}, map[string]steeringValue{}
	for _, kv := range resp.Kvs {
		if name, ok := strings.CutPrefix(string(kv.Key), v.keys.nodes()); ok {
			v.records[name] = held[name] // kept when its bytes are the same
		}
		v.put(kv)
	}
	v.loaded = true
	v.epoch++ // every service may have changed: their generations start again
	clear(v.gen)
	v.moveTo(resp.Header.Revision)
	return resp.Header.Revision, nil
}

// follow applies the watch's events from revision rev+1 until the watch ends; its
// error says why. The watch requires a leader: a member cut off from the others ends
// it rather than leave the view behind the store's without a word.
func (v *fleetView) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range v.cli.Watch(wctx, v.keys.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Canceled {
			return errors.New("the watch was cancelled")
		}
		v.mu.Lock()
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				v.remove(ev.Kv.Key)
			} else {
				v.put(ev.Kv)
			}
		}
		v.moveTo(resp.Header.Revision)
		v.mu.Unlock()
	}
	return errors.New("the watch closed")
}

// put takes in a key's new value. Called with mu held.
func (v *fleetView) put(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	switch {
	case strings.HasPrefix(key, v.keys.nodes()):
		name := strings.TrimPrefix(key, v.keys.nodes())
		hash := maphash.Bytes(v.seed, kv.Value)
		if held, ok := v.records[name]; ok && held.hash == hash {
			return // the same bytes: decoded already
		}
		began := time.Now()
		r := &wire.NodeRecord{}
		// a record of a newer format than this release reads is passed by, not misread
		if err := decode.JSONInto(kv.Value, decode.MaxFileSize, r); err != nil || !r.Readable() {
			r = nil
		} else {
			r.Name = name // the key names the node: a record cannot speak for another
		}
		v.touchChanged(v.records[name].rec, r)
		v.records[name] = viewRecord{hash: hash, rec: r}
		v.decoded++
		v.decoding += time.Since(began)
	case strings.HasPrefix(key, v.keys.alives()):
		name := strings.TrimPrefix(key, v.keys.alives())
		if !v.alive[name] {
			v.alive[name] = true
			v.touchChanged(nil, v.records[name].rec)
		}
	case strings.HasPrefix(key, v.keys.steering()):
		v.steering[strings.TrimPrefix(key, v.keys.steering())] = steeringValue{value: bytes.Clone(kv.Value), rev: kv.ModRevision}
	case strings.HasPrefix(key, v.keys.services()):
		name := v.keys.serviceName(kv.Key)
		var spec wire.ServiceSpec
		// the nodes refuse a service that does not parse; one without origins is not steered
		if err := decodeSpec(kv.Value, &spec); err != nil || len(spec.Origins) == 0 {
			delete(v.specs, name)
		} else {
			v.specs[name] = spec
		}
		v.gen[name]++
	}
}

// touchChanged moves the generation of every service whose entries differ between a
// node's record before and after (nil: none), or of all of both when the node moved to
// another site. Called with mu held.
func (v *fleetView) touchChanged(before, after *wire.NodeRecord) {
	var was, is []wire.ServiceLoad
	if before != nil {
		was = before.Services
	}
	if after != nil {
		is = after.Services
	}
	moved := before == nil || after == nil || before.Site != after.Site
	for i := range is {
		j := slices.IndexFunc(was, func(l wire.ServiceLoad) bool { return l.Name == is[i].Name })
		if moved || j < 0 || !sameLoad(&was[j], &is[i]) {
			v.gen[is[i].Name]++
		}
	}
	for i := range was {
		if moved || !slices.ContainsFunc(is, func(l wire.ServiceLoad) bool { return l.Name == was[i].Name }) {
			v.gen[was[i].Name]++
		}
	}
}

// sameLoad tells whether two entries of a service say the same.
func sameLoad(a, b *wire.ServiceLoad) bool {
	return a.Name == b.Name && a.Announced == b.Announced && a.NewFlowsPerSecond == b.NewFlowsPerSecond &&
		a.PacketsPerSecond == b.PacketsPerSecond && a.BytesPerSecond == b.BytesPerSecond &&
		slices.Equal(a.Backends, b.Backends) && slices.Equal(a.Origins, b.Origins)
}

// remove forgets a deleted key. Called with mu held.
func (v *fleetView) remove(k []byte) {
	key := string(k)
	switch {
	case strings.HasPrefix(key, v.keys.nodes()):
		name := strings.TrimPrefix(key, v.keys.nodes())
		v.touchChanged(v.records[name].rec, nil)
		delete(v.records, name)
	case strings.HasPrefix(key, v.keys.alives()):
		name := strings.TrimPrefix(key, v.keys.alives())
		if v.alive[name] {
			delete(v.alive, name)
			v.touchChanged(v.records[name].rec, nil)
		}
	case strings.HasPrefix(key, v.keys.steering()):
		delete(v.steering, strings.TrimPrefix(key, v.keys.steering()))
	case strings.HasPrefix(key, v.keys.services()):
		name := v.keys.serviceName(k)
		delete(v.specs, name)
		v.gen[name]++
	}
}

// moveTo sets the view's revision and wakes whoever waits for one. Called with mu held.
func (v *fleetView) moveTo(rev int64) {
	if rev > v.rev {
		v.rev = rev
		close(v.moved)
		v.moved = make(chan struct{})
	}
}

// fleetSnapshot is what a round reads: the view as of one revision.
type fleetSnapshot struct {
	rev      int64
	specs    []wire.ServiceSpec // the services with origins, by name
	gens     []viewGen          // of each of specs
	records  []wire.NodeRecord  // the alive nodes' readable records, by node name
	steering map[string]steeringValue
	decoded  int           // records decoded since the snapshot before
	decoding time.Duration // and the time it took
}

// snapshot is the view now, once it has been read whole.
func (v *fleetView) snapshot(ctx context.Context) (fleetSnapshot, error) {
	if err := v.waitFor(ctx, func() bool { return v.loaded }); err != nil {
		return fleetSnapshot{}, fmt.Errorf("the fleet is not read yet: %w", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	s := fleetSnapshot{rev: v.rev, steering: maps.Clone(v.steering), decoded: v.decoded, decoding: v.decoding}
	v.decoded, v.decoding = 0, 0
	for _, name := range slices.Sorted(maps.Keys(v.specs)) {
		s.specs = append(s.specs, v.specs[name])
		s.gens = append(s.gens, viewGen{v.epoch, v.gen[name]})
	}
	s.records = make([]wire.NodeRecord, 0, len(v.records))
	for _, name := range slices.Sorted(maps.Keys(v.records)) {
		if r := v.records[name].rec; r != nil && v.alive[name] {
			s.records = append(s.records, *r) // a shallow copy: decoded records are never changed
		}
	}
	return s, nil
}

// caughtUp waits until the view is at revision rev or later.
func (v *fleetView) caughtUp(ctx context.Context, rev int64) error {
	return v.waitFor(ctx, func() bool { return v.loaded && v.rev >= rev })
}

// waitFor waits until cond, called with mu held, holds.
func (v *fleetView) waitFor(ctx context.Context, cond func() bool) error {
	for {
		v.mu.Lock()
		ok, moved := cond(), v.moved
		v.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-moved:
		}
	}
}
