package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/store"
)

// The fleet store as a source of desired state:
//
//	Initial: read P/services/ at one revision ─► decode each document (desired) ─► the node applies them
//	Run:     watch P/services/ ─► each revision: decode the documents it changes ─► Sink.Submit
//	         of the services it changed or removed (Update.Delta)
//	         probe etcd every second; unreachable: keep serving, stale since T; back: read again
//	         (only the documents that differ from those last read are decoded)
//	Change:  edit the kept services in memory (the file's code) ─► one Txn, if nothing
//	         changed since ─► wait until Run applied that revision
//
// A document that does not parse or validate refuses that service alone: it keeps its
// last good state and the refusal is named (State.Refused, the node record, the log,
// a counter); every other change applies. A revision the kernel refuses is not
// applied: the node keeps the state it has and says why (State.ApplyError).

// SourceName is the name the fleet's updates carry.
const SourceName = "fleet"

const (
	// probeEvery is how often Run checks that etcd answers (a watch on a dead member
	// just waits), and how often it retries when it does not.
	probeEvery   = time.Second
	probeTimeout = time.Second
	// staleAfter is how long etcd must fail before the node calls itself stale and
	// refuses writes at once: longer than the election that follows the loss of a
	// leader (1–2 s with etcd's default election timeout), which is no outage.
	staleAfter = 3 * time.Second
	// writeTimeout bounds an API write (then the API answers 503); it outlasts an
	// election. A write is attempted again when an attempt gets no answer in
	// attemptTimeout: etcd loses a write in flight to a leader that dies, and holds
	// it until its own much longer request timeout.
	writeTimeout   = 5 * time.Second
	attemptTimeout = time.Second
	// applyWait bounds how long an API write waits for this node to apply it, so that
	// its answer shows the change.
	applyWait = 5 * time.Second
	// catchUpWait bounds how long CatchUp tries to read the store.
	catchUpWait = 10 * time.Second
)

// Source is the fleet store as a source of desired state (reconcile.Source).
type Source struct {
	cli  *clientv3.Client
	keys keys
	file *store.Store   // the node's own sections; its services are not used
	node *config.Config // the node's config, which a service is checked within
	name string         // the node's name: its record and alive keys
	site string         // the node's site: whose steering shares it applies
	sink reconcile.Sink
	log  *slog.Logger
	// clock paces the probes, the retries and the publisher, and stamps the state
	// (applied at, stale since); the timeouts of etcd requests are their contexts'
	clock clock.Clock
	// stalls, when set (SetStallMeter), says when the node itself did not run: a probe
	// that could not run is no failure of the store's
	stalls *clock.StallMeter

	// writes makes API writes one at a time on this node; between nodes the
	// transaction's compare does.
	writes sync.Mutex

	mu   sync.Mutex        // guards everything below
	docs map[string][]byte // the services' documents as last read from the store
	rev  int64             // the services' revision as last read
	want *desired          // the services the node runs: the last good state of each
	// whole says the next update carries every service: the node has not taken one yet,
	// or refused the last; else it carries the services changed since (Update.Delta)
	whole      bool
	watchFrom  int64 // where Run's first watch starts after Initial; 0: Run reads first
	processed  int64 // the last revision applied or refused
	applied    int64
	appliedAt  time.Time // zero: nothing applied yet
	applyErr   string
	storeRev   int64 // the services revision of the store, as last seen
	reachable  bool
	failing    time.Time // when etcd started failing; zero while it answers
	staleSince time.Time
	conflicts  uint64
	progress   chan struct{} // closed and replaced each time Run has processed a revision
	// steering is the shares of the services with origins, by service, as last read:
	// kept while no controller runs
	steering map[string]wire.Steering

	// the publisher's: the size of the last record written, the records cut to fit
	recordBytes      atomic.Int64
	recordsTruncated atomic.Uint64
}

// snapshot is the services at one revision.
type snapshot struct {
	rev  int64             // the revision of their last change; 0: the store never had any
	docs map[string][]byte // YAML documents by service name
	revs map[string]int64  // the revision of each document
}

