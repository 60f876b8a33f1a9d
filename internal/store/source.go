package store

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// SourceName is the name the file's updates carry.
const SourceName = "file"

// Source is the config file as a source of desired state (reconcile.Source): the node
// starts from Initial, and every reload (SIGHUP) and API write reaches the sink as an
// update whose Commit writes the file and whose Revert puts it back.
type Source struct {
	store  *Store
	sink   reconcile.Sink
	log    *slog.Logger
	reload chan struct{}

	// mu makes changes one at a time: an edit is made against the state it replaces.
	mu sync.Mutex
	// whole says the next update carries every service: the node refused the last, so
	// what it runs may differ from the store's state before the change (guarded by mu).
	// Else an update names only what the change added, changed or removed
	// (Update.Delta), and the node settles only that.
	whole bool

	reloads, reloadFailures atomic.Uint64
}

func NewSource(st *Store, sink reconcile.Sink, log *slog.Logger) *Source {
	return &Source{store: st, sink: sink, log: log, reload: make(chan struct{}, 1)}
}

// Store is the file the source reads.
func (s *Source) Store() *Store { return s.store }

// Initial is the update of the file as the node started with it.
func (s *Source) Initial() reconcile.Update {
	return reconcile.Update{Source: SourceName, Services: s.store.Config().Services, Revision: s.store.Revision()}
}

// Reload asks Run to read the file again (SIGHUP); a reload already pending absorbs it.
func (s *Source) Reload() {
	select {
	case s.reload <- struct{}{}:
	default:
	}
}

// Reloads counts reloads asked for, and those refused or failed.
func (s *Source) Reloads() (asked, failed uint64) {
	return s.reloads.Load(), s.reloadFailures.Load()
}

// Run applies each reload until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.reload:
			s.rereadAndApply(ctx)
		}
	}
}

// rereadAndApply applies the file again; a file with any problem, or one that changes
// what takes effect only on restart, changes nothing.
func (s *Source) rereadAndApply(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloads.Add(1)
	ch, err := s.store.Reread()
	if err == nil {
		err = restartOnly(s.store.Config(), ch)
	}
	if err != nil {
		s.reloadFailures.Add(1)
		s.log.Error("reload rejected, old config keeps serving", "config", s.store.Path(), "err", oneLine(err))
		return
	}
	if err := s.submit(ctx, ch); err != nil {
		s.reloadFailures.Add(1)
		s.log.Error("reload failed, previous state restored", "config", s.store.Path(), "err", err)
		return
	}
	s.log.Info("config reloaded", "config", s.store.Path(), "services", len(ch.Config.Services), "revision", ch.Revision())
}

// Change makes an edit of the file (an API write) and applies it: the file is written
// and fsynced first, so what the node runs is what a restart would run; when the kernel
// refuses, the file is put back. On any error nothing changed, but for *Committed:
// the change was made and the error carries a warning.
func (s *Source) Change(ctx context.Context, edit func(*Store) (*Change, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, err := edit(s.store)
	if err != nil {
		return err
	}
	if err := s.submit(ctx, ch); err != nil {
		var kerr *reconcile.KernelError
		var conflict *reconcile.ConflictError
		switch {
		case errors.As(err, &kerr):
			return &Error{Kind: Failed, Problems: []Problem{{Message: kerr.Error()}}}
		case errors.As(err, &conflict):
			return &Error{Kind: Conflict, Problems: []Problem{{Message: conflict.Error()}}}
		}
		return err
	}
	s.log.Info("config changed through the API", "change", ch.Summary, "config", s.store.Path(), "revision", ch.Revision())
	if w := ch.Warning(); w != "" {
		s.log.Warn("config change made, with a problem", "config", s.store.Path(), "warning", w)
		return &Committed{Warning: w}
	}
	return nil
}

// submit hands the change to the sink: the services it changes, or every service
// after the node refused the last update. Its caller holds mu.
func (s *Source) submit(ctx context.Context, ch *Change) error {
	u := reconcile.Update{
		Source: SourceName, Revision: ch.Revision(), BGP: ch.Config.BGP,
		Commit: func() error { return s.store.Commit(ch) },
		Revert: func() error { return s.store.Revert(ch) },
	}
	if s.whole {
		u.Services = ch.Config.Services
	} else {
		u.Delta = true
		u.Services, u.Gone = ch.Changes()
	}
	err := s.sink.Submit(ctx, u)
	s.whole = err != nil
	return err
}

// restartOnly refuses a reload that changes what takes effect only when the node
// starts: the node section, the fleet section, and of the bgp section its presence,
// the node's AS and its router id (peers, communities and the drain time change live).
func restartOnly(running *config.Config, ch *Change) error {
	if !reflect.DeepEqual(ch.Config.Node, running.Node) {
		return errors.New("node: the node section changed; it takes effect only on restart (services were not reloaded either)")
	}
	was, now := running.BGP, ch.Config.BGP
	switch {
	case (was == nil) != (now == nil):
		return errors.New("bgp: the bgp section was added or removed; that takes effect only on restart (services were not reloaded either)")
	case was != nil && (was.ASN != now.ASN || was.RouterID != now.RouterID):
		return errors.New("bgp: asn or router_id changed; they take effect only on restart (services were not reloaded either)")
	}
	if !reflect.DeepEqual(ch.Config.Fleet, running.Fleet) {
		return errors.New("fleet: the fleet section changed; it takes effect only on restart (services were not reloaded either)")
	}
	return nil
}

// oneLine folds a multi-line error (every problem of a config file) for one log line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
