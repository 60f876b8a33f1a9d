// Package store keeps a node's desired state durable. The store is the node's config
// file itself — there is no second copy to disagree with it:
//
//	API write ─► edit the service's lines ─► config.ParseFileService + config.Fits ─► Change
//	             (splice.go; a file that cannot be spliced: the whole tree, config.Parse)  │
//	node run loop: Commit (atomic write: tmp, fsync, rename, fsync dir) ─► apply to kernel
//	                                                  (kernel refuses: Revert the file)
//	SIGHUP ─► Reread ─► Change (nothing to write) ─► apply ─► Commit
//
// An API write is persisted before it takes effect, so a crash at any moment leaves the
// file either as it was or with the whole change, and a restart applies exactly that.
// Edits keep everything they do not touch: comments, order, fields. The file as the
// node runs it is the effective config; an API write is refused (Conflict) while the
// file on disk has edits the node has not loaded (SIGHUP applies them), so neither the
// operator's edit nor the API's change is ever silently dropped.
package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
)

// Store is a node's config file. Edits (PutService, …) prepare a Change without
// touching anything; Commit makes it durable. Edits and Commit/Revert must come from one
// goroutine (the node's run loop); Config, Revision and Redacted are safe from any.
type Store struct {
	path string

	mu   sync.Mutex // guards data, cfg and layout
	data []byte     // the file as the node runs it
	cfg  *config.Config
	// layout is where each service is in data, for an edit of one service (splice.go);
	// nil when this file's edits render the whole tree
	layout *layout
	// memory: no file behind the document (Memory); edits never look at the disk.
	memory bool
}

// Open reads and validates the config file.
func Open(path string) (*Store, error) {
	data, err := decode.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, root, err := config.ParseTree(path, data)
	if err != nil {
		return nil, err
	}
	return &Store{path: path, data: data, cfg: cfg, layout: layoutOf(root, data, cfg)}, nil
}

// Path is the config file's path, as given.
func (s *Store) Path() string { return s.path }

// Config is the config the node runs.
func (s *Store) Config() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Revision identifies the contents of the file the node runs: the SHA-256 of its bytes.
func (s *Store) Revision() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return revision(s.data)
}

func revision(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// InSync reports whether the file on disk is the one the node runs (false: edited and
// not reloaded yet, or unreadable).
func (s *Store) InSync() bool {
	s.mu.Lock()
	cur := s.data
	s.mu.Unlock()
	same, err := sameOnDisk(s.path, cur)
	return err == nil && same
}

// Kind says what went wrong with an edit.
type Kind int

const (
	Invalid     Kind = iota + 1 // the request is wrong
	NotFound                    // no such service or backend
	Conflict                    // the request clashes with the current state
	Failed                      // the file could not be read or written, or the change not applied
	Unreachable                 // the store (the fleet's etcd) cannot be reached; nothing changed
)

// Problem is one thing wrong with a request; Field is relative to the request body or
// names a path parameter ("name", "address"), "" when it is not about one field.
type Problem struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Error is why an edit was refused; nothing was changed.
type Error struct {
	Kind     Kind
	Problems []Problem
}

func (e *Error) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.Message
		if p.Field != "" {
			s[i] = p.Field + ": " + p.Message
		}
	}
	return strings.Join(s, "; ")
}

func fail(kind Kind, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Problems: []Problem{{Field: field, Message: fmt.Sprintf(format, args...)}}}
}

// Change is a validated new version of the config file, not yet in effect.
type Change struct {
	Config  *config.Config // the config after the change
	Created bool           // PutService added a service
	Summary string         // what changed, for the log: "service web: backend 10.0.1.1 drained"

	// service is the one service an edit of one service (PutService, DeleteService, a
	// backend's weight) may have changed or removed: "" when any may have (a reload)
	service            string
	data, prev         []byte
	prevCfg            *config.Config
	layout, prevLayout *layout
	// at is 1 + the index of the service a spliced edit changed (0: not known); see
	// Changes
	at      int
	write   bool // an edit, to be written; a reload adopts what is on disk already
	warning string
	rev     string // Revision, once asked: a hash of the whole file
}