// NewSource makes the fleet source of a node. file is the node's config file: its
// node and bgp sections go with the fleet's services into the config the node runs.
func NewSource(cli *clientv3.Client, prefix string, file *store.Store, sink reconcile.Sink, log *slog.Logger) *Source {
	return &Source{
		cli: cli, keys: newKeys(prefix), file: file, node: file.Config(), name: file.Config().Node.Name, site: file.Config().Node.Site, sink: sink, log: log, clock: clock.Real(),
		docs: map[string][]byte{}, want: newDesired(), whole: true, progress: make(chan struct{}), steering: map[string]wire.Steering{},
	}
}

// SetStallMeter makes the source not count the time the node did not run (m's stalls)
// against the store; call it before Run.
func (s *Source) SetStallMeter(m *clock.StallMeter) { s.stalls = m }

// Initial reads the fleet's services as they are now, for the node to apply before it
// attaches and announces anything: a node never starts on a stale table. The update's
// Commit records the revision as applied (the store has it durably already); Run then
// follows the store from there.
func (s *Source) Initial(ctx context.Context) (reconcile.Update, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	snap, steering, header, err := s.read(ctx)
	if err != nil {
		return reconcile.Update{}, fmt.Errorf("read the fleet store: %w", err)
	}
	s.load(snap)
	s.mu.Lock()
	s.rev, s.watchFrom, s.storeRev, s.steering = snap.rev, header+1, max(s.storeRev, snap.rev), steering
	services := s.want.list()
	s.want.forget()
	s.mu.Unlock()
	s.reached()
	return reconcile.Update{
		Source: SourceName, Services: steered(services, s.site, steering), Revision: strconv.FormatInt(snap.rev, 10),
		Commit: func() error { s.took(true); s.settled(snap.rev, nil); return nil },
		Revert: func() error { s.took(false); s.settled(snap.rev, errors.New("the kernel refused it")); return nil },
	}, nil
}

// Run follows the store until ctx ends: each revision of the services is applied, and
// the store is read again whenever the watch broke or etcd was away.
func (s *Source) Run(ctx context.Context) error {
	for {
		err := s.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			// etcd compacted the history the watch was to start from: no outage, the
			// store is read again (changes never seen as events included)
			s.log.Info("fleet watch revision compacted: reading the store again", "err", err)
		}
		s.failed(err, s.clock.Now())
		if !clock.Sleep(s.clock, probeEvery, ctx.Done()) {
			return nil
		}
	}
}

// follow reads the services (unless Initial just did), applies them, and watches
// from there until the watch breaks or a probe fails.
func (s *Source) follow(ctx context.Context) error {
	s.mu.Lock()
	from := s.watchFrom
	s.watchFrom = 0
	s.mu.Unlock()
	if from == 0 {
		rctx, cancel := context.WithTimeout(ctx, probeTimeout)
		snap, steering, header, err := s.read(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("read the services: %w", err)
		}
		s.reached()
		s.mu.Lock()
		moved := !sameShares(s.steering, steering, s.site)
		s.steering = steering
		s.mu.Unlock()
		changed := s.load(snap)
		s.process(ctx, snap.rev, changed, moved)
		from = header + 1
	}
	// without a leader the member's watch would wait silently: end it and read again
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	probe := s.clock.NewTicker(probeEvery)
	defer probe.Stop()
	watch, steering, err := s.watchProbed(ctx, wctx, cancel, probe, from)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-watch:
			if !ok {
				return errors.New("the watch of the services ended")
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("watch the services: %w", err)
			}
			s.follows(ctx, resp.Events)
		case resp, ok := <-steering:
			if !ok {
				return errors.New("the watch of the steering shares ended")
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("watch the steering shares: %w", err)
			}
			if s.steeringChanged(resp.Events) {
				s.mu.Lock()
				rev := s.rev
				s.mu.Unlock()
				s.process(ctx, rev, false, true)
			}
		case <-probe.C():
			// etcd is read again once it answers
			if err := s.probeOnce(ctx); err != nil {
				return err
			}
		}
	}
}

// watchProbed opens the watches of the services and of the steering shares from
// revision from, on wctx. The etcd client's Watch returns only once its stream is up:
// with etcd lost in between, it would hold the source unprobed, never stale, until
// etcd is back. So probe goes on meanwhile, and a failure long enough to call the node
// stale ends the wait (cancel, of wctx) with its error.
func (s *Source) watchProbed(ctx, wctx context.Context, cancel func(), probe clock.Ticker, from int64) (services, steering clientv3.WatchChan, err error) {
	opened := make(chan struct{})
	probing := make(chan error, 1)
	go func() { // watchProbed's: it waits for the goroutine's answer
		for {
			select {
			case <-opened:
				probing <- nil
				return
			case <-probe.C():
				if err := s.probeOnce(ctx); err != nil {
					cancel()
					probing <- err
					return
				}
			}
		}
	}()
	services = s.cli.Watch(wctx, s.keys.services(), clientv3.WithPrefix(), clientv3.WithRev(from))
	steering = s.cli.Watch(wctx, s.keys.steering(), clientv3.WithPrefix(), clientv3.WithRev(from))
	close(opened)
	if err := <-probing; err != nil {
		return nil, nil, err
	}
	return services, steering, nil
}

