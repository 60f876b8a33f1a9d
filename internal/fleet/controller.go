package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/decode"
	"github.com/manifoldlb/manifold/internal/steer"
)

// The live steering controller, `manifold steer --config`:
//
//	the fleet's view (view.go): P/services/, P/nodes/, P/alive/, P/steering/ kept
//	    from a watch, each record decoded once when it changes
//	campaign (etcd election under P/steer/leader, a lease of Lease), once the
//	    view is read
//	leader: every Interval, one round:
//	    the view at its revision
//	    per service with origins: the alive nodes' records ─► steer.Observation
//	    steer.Manifold.Decide(observation, the shares in force) ─► P/steering/<service>
//	    when its shares changed (every service in a term's first round), or its
//	    decision is due for a refresh (dueForRefresh: a few a round, the oldest
//	    first), written only while this controller still holds the leader key
//	standby: waits in the campaign; takes over when the leader's lease ends
//
// Nothing moves while no controller leads: the shares stay in the store, the nodes
// keep them.

// Controller is one steering controller; several may run, one leads.
type Controller struct {
	cli             *clientv3.Client
	keys            keys
	name            string
	interval, lease time.Duration
	law             steer.Controller
	log             *slog.Logger
	clock           clock.Clock // paces the rounds and dates them; request timeouts are their contexts'
	view            *fleetView
	// mine is each service's shares as this controller last wrote them, with the
	// revision of the write: the steering key at that revision is not decoded again.
	// Used by the rounds alone.
	mine map[string]mineSteering
	// settled is, for each service last decided at a fixed point (the law gave back
	// the shares in force), where its observation stood then and the revision of the
	// shares in force: while neither moves, the law would give them back again. Used
	// by the rounds alone.
	settled map[string]fixedPoint
	// termWrote is the services written in this term: each once at least, the leader
	// their shares name changed. Used by the rounds alone; reset when leading starts.
	termWrote map[string]bool

	mu      sync.Mutex
	leading bool
	rounds  uint64
	written []wire.Steering // in force after the last round of the current term
	last    RoundStats
}

// fixedPoint is where a service stood when the law gave back its shares in force.
type fixedPoint struct {
	gen viewGen
	rev int64
}

// mineSteering is a service's shares as the controller wrote them, at rev.
type mineSteering struct {
	rev int64
	st  wire.Steering
}

// RoundStats is what a round cost: its time by phase, and what it wrote.
type RoundStats struct {
	// Read is taking the fleet's view (kept from a watch); Decide the observations and
	// the control law over every service; Write the transactions that wrote.
	Read, Decide, Write time.Duration
	Records, Services   int // the alive nodes' records read, the services decided
	// Settled is the services of Services not observed nor decided again: nothing of
	// them changed since the law last gave back their shares in force.
	Settled int
	// Refreshed is the services due for a refresh of their decision that the round
	// chose to decide and write again (at most refreshQuota of them).
	Refreshed int
	// Decoded is the records the view decoded since the round before (those that
	// changed), Decoding the time it took, on the view's goroutine rather than in Read.
	Decoded  int
	Decoding time.Duration
	// Revision is the store's revision the round read.
	Revision int64
	// Writes counts the keys put or deleted, Bytes the values put.
	Writes, Bytes int
}

// LastRound is the cost of the last round that completed.
func (c *Controller) LastRound() RoundStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// NewController makes a controller named name (its identity in the election).
func NewController(cli *clientv3.Client, prefix, name string, interval, lease time.Duration, log *slog.Logger) *Controller {
	c := &Controller{cli: cli, keys: newKeys(prefix), name: name, interval: interval, lease: lease, law: steer.Manifold{}, log: log,
		clock: clock.Real(), mine: map[string]mineSteering{}, settled: map[string]fixedPoint{}, termWrote: map[string]bool{}}
	c.view = newFleetView(cli, c.keys, c.clock, log)
	return c
}

// Leading tells whether the controller leads now; Rounds counts its rounds.
func (c *Controller) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// Rounds counts the rounds this controller has completed (written what changed).
func (c *Controller) Rounds() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds
}