// Revision identifies the file's contents after the change (see Store.Revision).
func (ch *Change) Revision() string {
	if ch.rev == "" {
		ch.rev = revision(ch.data)
	}
	return ch.rev
}

// Changes is what the change does to the services: those added or changed, and the
// names of those gone, each sorted by name. An edit of one service looks at that
// service only; a reload compares every service with the one of its name before.
func (ch *Change) Changes() (changed []config.Service, gone []string) {
	if i := ch.at - 1; i >= 0 && ch.service != "" {
		// a spliced edit knows where its service is, in the list before and after (put,
		// weight: both; added: after; deleted: before): no look at the others
		was := i < len(ch.prevCfg.Services) && ch.prevCfg.Services[i].Name == ch.service
		switch {
		case i < len(ch.Config.Services) && ch.Config.Services[i].Name == ch.service:
			if !was || !reflect.DeepEqual(ch.prevCfg.Services[i], ch.Config.Services[i]) {
				changed = append(changed, ch.Config.Services[i])
			}
			return changed, nil
		case was:
			return nil, []string{ch.service}
		}
	}
	before := map[string]*config.Service{}
	for i, s := range ch.prevCfg.Services {
		if ch.service == "" || s.Name == ch.service {
			before[s.Name] = &ch.prevCfg.Services[i]
		}
	}
	for _, s := range ch.Config.Services {
		if ch.service != "" && s.Name != ch.service {
			continue
		}
		if old, ok := before[s.Name]; !ok || !reflect.DeepEqual(*old, s) {
			changed = append(changed, s)
		}
		delete(before, s.Name)
	}
	gone = slices.Sorted(maps.Keys(before))
	slices.SortFunc(changed, func(a, b config.Service) int { return strings.Compare(a.Name, b.Name) })
	return changed, gone
}

// Reread reads the file again (SIGHUP). On a problem it returns config.Errors.
func (s *Store) Reread() (*Change, error) {
	data, err := decode.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	cfg, root, err := config.ParseTree(s.path, data)
	if err != nil {
		return nil, err
	}
	prev, prevCfg, prevLayout := s.current()
	return &Change{Config: cfg, data: data, prev: prev, prevCfg: prevCfg, layout: layoutOf(root, data, cfg), prevLayout: prevLayout}, nil
}

// Commit makes a change the store's state, writing the file first for an edit. On an
// error nothing changed.
func (s *Store) Commit(ch *Change) error {
	if ch.write && !bytes.Equal(ch.data, ch.prev) {
		same, err := sameOnDisk(s.path, ch.prev)
		if err != nil {
			return fail(Failed, "", "cannot read the config file: %v", err)
		}
		if !same {
			return changedOnDisk(s.path)
		}
		switch err := writeAtomic(s.path, ch.data); {
		case isNotDurable(err):
			// the file holds the change: the store follows it, or the next write
			// would find the file "edited" and refuse
			ch.warning = err.Error()
		case err != nil:
			return fail(Failed, "", "cannot write the config file: %v", err)
		}
	}
	s.set(ch.data, ch.Config, ch.layout)
	return nil
}

// Warning is what went wrong after Commit wrote the change ("" when nothing did): the
// change holds, but a power cut may still undo it.
func (ch *Change) Warning() string { return ch.warning }

// Committed is the answer to a change that was made, with a warning about a step
// after it that failed (see Change.Warning). It is an error only to travel where
// errors go: a caller that finds it reports success and passes the warning on.
type Committed struct{ Warning string }

func (c *Committed) Error() string { return "the change was made; warning: " + c.Warning }