// probeOnce asks etcd whether it answers. A failed probe or two (an election) is no
// outage; the error is for a failure long enough to call the node stale.
func (s *Source) probeOnce(ctx context.Context) error {
	asked := s.clock.Now()
	if err := s.probe(ctx); err != nil {
		if s.failed(err, asked) {
			return err
		}
		return nil
	}
	s.reached()
	return nil
}

// follows applies a watch response's events, once per revision (one transaction's
// changes together): only the documents a revision changes are decoded.
func (s *Source) follows(ctx context.Context, events []*clientv3.Event) {
	var docs []decoded
	for i, ev := range events {
		name, rev := s.keys.serviceName(ev.Kv.Key), ev.Kv.ModRevision
		if ev.Type == clientv3.EventTypeDelete {
			docs = append(docs, decoded{name: name, rev: rev})
		} else {
			docs = append(docs, decodeService(s.node, string(ev.Kv.Key), name, ev.Kv.Value, rev))
		}
		if i+1 == len(events) || events[i+1].Kv.ModRevision != rev {
			s.process(ctx, rev, s.take(docs), false)
			docs = nil
		}
	}
}

// load takes a whole read of the store: the documents that differ from those last
// read are decoded, those gone deleted. It reports whether the kept services changed.
func (s *Source) load(snap snapshot) bool {
	s.mu.Lock()
	var gone []string
	for name := range s.docs {
		if _, ok := snap.docs[name]; !ok {
			gone = append(gone, name)
		}
	}
	var names []string
	for name, doc := range snap.docs {
		if old, ok := s.docs[name]; !ok || !bytes.Equal(old, doc) {
			names = append(names, name)
		}
	}
	s.mu.Unlock()
	// in name order: of two new services that clash, the first is taken the same on
	// every node
	slices.Sort(names)
	docs := make([]decoded, 0, len(gone)+len(names))
	for _, name := range gone {
		docs = append(docs, decoded{name: name, rev: snap.rev})
	}
	for _, name := range names {
		docs = append(docs, decodeService(s.node, s.keys.service(name), name, snap.docs[name], snap.revs[name]))
	}
	return s.take(docs)
}

// take records decoded documents (deletes: no document) as the store's, and keeps the
// services they make; it logs each refused document once, and reports whether the
// kept services changed.
func (s *Source) take(docs []decoded) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range docs {
		if d.doc == nil {
			delete(s.docs, d.name)
		} else {
			s.docs[d.name] = d.doc
		}
	}
	changed, refused := s.want.take(docs)
	for _, r := range refused {
		s.log.Error("fleet service document refused: the service keeps its last good state, every other change applies",
			"service", r.Service, "revision", r.Revision, "err", r.Error)
	}
	return changed
}

// process applies the services kept at revision rev, unless they are the ones applied
// already (changed: they are not) and the shares of the node's site did not move. The
// update names only the services changed since the node took the last one (Delta),
// so that the node settles only those; it carries every service when the node refused
// the last, or the shares moved (they may move any service's weights).
func (s *Source) process(ctx context.Context, rev int64, changed, moved bool) {
	s.mu.Lock()
	// an API write is made against what the store has, applied here or not
	s.rev = rev
	s.storeRev = max(s.storeRev, rev)
	same := !changed && !moved && !s.appliedAt.IsZero() && s.applyErr == ""
	u := reconcile.Update{Source: SourceName, Revision: strconv.FormatInt(rev, 10)}
	if !same {
		if s.whole || moved {
			u.Services = s.want.list()
		} else {
			u.Delta = true
			u.Services, u.Gone = s.want.changes()
		}
		s.want.forget()
	}
	steering := s.steering
	s.mu.Unlock()
	u.Services = steered(u.Services, s.site, steering)
	if same {
		s.settled(rev, nil)
		return
	}
	err := s.sink.Submit(ctx, u)
	if ctx.Err() != nil {
		return // the node is stopping: nothing was refused
	}
	s.took(err == nil)
	if err != nil {
		s.log.Error("fleet revision not applied, the node keeps its previous state", "revision", rev, "err", oneLine(err))
	} else if u.Delta {
		s.log.Info("fleet revision applied", "revision", rev, "changed", len(u.Services), "gone", len(u.Gone))
	} else {
		s.log.Info("fleet revision applied", "revision", rev, "services", len(u.Services))
	}
	s.settled(rev, err)
}