// Written is, while the controller leads, each service's shares in force after its
// last round: written by that round, or by an earlier one of the term when they did
// not change; nil while it stands by (what it once wrote may have been replaced since).
func (c *Controller) Written() []wire.Steering {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

// Run keeps the fleet's view, campaigns once it has read the fleet and, while it
// leads, decides every interval, until ctx ends; then it resigns, so that a standby
// takes over at once rather than when the lease ends. A standby keeps its view too:
// it leads from its first round.
func (c *Controller) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.view.run(ctx) }) // the view's goroutine, owned by Run
	defer func() { cancel(); wg.Wait() }()
	if err := c.view.waitFor(ctx, func() bool { return c.view.loaded }); err != nil {
		return nil // ctx ended
	}
	for {
		err := c.term(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("steering: not leading, campaigning again", "err", err)
		if !clock.Sleep(c.clock, c.interval, ctx.Done()) {
			return nil
		}
	}
}

// term is one session: a campaign, then rounds until the lease is lost or ctx ends.
func (c *Controller) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(c.cli, concurrency.WithTTL(int(c.lease/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("open a session: %w", err)
	}
	defer sess.Close() // revokes the lease: a standby takes over now
	e := concurrency.NewElection(sess, c.keys.election())
	if err := e.Campaign(ctx, c.name); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	c.setLeading(true)
	defer c.setLeading(false)
	c.log.Info("steering: leading", "name", c.name)
	// a write counts only while this controller holds the leader key it won
	held := clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())
	tick := c.clock.NewTicker(c.interval)
	defer tick.Stop()
	for {
		// a round may outlast its interval (the ticker drops the ticks it missed)
		err := c.round(ctx, c.clock.Now(), held)
		if errors.Is(err, errNotLeader) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("steering round failed, the shares stay", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return errors.New("the leader's lease ended")
		case <-tick.C():
		}
	}
}

func (c *Controller) setLeading(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leading = v
	c.written = nil
	c.termWrote = map[string]bool{}
}

var errNotLeader = errors.New("no longer the leader")

// roundWriteTimeout bounds each write transaction of a round (at least; an interval longer
// than it bounds them instead): a term's first round at 1 000 sites writes 10 MB of
// shares, seconds of work for a loaded etcd. What a round wrote before one failed
// stays written: the next round does not write it again.
const roundWriteTimeout = 10 * time.Second

// maxWriteBytes bounds the values one write transaction carries: etcd refuses a
// request above 1.5 MiB (its --max-request-bytes), and a service of 1 000 sites ×
// 100 origins is about 0.9 MB of shares and decision (steer.MaxWireRows). A variable
// for the test that writes a service above it. maxWriteOps is etcd's default
// --max-txn-ops.
var maxWriteBytes = 1 << 20

const maxWriteOps = 128

// decisionRefresh is the age at which a decision in the store whose shares do not
// change is written again (this, or ten intervals, whichever is longer): the decision
// beside the shares — each site's demand, the origins' loads, the reasons — is what
// `manifold ctl steering` shows, and an operator must not read a demand of long ago.
// Writes while nothing changes: one per service per refresh.
//
// A refresh observes, decides and writes the service again (about 0.1 s of CPU at
// 1 000 sites × 100 origins), and a term's first round writes every service at once:
// were they refreshed as soon as due, they would all come due together, every
// refresh period, in one round of seconds. So a round refreshes at most
// refreshQuota of the services due, the oldest first: the first refreshes after a
// term's first round spread over refreshRounds rounds, and stay spread. A round that
// decides a service for another reason (its observation moved) leaves the refreshes
// to a later one, unless they are overdue (refreshDefer intervals past due): a
// change and a refresh in one round would cost a round two services. A decision is
// then never older than the refresh age, refreshDefer and refreshRounds intervals
// more (when every round runs in its interval): a due one waits refreshDefer rounds
// at most before it is overdue, then refreshRounds at most behind the older ones.
const decisionRefresh = 10 * time.Second

// refreshDefer is how many intervals past due a refresh may wait for a round that
// decides nothing else.
const refreshDefer = 5

// refreshRounds is the number of rounds over which the services due for a refresh
// are spread: within the ten rounds of a refresh period at least.
const refreshRounds = 10