// Revert undoes a committed change (the kernel refused it): the file and the state
// are what they were before.
func (s *Store) Revert(ch *Change) error {
	if ch.write && !bytes.Equal(ch.data, ch.prev) {
		// a restore that may not survive a power cut did restore the file: the state
		// follows it (the caller reports the kernel's refusal, which is the news)
		if err := writeAtomic(s.path, ch.prev); err != nil && !isNotDurable(err) {
			return fmt.Errorf("restore the config file: %w", err)
		}
	}
	s.set(ch.prev, ch.prevCfg, ch.prevLayout)
	return nil
}

func (s *Store) current() ([]byte, *config.Config, *layout) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data, s.cfg, s.layout
}

func (s *Store) set(data []byte, cfg *config.Config, l *layout) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.cfg, s.layout = data, cfg, l
}

func changedOnDisk(path string) *Error {
	return fail(Conflict, "", "the config file %s was edited since the node loaded it: apply the edit (SIGHUP) or undo it before changing the config through the API", path)
}

// edit is an edit in progress: the file as the node runs it, where its services are
// (layout, nil when they cannot be spliced) and, for an edit of the whole tree, its
// document tree (doc; nil: the edit of one service is spliced in, splice.go).
type edit struct {
	s      *Store
	doc    *yaml.Node
	layout *layout
	data   []byte
	cfg    *config.Config
}

// begin starts an edit of one service: spliced in when the file allows it (see
// splice.go), else on the whole tree.
func (s *Store) begin() (*edit, error) { return s.beginEdit(true) }

// beginTree starts an edit of the whole document tree (the bgp section's peers).
func (s *Store) beginTree() (*edit, error) { return s.beginEdit(false) }

// beginEdit starts an edit. It refuses when the file on disk is not the one the node
// runs: writing the node's version back would throw the operator's edit away.
func (s *Store) beginEdit(splice bool) (*edit, error) {
	data, cfg, l := s.current()
	if !s.memory {
		same, err := sameOnDisk(s.path, data)
		if err != nil {
			return nil, fail(Failed, "", "cannot read the config file: %v", err)
		}
		if !same {
			return nil, changedOnDisk(s.path)
		}
	}
	if l != nil && splice {
		return &edit{s: s, layout: l, data: data, cfg: cfg}, nil
	}
	doc, err := parseTree(data)
	if err != nil {
		return nil, fail(Failed, "", "cannot edit the config file: %v", err)
	}
	return &edit{s: s, doc: doc, layout: l, data: data, cfg: cfg}, nil
}

// with is the config before the edit with services in place of its services: what an
// edit of the services must leave of the rest (node, bgp, tunnels, kubernetes, …).
func (e *edit) with(services []config.Service) *config.Config {
	c := *e.cfg
	c.Services = services
	return &c
}

// unchanged is the change of an edit that turned out to change nothing.
func (e *edit) unchanged() *Change {
	return &Change{Config: e.cfg, data: e.data, prev: e.data, prevCfg: e.cfg, layout: e.layout, prevLayout: e.layout, write: true}
}

// finish renders the edited tree and parses it back with config.Parse. The result must
// be what want makes of it: the current config with only the intended change (want may
// take a changed value, a weight, from the result); anything else (a YAML construct the
// editor got wrong) refuses the edit rather than write it. Problems of
// the parse are reported with fields relative to prefix (the service or backend the
// request is about).
func (e *edit) finish(prefix string, want func(got *config.Config) *config.Config) (*Change, error) {
	data, err := render(e.doc)
	if err != nil {
		return nil, fail(Failed, "", "cannot render the config file: %v", err)
	}
	cfg, root, err := config.ParseTree(e.s.path, data)
	if err != nil {
		return nil, invalid(err, prefix)
	}
	if !reflect.DeepEqual(cfg, want(cfg)) {
		return nil, tooMuch()
	}
	return &Change{Config: cfg, data: data, prev: e.data, prevCfg: e.cfg, write: true,
		layout: layoutOf(root, data, cfg), prevLayout: e.layout}, nil
}