// took records whether the node took the last update: if not, the next carries every
// service, whatever it missed.
func (s *Source) took(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.whole = !ok
}

// settled records the outcome of a revision and wakes the writes waiting for it.
func (s *Source) settled(rev int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.processed = rev
	if err != nil {
		s.applyErr = fmt.Sprintf("revision %d: %s", rev, oneLine(err))
	} else {
		s.applied, s.appliedAt, s.applyErr = rev, s.clock.Now(), ""
	}
	close(s.progress)
	s.progress = make(chan struct{})
}

// read gets the services and the guard at one revision. The services' revision is
// that of their last change: the guard's (a delete leaves no other trace) or a
// service's put directly into etcd.
func (s *Source) read(ctx context.Context) (snap snapshot, steering map[string]wire.Steering, header int64, err error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.keys.services(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.generation()),
		clientv3.OpGet(s.keys.steering(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return snapshot{}, nil, 0, err
	}
	snap.docs, snap.revs = map[string][]byte{}, map[string]int64{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		name := s.keys.serviceName(kv.Key)
		snap.docs[name], snap.revs[name] = kv.Value, kv.ModRevision
		snap.rev = max(snap.rev, kv.ModRevision)
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		snap.rev = max(snap.rev, kv.ModRevision)
	}
	return snap, s.steeringOf(resp.Responses[2].GetResponseRange().Kvs), resp.Header.Revision, nil
}

// probe checks that etcd answers a linearizable read (a leader and a quorum), and
// notes the store's services revision as the guard says.
func (s *Source) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keys.generation())
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if len(resp.Kvs) == 1 {
		s.mu.Lock()
		s.storeRev = max(s.storeRev, resp.Kvs[0].ModRevision)
		s.mu.Unlock()
	}
	return nil
}

// reached records that etcd answered.
func (s *Source) reached() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.reachable && !s.staleSince.IsZero() {
		s.log.Info("fleet store reachable again, catching up", "stale_since", s.staleSince.Format(time.RFC3339))
	}
	s.reachable, s.failing, s.staleSince = true, time.Time{}, time.Time{}
}

// failed records that etcd did not answer a request made at asked, and reports
// whether it has been failing long enough to call the node stale (since the first
// failed request).
func (s *Source) failed(err error, asked time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing.IsZero() {
		s.failing = asked
	}
	now := s.clock.Now()
	failing := now.Sub(s.failing)
	if s.stalls != nil {
		// a starved node's probes time out for want of a core: that time is not the
		// store's, and calling it unreachable would close the watches and read every
		// service again, more work for a node already short of time
		failing -= s.stalls.Stalled(s.failing, now)
	}
	if s.reachable && failing >= staleAfter || !s.reachable && s.staleSince.IsZero() {
		s.reachable, s.staleSince = false, s.failing
		s.log.Warn("fleet store unreachable: serving the last applied revision", "revision", s.applied, "err", err)
	}
	return !s.reachable
}

// compose makes a store in memory of the node's file and the kept services (their
// documents, sorted by name), for an API edit.
func (s *Source) compose(good map[string][]byte) (*store.Store, error) {
	list := make([]store.ServiceDoc, 0, len(good))
	for name, yaml := range good {
		list = append(list, store.ServiceDoc{Name: name, YAML: yaml})
	}
	sortDocs(list)
	return store.Compose(s.file, list)
}