// refreshAge is how old a decision gets before it is due for a refresh.
func (c *Controller) refreshAge() time.Duration {
	return max(decisionRefresh, refreshRounds*c.interval)
}

// refreshQuota is how many services due for a refresh a round refreshes, of n
// services: every one of them within refreshRounds rounds.
func refreshQuota(n int) int { return (n + refreshRounds - 1) / refreshRounds }

// dueForRefresh is which services of cur (the shares in force, by spec; had false for
// none) this round refreshes: those whose decision is refreshAge old (or, when the
// round is busy deciding others, overdue), the oldest first, at most refreshQuota of
// them. A decision whose time does not parse counts as the oldest.
func (c *Controller) dueForRefresh(cur []inForce, now time.Time, busy bool) map[string]bool {
	age := c.refreshAge()
	if busy {
		age += refreshDefer * c.interval
	}
	type due struct {
		name string
		at   time.Time
	}
	var dues []due
	for _, f := range cur {
		if !f.had {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, f.st.At)
		if err != nil || now.Sub(at) >= age {
			dues = append(dues, due{f.st.Service, at}) // at is zero when it does not parse
		}
	}
	slices.SortFunc(dues, func(a, b due) int { return cmp.Or(a.at.Compare(b.at), strings.Compare(a.name, b.name)) })
	out := map[string]bool{}
	for _, d := range dues[:min(len(dues), refreshQuota(len(cur)))] {
		out[d.name] = true
	}
	return out
}

// inForce is a service's shares in force in a round's view (current), and whether
// the round decides it whatever its age (undecided: not at a fixed point the view
// still stands at, or not yet written in the term).
type inForce struct {
	st        wire.Steering
	rev       int64
	had       bool
	undecided bool
}