// tooMuch is the answer to an edit whose result is not what it asked for.
func tooMuch() *Error {
	return fail(Failed, "", "the edit would change more of the config file than asked (a construct the API cannot edit); nothing was changed: edit the file and send SIGHUP instead")
}

// invalid turns the errors of config.Parse into problems relative to prefix: for a
// service body, "services[0].backends[1].weight" becomes "backends[1].weight".
func invalid(err error, prefix string) *Error {
	var errs config.Errors
	if !errors.As(err, &errs) {
		return fail(Invalid, "", "%v", err)
	}
	out := &Error{Kind: Invalid}
	for _, ce := range errs {
		field := ce.Field
		switch {
		case field == prefix:
			field = ""
		case strings.HasPrefix(field, prefix+"."):
			field = strings.TrimPrefix(field, prefix+".")
		}
		msg := strings.ReplaceAll(ce.Msg, prefix+".", "")
		out.Problems = append(out.Problems, Problem{Field: field, Message: msg})
	}
	return out
}

// body parses a JSON request body that must be an object.
func body(data []byte, what string) (*yaml.Node, error) {
	n, err := decode.JSON(data)
	if err != nil {
		return nil, fail(Invalid, "", "%v", err)
	}
	if n.Kind != yaml.MappingNode {
		return nil, fail(Invalid, "", "the body must be a JSON object (%s)", what)
	}
	return n, nil
}

// PutService creates or replaces the service name with the JSON body spec (the fields
// of a service in the config file; name may be left out). Left-out fields take their
// defaults, as in the file.
func (s *Store) PutService(name string, spec []byte) (*Change, error) {
	item, err := body(spec, "a service")
	if err != nil {
		return nil, err
	}
	switch n := get(item, "name"); {
	case n == nil: // name first, as an operator writes it
		item.Content = append([]*yaml.Node{strNode("name"), strNode(name)}, item.Content...)
	case n.ShortTag() == "!!null":
		set(item, "name", strNode(name))
	case n.Kind != yaml.ScalarNode || n.Value != name:
		return nil, fail(Invalid, "name", "must be the name in the URL (%q) or left out", name)
	}
	e, err := s.begin()
	if err != nil {
		return nil, err
	}
	svc, err := fileService(e.s.path, item, e.cfg, "")
	if err != nil {
		return nil, err
	}
	for _, o := range e.cfg.Services {
		if o.Name != name && o.VIP == svc.VIP && o.Port == svc.Port && o.Protocol == svc.Protocol {
			return nil, ServedAlready(svc, o.Name)
		}
	}
	var ch *Change
	if e.doc == nil {
		i := slices.IndexFunc(e.cfg.Services, func(o config.Service) bool { return o.Name == name })
		if i < 0 {
			i = len(e.cfg.Services)
		}
		var err error
		if ch, err = e.spliced(i, item, svc); err != nil {
			return nil, err
		}
	} else {
		list := services(e.doc)
		want := e.with(slices.Clone(e.cfg.Services))
		i := findService(list, name)
		if i < 0 {
			i = len(list.Content)
			list.Content = append(list.Content, item)
			want.Services = append(want.Services, *svc)
		} else {
			list.Content[i] = item
			want.Services[slices.IndexFunc(want.Services, func(o config.Service) bool { return o.Name == name })] = *svc
		}
		if ch, err = e.finish(fmt.Sprintf("services[%d]", i), func(*config.Config) *config.Config { return want }); err != nil {
			return nil, err
		}
	}
	ch.service = name
	ch.Created = !slices.ContainsFunc(e.cfg.Services, func(o config.Service) bool { return o.Name == name })
	ch.Summary = fmt.Sprintf("service %s replaced", name)
	if ch.Created {
		ch.Summary = fmt.Sprintf("service %s created", name)
	}
	return ch, nil
}

