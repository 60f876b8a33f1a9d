package fleet

import (
	"errors"
	"fmt"
	"maps"
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
	flat     []config.Service           // the kept services sorted by name: a whole update
	// touched is the services kept or removed since the node last took an update: a
	// Delta update names only those (changes)
	touched map[string]struct{}
	// the kept services by key and by VIP: the candidates for config.Clash
	byKey   map[config.ServiceKey]string
	byVIP   map[netip.Addr]map[string]struct{}
	refused map[string]Refusal
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
		services: map[string]*config.Service{}, good: map[string][]byte{},
		byKey: map[config.ServiceKey]string{}, byVIP: map[netip.Addr]map[string]struct{}{},
		refused: map[string]Refusal{}, pending: map[string]pendingService{}, touched: map[string]struct{}{},
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
			if field, why := d.clash(dd.svc); why != "" {
				d.pending[dd.name] = pendingService{svc: dd.svc, doc: dd.doc}
				if field != "" {
					why = field + ": " + why
				}
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
			if _, why := d.clash(p.svc); why == "" {
				delete(d.pending, name)
				delete(d.refused, name)
				d.keep(p.svc, p.doc)
			}
		}
	}
	return changed, refused
}

// clash returns why svc cannot run beside the kept services (but its own last state),
// and the field of svc it is about (config.Clash); why is "" when it can.
func (d *desired) clash(svc *config.Service) (field, why string) {
	if name, ok := d.byKey[svc.Key()]; ok && name != svc.Name {
		if field, why = config.Clash(svc, d.services[name], "service "+name); why != "" {
			return field, why
		}
	}
	// the services of a VIP agree on being tunnels or not: one of them stands for all
	for name := range d.byVIP[svc.VIP] {
		if name != svc.Name {
			return config.Clash(svc, d.services[name], "service "+name)
		}
	}
	return "", ""
}

func (d *desired) keep(svc *config.Service, doc []byte) {
	i, found := d.at(svc.Name)
	if found {
		d.unindex(d.services[svc.Name])
		d.flat[i] = *svc
	} else {
		d.flat = slices.Insert(d.flat, i, *svc)
	}
	d.services[svc.Name], d.good[svc.Name] = svc, doc
	d.touched[svc.Name] = struct{}{}
	d.byKey[svc.Key()] = svc.Name
	if d.byVIP[svc.VIP] == nil {
		d.byVIP[svc.VIP] = map[string]struct{}{}
	}
	d.byVIP[svc.VIP][svc.Name] = struct{}{}
}

func (d *desired) remove(name string) bool {
	old, ok := d.services[name]
	if !ok {
		return false
	}
	d.unindex(old)
	d.touched[name] = struct{}{}
	delete(d.services, name)
	delete(d.good, name)
	if i, found := d.at(name); found {
		d.flat = slices.Delete(d.flat, i, i+1)
	}
	return true
}

// at finds service name in flat.
func (d *desired) at(name string) (int, bool) {
	return slices.BinarySearchFunc(d.flat, name, func(s config.Service, name string) int { return strings.Compare(s.Name, name) })
}

func (d *desired) unindex(svc *config.Service) {
	if d.byKey[svc.Key()] == svc.Name {
		delete(d.byKey, svc.Key())
	}
	delete(d.byVIP[svc.VIP], svc.Name)
	if len(d.byVIP[svc.VIP]) == 0 {
		delete(d.byVIP, svc.VIP)
	}
}

// list is the kept services, sorted by name (a copy: the update is the reconciler's).
func (d *desired) list() []config.Service {
	return slices.Clone(d.flat)
}

// changes is the services kept and the names of those removed since the node last
// took an update (forget): what a Delta update carries, sorted by name.
func (d *desired) changes() (changed []config.Service, gone []string) {
	for _, name := range slices.Sorted(maps.Keys(d.touched)) {
		if svc, ok := d.services[name]; ok {
			changed = append(changed, *svc)
		} else {
			gone = append(gone, name)
		}
	}
	return changed, gone
}

// forget starts the next changes afresh: the node took every change so far.
func (d *desired) forget() {
	clear(d.touched)
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
