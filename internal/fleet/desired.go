package fleet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/manifoldlb/manifold/internal/config"
)

// desired is the fleet's services as the node runs them: each service's document is
// decoded once, when it changes, into a typed, defaulted, validated config.Service
// (config.ParseService, the config file's own code for one service), and kept by name.
// A revision touches only the services whose documents it changes; what must hold
// between services (config.Clash) is checked against the kept ones, never by parsing
// the others again.
//
// A document that does not parse or validate, or that clashes with a kept service,
// refuses that service alone: it keeps its last good state (or stays absent) and the
// refusal is kept until a later document of the service is taken or it is deleted.
type desired struct {
	services map[string]*config.Service // the last good state of each service
	good     map[string][]byte          // the document of that state, for API edits
	names    []string                   // the kept services' names, sorted: the order of the update
	byVIP    map[netip.Addr][]string    // the kept services of each VIP, for Clash
	refused  map[string]Refusal
	// pending is the services refused for a clash only: valid alone, taken once the
	// services they clash with go or change
	pending map[string]pendingService
	// refusals counts the documents refused since the node started
	refusals uint64
}

// Refusal is a service document the node did not take: the service keeps its last
// good state, or is absent if it never had one.
type Refusal struct {
	Service  string
	Revision int64 // the revision of the refused document
	Error    string
}

type pendingService struct {
	svc *config.Service
	doc []byte
}

func newDesired() *desired {
	return &desired{
		services: map[string]*config.Service{}, good: map[string][]byte{}, byVIP: map[netip.Addr][]string{},
		refused: map[string]Refusal{}, pending: map[string]pendingService{},
	}
}

// decoded is one service document parsed, outside the source's lock.
type decoded struct {
	name string
	rev  int64
	doc  []byte // nil: the service was deleted
	svc  *config.Service
	err  error
}

// decodeService parses the document of service name (key is where the store keeps it, for
// the errors) within the node's config.
func decodeService(node *config.Config, key, name string, doc []byte, rev int64) decoded {
	d := decoded{name: name, rev: rev, doc: doc}
	if doc == nil {
		return d
	}
	d.svc, d.err = config.ParseService(key, doc, node)
	if d.err == nil && d.svc.Name != name {
		// an API write finds a service by its key: a key that names another service
		// would make the write delete one and create the other
		d.svc, d.err = nil, fmt.Errorf("%s holds service %q: a service's key must be its name", key, d.svc.Name)
	}
	return d
}

// take applies decoded documents in order and reports whether the kept services
// changed, and the documents refused.
func (d *desired) take(docs []decoded) (changed bool, refused []Refusal) {
	for _, dd := range docs {
		delete(d.pending, dd.name)
		if dd.doc == nil {
			delete(d.refused, dd.name)
			changed = d.remove(dd.name) || changed
			continue
		}
		if dd.err == nil {
			if why := d.clash(dd.svc); why != "" {
				d.pending[dd.name] = pendingService{svc: dd.svc, doc: dd.doc}
				dd.err = errors.New(why)
			}
		}
		if dd.err != nil {
			r := Refusal{Service: dd.name, Revision: dd.rev, Error: oneLine(dd.err)}
			d.refused[dd.name] = r
			d.refusals++
			refused = append(refused, r)
			continue
		}
		delete(d.refused, dd.name)
		d.keep(dd.svc, dd.doc)
		changed = true
	}
	if changed {
		// a service refused for a clash may fit now
		for name, p := range d.pending {
			if d.clash(p.svc) == "" {
				delete(d.pending, name)
				delete(d.refused, name)
				d.keep(p.svc, p.doc)
			}
		}
	}
	return changed, refused
}

// clash returns why svc cannot run beside the kept services (but its own last state),
// or "".
func (d *desired) clash(svc *config.Service) string {
	for _, name := range d.byVIP[svc.VIP] {
		if name == svc.Name {
			continue
		}
		if field, why := config.Clash(svc, d.services[name], "service "+name); why != "" {
			if field != "" {
				why = field + ": " + why
			}
			return why
		}
	}
	return ""
}

func (d *desired) keep(svc *config.Service, doc []byte) {
	if old, ok := d.services[svc.Name]; ok {
		d.unindex(old)
	} else {
		i, _ := slices.BinarySearch(d.names, svc.Name)
		d.names = slices.Insert(d.names, i, svc.Name)
	}
	d.services[svc.Name], d.good[svc.Name] = svc, doc
	d.byVIP[svc.VIP] = append(d.byVIP[svc.VIP], svc.Name)
}

func (d *desired) remove(name string) bool {
	old, ok := d.services[name]
	if !ok {
		return false
	}
	d.unindex(old)
	delete(d.services, name)
	delete(d.good, name)
	if i, found := slices.BinarySearch(d.names, name); found {
		d.names = slices.Delete(d.names, i, i+1)
	}
	return true
}

func (d *desired) unindex(svc *config.Service) {
	list := slices.DeleteFunc(d.byVIP[svc.VIP], func(n string) bool { return n == svc.Name })
	if len(list) == 0 {
		delete(d.byVIP, svc.VIP)
	} else {
		d.byVIP[svc.VIP] = list
	}
}

// list is the kept services, sorted by name (copies: the update is the reconciler's).
func (d *desired) list() []config.Service {
	out := make([]config.Service, len(d.names))
	for i, name := range d.names {
		out[i] = *d.services[name]
	}
	return out
}

// refusedList is the refused documents, sorted by service.
func (d *desired) refusedList() []Refusal {
	out := make([]Refusal, 0, len(d.refused))
	for _, r := range d.refused {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Refusal) int { return strings.Compare(a.Service, b.Service) })
	return out
}