// ServedAlready is the answer to a write of service svc on the vip/port/protocol that
// service other serves: a conflict, the same from a file node and a fleet node.
func ServedAlready(svc *config.Service, other string) *Error {
	return fail(Conflict, "vip", "%s port %d/%s is served by service %q already", svc.VIP, svc.Port, svc.Protocol, other)
}

// DeleteService removes the service name.
func (s *Store) DeleteService(name string) (*Change, error) {
	e, err := s.begin()
	if err != nil {
		return nil, err
	}
	if e.doc == nil {
		i := slices.IndexFunc(e.cfg.Services, func(o config.Service) bool { return o.Name == name })
		if i < 0 {
			return nil, fail(NotFound, "name", "no service %q", name)
		}
		ch, err := e.spliced(i, nil, nil)
		if err != nil {
			return nil, err
		}
		ch.service = name
		ch.Summary = fmt.Sprintf("service %s deleted", name)
		return ch, nil
	}
	list := services(e.doc)
	i := findService(list, name)
	if i < 0 {
		return nil, fail(NotFound, "name", "no service %q", name)
	}
	list.Content = slices.Delete(list.Content, i, i+1)
	want := e.with(nil)
	for _, o := range e.cfg.Services {
		if o.Name != name {
			want.Services = append(want.Services, o)
		}
	}
	ch, err := e.finish("services", func(*config.Config) *config.Config { return want })
	if err != nil {
		return nil, err
	}
	ch.service = name
	ch.Summary = fmt.Sprintf("service %s deleted", name)
	return ch, nil
}

// drainMark is the comment a drain leaves on the weight it sets to 0, so that undrain
// can restore the weight the backend had, after a restart too.
var drainMark = regexp.MustCompile(`manifold: drained; undrain restores weight (\d+)`)

// SetWeight sets the weight of a backend from the JSON body {"weight": N}.
func (s *Store) SetWeight(service, backend string, spec []byte) (*Change, error) {
	m, err := body(spec, `{"weight": N}`)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i].Value; k != "weight" {
			return nil, fail(Invalid, k, "unknown field (accepted: weight)")
		}
	}
	w := get(m, "weight")
	if w == nil || w.ShortTag() == "!!null" {
		return nil, fail(Invalid, "weight", "required")
	}
	return s.editBackend(service, backend, "weight set", func(b *yaml.Node, _ uint32) bool {
		set(b, "weight", w)
		return true
	})
}

// Drain sets a backend's weight to 0: it keeps its flows and gets no new ones. The
// weight it had is kept in a comment in the file, for Undrain.
func (s *Store) Drain(service, backend string) (*Change, error) {
	return s.editBackend(service, backend, "drained", func(b *yaml.Node, weight uint32) bool {
		if weight == 0 {
			return false
		}
		w := intNode(0)
		w.LineComment = fmt.Sprintf("# manifold: drained; undrain restores weight %d", weight)
		set(b, "weight", w)
		return true
	})
}

// Undrain gives a drained backend (weight 0) the weight it had before Drain, or 1
// when that is not known (the weight was set to 0 otherwise).
func (s *Store) Undrain(service, backend string) (*Change, error) {
	return s.editBackend(service, backend, "undrained", func(b *yaml.Node, weight uint32) bool {
		if weight != 0 {
			return false
		}
		restore := uint32(config.DefaultWeight)
		if old := get(b, "weight"); old != nil {
			if m := drainMark.FindStringSubmatch(old.LineComment); m != nil {
				if w, err := strconv.ParseUint(m[1], 10, 32); err == nil && w > 0 {
					restore = uint32(w)
				}
			}
		}
		set(b, "weight", intNode(restore))
		return true
	})
}