// round reads the fleet, decides every service with origins and writes the shares
// that changed, if held still holds. Every service is written once in a term (by its
// first round, or the first that gets it written): the leader they name changes.
func (c *Controller) round(ctx context.Context, now time.Time, held clientv3.Cmp) error {
	var stats RoundStats
	began := time.Now()
	snap, err := c.view.snapshot(ctx)
	if err != nil {
		return err
	}
	stats.Records, stats.Revision, stats.Decoded, stats.Decoding = len(snap.records), snap.rev, snap.decoded, snap.decoding
	decided := time.Now()
	stats.Read = decided.Sub(began)

	var writes []steeringWrite
	var written []wire.Steering
	withOrigins := map[string]bool{}
	inForce := make([]inForce, len(snap.specs))
	busy := false // some service is decided for another reason than a refresh
	for k, spec := range snap.specs {
		f := &inForce[k]
		f.st, f.rev, f.had = c.current(spec.Name, snap)
		// the leader its shares name is another, or its observation moved since its
		// fixed point
		fp, ok := c.settled[spec.Name]
		f.undecided = !ok || !f.had || !c.termWrote[spec.Name] || fp != (fixedPoint{snap.gens[k], f.rev})
		busy = busy || f.undecided
	}
	refresh := c.dueForRefresh(inForce, now, busy)
	stats.Refreshed = len(refresh)
	for k, spec := range snap.specs {
		withOrigins[spec.Name] = true
		cur, rev, had := inForce[k].st, inForce[k].rev, inForce[k].had
		again := !c.termWrote[spec.Name] // the leader its shares name is another
		if !inForce[k].undecided && !refresh[spec.Name] {
			stats.Services++
			stats.Settled++
			written = append(written, cur) // nothing moved: the law would give them back
			continue
		}
		delete(c.settled, spec.Name)
		obs, ok := Observe(spec, snap.records)
		if !ok {
			continue // no alive node carries it: nothing to decide on, the shares stay
		}
		stats.Services++
		d := c.law.Decide(now, obs, steer.Shares(cur.Shares))
		shares := d.Shares()
		fixed := had && steer.Shares(cur.Shares).Equal(shares)
		if fixed {
			c.settled[spec.Name] = fixedPoint{snap.gens[k], rev}
			if !again && !refresh[spec.Name] {
				written = append(written, cur) // in force already: the nodes have nothing to do
				continue
			}
		}
		st := wire.Steering{Service: spec.Name, Round: cur.Round + 1, At: now.UTC().Format(time.RFC3339Nano), Leader: c.name,
			Shares: wire.Shares(shares), Decision: steer.WireDecision(d)}
		value, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if len(value) > maxWriteBytes {
			// the shares go in, their explanation gives way: the sites' rows are left out
			st.Decision.Note = strings.TrimPrefix(st.Decision.Note+fmt.Sprintf(
				"; the sites' rows left out: %d bytes with them, above the %d a write carries", len(value), maxWriteBytes), "; ")
			st.Decision.Sites = []wire.SteeringSite{}
			if value, err = json.Marshal(st); err != nil {
				return err
			}
		}
		w := steeringWrite{op: clientv3.OpPut(c.keys.steeringOf(spec.Name), string(value)), size: len(value), service: spec.Name, st: &st}
		if fixed {
			w.fixedAt = &snap.gens[k]
		}
		writes = append(writes, w)
		written = append(written, st)
	}
	// a service that lost its origins (or was deleted) goes back to its own weights
	for name := range snap.steering {
		if !withOrigins[name] {
			writes = append(writes, steeringWrite{op: clientv3.OpDelete(c.keys.steeringOf(name)), service: name})
		}
	}
	wrote := time.Now()
	stats.Decide = wrote.Sub(decided)
	// in transactions within etcd's bounds, each held to the leader key
	for len(writes) > 0 {
		n, size := 0, 0
		for n < len(writes) && n < maxWriteOps && (n == 0 || size+writes[n].size <= maxWriteBytes) {
			size += writes[n].size
			n++
		}
		ops := make([]clientv3.Op, n)
		for i := range ops {
			ops[i] = writes[i].op
		}
		wctx, cancel := context.WithTimeout(ctx, max(c.interval, roundWriteTimeout))
		w, err := c.cli.Txn(wctx).If(held).Then(ops...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("write the shares: %w", err)
		}
		if !w.Succeeded {
			return errNotLeader
		}
		for _, wr := range writes[:n] {
			if wr.st == nil {
				delete(c.mine, wr.service)
				delete(c.settled, wr.service)
			} else {
				c.mine[wr.service] = mineSteering{rev: w.Header.Revision, st: *wr.st}
				c.termWrote[wr.service] = true
				if wr.fixedAt != nil {
					// the same shares again, at this revision: still the law's fixed point
					c.settled[wr.service] = fixedPoint{*wr.fixedAt, w.Header.Revision}
				}
			}
		}
		stats.Writes += n
		stats.Bytes += size
		writes = writes[n:]
	}
	stats.Write = time.Since(wrote)
	c.mu.Lock()
	c.rounds++
	c.written = written
	c.last = stats
	c.mu.Unlock()
	return nil
}

// steeringWrite is a put of a service's shares (st), or the delete of its key (st nil).
// fixedAt is the service's generation when the law gave back the shares in force (a
// refresh, or a term's first write of them), nil when they moved: once written, a
// round does not decide them again while that generation stands.
type steeringWrite struct {
	op      clientv3.Op
	size    int
	service string
	st      *wire.Steering
	fixedAt *viewGen
}

// current is a service's shares in force in snap, and the revision of their write:
// those this controller wrote, unless the view shows a later write of the key, or its
// delete after the write; else the key decoded. had is false when the service has none
// (or none that decode).
func (c *Controller) current(service string, snap fleetSnapshot) (st wire.Steering, rev int64, had bool) {
	sv, ok := snap.steering[service]
	if m, mine := c.mine[service]; mine && (ok && sv.rev <= m.rev || !ok && snap.rev < m.rev) {
		return m.st, m.rev, true // the view may not have caught up with the write yet
	}
	if !ok || decode.JSONInto(sv.value, decode.MaxFileSize, &st) != nil {
		return wire.Steering{}, 0, false
	}
	return st, sv.rev, true
}

// decodeSpec reads a service document of the fleet store (YAML, bounded by package
// decode) into its wire form.
func decodeSpec(data []byte, spec *wire.ServiceSpec) error {
	doc, err := decode.YAML(data)
	if err != nil {
		return err
	}
	return doc.Decode(spec)
}