// Change makes an API write: edit runs on the services the node keeps (a refused
// document's service as its last good state, or absent), with the file store's own
// code (the same validation and errors); what the edit changed is written in one
// transaction that commits only if the services did not change since: a refused
// document the edit does not touch stays as it is. It returns once
// this node applied the write. On any error but the last (the fleet has it, this node
// could not apply it), nothing changed.
func (s *Source) Change(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error {
	s.writes.Lock()
	defer s.writes.Unlock()
	// the services the edit runs on: the one it names (store.ForService, the API's
	// writes), checked against the others below; else all of them
	name, scoped := store.ServiceOf(ctx)
	s.mu.Lock()
	rev, reachable, staleSince := s.rev, s.reachable, s.staleSince
	good := map[string][]byte{}
	if !scoped {
		good = maps.Clone(s.want.good)
	} else if doc, ok := s.want.good[name]; ok {
		good[name] = doc
	}
	s.mu.Unlock()
	switch {
	case !reachable && staleSince.IsZero():
		return store.Unavailable("the fleet store (etcd) has not been read yet: nothing was changed")
	case !reachable:
		return store.Unavailable("the fleet store (etcd) is unreachable since %s: nothing was changed", staleSince.UTC().Format(time.RFC3339))
	}
	mem, err := s.compose(good)
	if err != nil {
		// the node's file and the kept services validate apart, so not together only
		// when the node's file changed under it
		return failed("the fleet's services at revision %d with this node's file: %s", rev, oneLine(err))
	}
	ch, err := edit(mem)
	if err != nil {
		return err
	}
	if scoped {
		if err := s.fits(ch.Config.Services); err != nil {
			return err
		}
	}
	after, err := ch.ServiceDocs()
	if err != nil {
		return failed("cannot take the edited services apart: %v", err)
	}
	ops := s.diff(good, after)
	if len(ops) == 0 {
		return nil
	}
	unchanged := unchangedSince(s.keys, rev)
	if scoped {
		unchanged = serviceUnchangedSince(s.keys, name, rev)
	}
	wrote, err := s.commit(ctx, rev, unchanged, ops, generationValue(s.name, ch.Summary))
	if err != nil {
		return err
	}
	s.log.Info("fleet changed through the API", "change", ch.Summary, "revision", wrote)
	return s.awaitApplied(ctx, wrote)
}

// fits checks an edit's services against the services the node keeps, as the file
// store checks a service against the file's others, with the same answers: a conflict
// (409) on another service's vip/port/protocol, else config.Clash's problem (400).
func (s *Source) fits(services []config.Service) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range services {
		svc := &services[i]
		if other, ok := s.want.byKey[svc.Key()]; ok && other != svc.Name {
			return store.ServedAlready(svc, other)
		}
		if field, why := s.want.clash(svc); why != "" {
			return &store.Error{Kind: store.Invalid, Problems: []store.Problem{{Field: field, Message: why}}}
		}
	}
	return nil
}