// editBackend runs fn on the backend's mapping; fn gets the backend's current weight
// and reports whether it changed anything. Only the backend's weight may change. what
// says what was done, for the change's summary.
func (s *Store) editBackend(service, backend, what string, fn func(b *yaml.Node, weight uint32) bool) (*Change, error) {
	addr, err := netip.ParseAddr(backend)
	if err != nil {
		return nil, fail(Invalid, "address", "%q is not an IPv4 or IPv6 address", backend)
	}
	e, err := s.begin()
	if err != nil {
		return nil, err
	}
	si := slices.IndexFunc(e.cfg.Services, func(o config.Service) bool { return o.Name == service })
	if si < 0 {
		return nil, fail(NotFound, "name", "no service %q", service)
	}
	bi := slices.IndexFunc(e.cfg.Services[si].Backends, func(b config.Backend) bool { return b.Address == addr })
	if bi < 0 {
		return nil, fail(NotFound, "address", "service %q has no backend %s", service, addr)
	}
	var item *yaml.Node
	if e.doc == nil {
		if item, err = e.layout.item(e.data, e.layout.spans[si]); err != nil {
			return nil, fail(Failed, "", "cannot edit service %q in the config file: %v", service, err)
		}
	} else {
		list := services(e.doc)
		item = list.Content[findService(list, service)]
	}
	node, ni := findBackend(item, addr)
	if node == nil {
		return nil, fail(Failed, "", "backend %s of service %q not found in the config file", addr, service)
	}
	old := e.cfg.Services[si].Backends[bi].Weight
	if !fn(node, old) {
		ch := e.unchanged()
		ch.service = service
		ch.Summary = fmt.Sprintf("service %s: backend %s %s already (weight %d)", service, addr, what, old)
		return ch, nil
	}
	// the weight is the one thing that may change
	weightOf := func(got *config.Service) config.Service {
		want := e.cfg.Services[si]
		want.Backends = slices.Clone(want.Backends)
		if bi < len(got.Backends) {
			want.Backends[bi].Weight = got.Backends[bi].Weight
		}
		return want
	}
	var ch *Change
	if e.doc == nil {
		svc, err := fileService(e.s.path, item, e.cfg, fmt.Sprintf("backends[%d]", ni))
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(*svc, weightOf(svc)) {
			return nil, tooMuch()
		}
		if ch, err = e.spliced(si, item, svc); err != nil {
			return nil, err
		}
	} else {
		prefix := fmt.Sprintf("services[%d].backends[%d]", findService(services(e.doc), service), ni)
		ch, err = e.finish(prefix, func(got *config.Config) *config.Config {
			want := e.with(slices.Clone(e.cfg.Services))
			if si < len(got.Services) {
				want.Services[si] = weightOf(&got.Services[si])
			}
			return want
		})
		if err != nil {
			return nil, err
		}
	}
	ch.service = service
	ch.Summary = fmt.Sprintf("service %s: backend %s %s (weight %d → %d)", service, addr, what, old, ch.Config.Services[si].Backends[bi].Weight)
	return ch, nil
}

// secretKey matches the keys whose values Redacted hides: node.api_token, BGP peer
// passwords, and whatever secret a later field holds under such a name (not
// node.api_token_file: a path is no secret).
var secretKey = regexp.MustCompile(`(?i)(token|password|secret)$`)

// Redacted returns the config file as the node runs it, with every secret replaced by
// "<redacted>": what `manifold ctl config` shows.
func (s *Store) Redacted() ([]byte, error) {
	data, _, _ := s.current()
	doc, err := parseTree(data)
	if err != nil {
		return nil, err
	}
	redact(doc)
	return render(doc)
}

func redact(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if v := n.Content[i+1]; v.Kind == yaml.ScalarNode && v.Value != "" && v.ShortTag() != "!!null" && secretKey.MatchString(n.Content[i].Value) {
				n.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "<redacted>", LineComment: v.LineComment}
			}
		}
	}
	for _, c := range n.Content {
		redact(c)
	}
}
