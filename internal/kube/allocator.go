package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// A Claim is what a Service asks of an address: the pools select it by its labels
// and its namespace's, and it shares an address only with Services of the same
// sharing key whose ports differ from its own.
type Claim struct {
	Service         string // namespace/name
	Namespace       string
	NamespaceLabels labels.Set // the labels of the Namespace object
	Labels          labels.Set
	SharingKey      string // the manifold.io/allow-shared-ip annotation; "" shares with no one
	Ports           []Port
}

// A Port is one port of a Service, as two Services sharing an address must not
// both use it.
type Port struct {
	Protocol string
	Port     int32
}

// Reasons of the allocator's errors, which are also the reasons of the Events the
// controller records on the Service.
const (
	ReasonTaken     = "AddressTaken"
	ReasonExhausted = "PoolExhausted"
	ReasonNotInPool = "AddressNotInPool"
)

// An AllocError is why a Service gets no address; Reason is one of the Reason
// constants.
type AllocError struct {
	Reason string
	Msg    string
}

func (e *AllocError) Error() string { return e.Msg }

// The Allocator keeps which Service holds which address. It is not safe for
// concurrent use: the controller's one worker owns it.
type Allocator struct {
	pools   []*Pool // sorted by name, so that the first pool to serve a Service is stable
	holders map[netip.Addr]map[string]Claim
	held    map[string][]netip.Addr // by Service
}

// NewAllocator is an allocator with no pool and no address held.
func NewAllocator() *Allocator {
	return &Allocator{holders: map[netip.Addr]map[string]Claim{}, held: map[string][]netip.Addr{}}
}

// SetPools replaces the pools. Addresses held stay held: the controller syncs every
// Service after a pool change, and Check refuses those no pool holds any more.
func (a *Allocator) SetPools(pools []*Pool) {
	a.pools = slices.Clone(pools)
	slices.SortFunc(a.pools, func(x, y *Pool) int { return strings.Compare(x.Name, y.Name) })
}

// Held returns the addresses svc holds.
func (a *Allocator) Held(svc string) []netip.Addr { return slices.Clone(a.held[svc]) }

// Check says whether c may hold addr: a pool that selects c holds it, and every other
// Service holding it shares with c.
func (a *Allocator) Check(c Claim, addr netip.Addr) error {
	if a.poolFor(c, addr, false) == nil {
		return &AllocError{ReasonNotInPool, fmt.Sprintf("%s is in no IPPool that selects this Service", addr)}
	}
	for svc, other := range a.holders[addr] {
		if svc != c.Service && !shareable(c, other) {
			return &AllocError{ReasonTaken, fmt.Sprintf("%s is taken by %s%s", addr, svc, whyNotShared(c, other))}
		}
	}
	return nil
}

func whyNotShared(c, other Claim) string {
	switch {
	case c.SharingKey == "" || other.SharingKey == "":
		return " (both need the annotation manifold.io/allow-shared-ip with the same key to share it)"
	case c.SharingKey != other.SharingKey:
		return fmt.Sprintf(" (sharing key %q, not %q)", other.SharingKey, c.SharingKey)
	default:
		return " (a port is in both Services)"
	}
}

func shareable(c, other Claim) bool {
	if c.SharingKey == "" || c.SharingKey != other.SharingKey {
		return false
	}
	for _, p := range c.Ports {
		if slices.Contains(other.Ports, p) {
			return false
		}
	}
	return true
}

func (a *Allocator) poolFor(c Claim, addr netip.Addr, autoOnly bool) *Pool {
	for _, p := range a.pools {
		if (!autoOnly || p.AutoAssign) && p.Selects(c) && p.Contains(addr) {
			return p
		}
	}
	return nil
}

// Pick chooses an address of the family (IPv6 when v6) for c from the pools that
// assign automatically, without taking it: first one that Services of c's sharing key
// already use and c may share, then the lowest free one of the first pool that has one.
func (a *Allocator) Pick(c Claim, v6 bool) (netip.Addr, error) {
	if c.SharingKey != "" {
		var shared []netip.Addr
		for addr, holders := range a.holders {
			if addr.Is6() == v6 && a.poolFor(c, addr, true) != nil && a.Check(c, addr) == nil && sharesKey(holders, c) {
				shared = append(shared, addr)
			}
		}
		if len(shared) > 0 {
			return slices.MinFunc(shared, netip.Addr.Compare), nil
		}
	}
	var served []string
	for _, p := range a.pools {
		if !p.AutoAssign || !p.Selects(c) {
			continue
		}
		served = append(served, p.Name)
		for _, r := range p.Ranges {
			if r.First.Is6() != v6 {
				continue
			}
			// The walk stops at the first free address: it visits at most as many
			// addresses as are held, however large the range.
			for addr := r.First; ; addr = addr.Next() {
				if a.free(c, addr) {
					return addr, nil
				}
				if addr == r.Last {
					break
				}
			}
		}
	}
	family := "IPv4"
	if v6 {
		family = "IPv6"
	}
	if len(served) == 0 {
		return netip.Addr{}, &AllocError{ReasonExhausted, "no IPPool with autoAssign selects this Service"}
	}
	return netip.Addr{}, &AllocError{ReasonExhausted, fmt.Sprintf("no free %s address in IPPool %s", family, strings.Join(served, ", "))}
}

// free: no Service but c's own holds addr.
func (a *Allocator) free(c Claim, addr netip.Addr) bool {
	for svc := range a.holders[addr] {
		if svc != c.Service {
			return false
		}
	}
	return true
}

func sharesKey(holders map[string]Claim, c Claim) bool {
	for svc, h := range holders {
		if svc != c.Service && h.SharingKey == c.SharingKey {
			return true
		}
	}
	return false
}

// Assign makes c's Service hold exactly addrs, when Check allows each; otherwise it
// changes nothing. It returns the addresses the Service held before and holds no more.
func (a *Allocator) Assign(c Claim, addrs []netip.Addr) (released []netip.Addr, err error) {
	for _, addr := range addrs {
		if err := a.Check(c, addr); err != nil {
			return nil, err
		}
	}
	for _, old := range a.held[c.Service] {
		if !slices.Contains(addrs, old) {
			a.drop(c.Service, old)
			released = append(released, old)
		}
	}
	for _, addr := range addrs {
		if a.holders[addr] == nil {
			a.holders[addr] = map[string]Claim{}
		}
		a.holders[addr][c.Service] = c
	}
	a.held[c.Service] = slices.Clone(addrs)
	if len(addrs) == 0 {
		delete(a.held, c.Service)
	}
	return released, nil
}

// Release frees every address svc holds, and returns them.
func (a *Allocator) Release(svc string) []netip.Addr {
	addrs := a.held[svc]
	for _, addr := range addrs {
		a.drop(svc, addr)
	}
	delete(a.held, svc)
	return addrs
}

func (a *Allocator) drop(svc string, addr netip.Addr) {
	delete(a.holders[addr], svc)
	if len(a.holders[addr]) == 0 {
		delete(a.holders, addr)
	}
}