// commit writes ops and the guard (value, unique to this write) if the compares
// unchanged hold (the services, or the one written, did not change after revision
// since), and returns the write's revision. An attempt that
// gets no answer is made again: a write in flight when etcd's leader dies is lost,
// or committed by the next leader; the guard's value tells which (a second attempt
// finding its own first one committed is no conflict).
func (s *Source) commit(ctx context.Context, since int64, unchanged []clientv3.Cmp, ops []clientv3.Op, value string) (int64, error) {
	ops = append(ops, clientv3.OpPut(s.keys.generation(), value))
	deadline := time.Now().Add(writeTimeout) // the wall clock's, as the contexts' it bounds
	for {
		actx, cancel := context.WithTimeout(ctx, min(attemptTimeout, time.Until(deadline)))
		resp, err := s.cli.Txn(actx).If(unchanged...).Then(ops...).
			Else(clientv3.OpGet(s.keys.generation())).Commit()
		cancel()
		switch {
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case err != nil && time.Now().Before(deadline):
			continue
		case err != nil:
			return 0, store.Unavailable("the fleet store (etcd) did not confirm the write within %s (%v): it was most likely not made; read it back before writing again", writeTimeout, err)
		case resp.Succeeded:
			return resp.Header.Revision, nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && string(kvs[0].Value) == value {
			return kvs[0].ModRevision, nil
		}
		s.mu.Lock()
		s.conflicts++
		s.mu.Unlock()
		return 0, &store.Error{Kind: store.Conflict, Problems: []store.Problem{{
			Message: fmt.Sprintf("the fleet changed since revision %d (another write came first); nothing was changed", since),
		}}}
	}
}

// diff is the puts and deletes that make the store's services after.
func (s *Source) diff(before map[string][]byte, after []store.ServiceDoc) []clientv3.Op {
	var ops []clientv3.Op
	kept := map[string]bool{}
	for _, d := range after {
		kept[d.Name] = true
		if old, ok := before[d.Name]; !ok || !store.SameService(old, d.YAML) {
			ops = append(ops, clientv3.OpPut(s.keys.service(d.Name), string(d.YAML)))
		}
	}
	for name := range before {
		if !kept[name] {
			ops = append(ops, clientv3.OpDelete(s.keys.service(name)))
		}
	}
	return ops
}

// CatchUp waits until the node has processed the fleet's services as the store has
// them now: a linearizable read of the guard, then the watch's progress up to its
// revision. A node that did not run for a while calls it before it takes traffic
// again: the fleet may have changed meanwhile, and the watch delivers the changes only
// once the node runs. Its etcd member may have gone meanwhile: the read is tried again
// for up to catchUpWait while the client finds another. It fails when etcd does not
// answer by then or the revision is not applied within applyWait.
func (s *Source) CatchUp(ctx context.Context) error {
	// a request's bound, as the others: the wall clock's; the retries paced as the probes
	reading, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	for {
		err := s.probe(reading)
		if err == nil {
			break
		}
		if !clock.Sleep(s.clock, probeTimeout/4, reading.Done()) {
			return err
		}
	}
	s.mu.Lock()
	rev := s.storeRev
	s.mu.Unlock()
	return s.awaitApplied(ctx, rev)
}

// awaitApplied waits until Run has processed revision rev.
func (s *Source) awaitApplied(ctx context.Context, rev int64) error {
	timeout := time.NewTimer(applyWait) // an API request's bound: the wall clock's
	defer timeout.Stop()
	for {
		s.mu.Lock()
		processed, applied, applyErr, progress := s.processed, s.applied, s.applyErr, s.progress
		s.mu.Unlock()
		switch {
		case applied >= rev:
			return nil
		case processed >= rev:
			return failed("the fleet has the change (revision %d) but this node could not apply it and keeps its previous state: %s", rev, applyErr)
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return failed("the fleet has the change (revision %d) but this node has not applied it within %s", rev, applyWait)
		}
	}
}

func failed(format string, args ...any) *store.Error {
	return &store.Error{Kind: store.Failed, Problems: []store.Problem{{Message: fmt.Sprintf(format, args...)}}}
}

// State is the source's view of the fleet store, for the node's status and metrics.
type State struct {
	// AppliedRevision is the revision of the services the node serves, applied at
	// AppliedAt (zero: none yet); ApplyError says why a later revision was not applied.
	AppliedRevision int64
	AppliedAt       time.Time
	ApplyError      string
	// StoreRevision is the store's revision of the services as last seen; WatchLag is
	// how far the applied revision is behind it (in etcd revisions).
	StoreRevision int64
	WatchLag      int64
	// Reachable says etcd answers; StaleSince is when it stopped (zero while it does).
	Reachable  bool
	StaleSince time.Time
	// WriteConflicts counts API writes refused because another write came first.
	WriteConflicts uint64
	// Refused is the services whose latest document the node did not take, sorted by
	// name; DocumentsRefused counts the documents refused since the node started.
	Refused          []Refusal
	DocumentsRefused uint64
	// RecordBytes is the size of the last record published (at most
	// wire.MaxRecordBytes); RecordsTruncated counts the records cut to fit it.
	RecordBytes      int
	RecordsTruncated uint64
}

// State is safe from any goroutine.
func (s *Source) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{
		AppliedRevision: s.applied, AppliedAt: s.appliedAt, ApplyError: s.applyErr,
		StoreRevision: s.storeRev, WatchLag: s.storeRev - s.applied,
		Reachable: s.reachable, StaleSince: s.staleSince, WriteConflicts: s.conflicts,
		Refused: s.want.refusedList(), DocumentsRefused: s.want.refusals,
		RecordBytes: int(s.recordBytes.Load()), RecordsTruncated: s.recordsTruncated.Load(),
	}
}

// WireRefused is the refusals as the API and the node records show them.
func WireRefused(refused []Refusal) []wire.FleetRefusal {
	out := make([]wire.FleetRefusal, len(refused))
	for i, r := range refused {
		out[i] = wire.FleetRefusal{Service: r.Service, Revision: r.Revision, Error: r.Error}
	}
	return out
}

// oneLine folds a multi-line error (every problem of a config) for one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
