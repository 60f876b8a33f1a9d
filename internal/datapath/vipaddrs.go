package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// A VIP filter (bpf/lib/vipfilter.h): per family a hash map holding every address, and
// in front of it an array of slots holding, at each address's slot, one of the
// addresses hashing there and how many do. The program asks the hash map only for a
// slot more than one address shares; the writer below, the filter's only one,
// remembers which. The node's filter (lb4/lb6_vip_addrs and _slots) and the backend
// agent's (lb_decap_vips4/6 and lb_decap_slots4/6) are two of these.

const vipSlots = uint32(lbLbSharedLB_VIP_SLOTS)

// vipSlot mirrors vip_slot() of bpf/lib/vipfilter.h over the address's words, for a
// filter of `slots` slots (a power of two).
func vipSlot(a netip.Addr, slots uint32) uint32 {
	w := addrWords(a)
	x := w[0] ^ w[1] ^ w[2] ^ w[3]
	return (x ^ x>>16) & (slots - 1)
}

type vipSlotKey struct {
	v6   bool
	slot uint32
}

// vipFilter writes one VIP filter's four maps.
type vipFilter struct {
	name           string // the maps' common prefix, for errors
	addrs4, addrs6 *ebpf.Map
	slots4, slots6 *ebpf.Map
	slots          uint32

	mu        sync.Mutex
	slotAddrs map[vipSlotKey][]netip.Addr // the addresses of each used slot
}

func newVIPFilter(name string, addrs4, addrs6, slots4, slots6 *ebpf.Map) *vipFilter {
	return &vipFilter{name: name, addrs4: addrs4, addrs6: addrs6, slots4: slots4, slots6: slots6,
		slots: slots4.MaxEntries(), slotAddrs: map[vipSlotKey][]netip.Addr{}}
}

func (f *vipFilter) slotOf(a netip.Addr) vipSlotKey {
	return vipSlotKey{a.Is6(), vipSlot(a, f.slots)}
}

// addrsMap returns the hash map of a's family and a as its key (the bytes on the wire).
func (f *vipFilter) addrsMap(a netip.Addr) (*ebpf.Map, any) {
	if a.Is4() {
		return f.addrs4, a.As4()
	}
	return f.addrs6, a.As16()
}

// put adds a (unmapped) with value (the node: how many services it carries; the agent: 1).
func (f *vipFilter) put(a netip.Addr, value uint32) error {
	m, key := f.addrsMap(a)
	f.mu.Lock()
	defer f.mu.Unlock()
	// the hash map first: a slot that says "shared" must find every address there
	if err := m.Put(key, value); err != nil {
		return fmt.Errorf("%s addresses: put %s: %w", f.name, a, err)
	}
	k := f.slotOf(a)
	if slices.Contains(f.slotAddrs[k], a) {
		return nil
	}
	addrs := append(slices.Clone(f.slotAddrs[k]), a)
	if err := f.putSlot(k, addrs); err != nil {
		return err
	}
	f.slotAddrs[k] = addrs
	return nil
}

// remove takes a out; an address that is not there is not an error (the maps are what
// the caller wants either way).
func (f *vipFilter) remove(a netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.slotOf(a)
	if i := slices.Index(f.slotAddrs[k], a); i >= 0 {
		// the slot first: it must never send an address to the hash map that lacks it
		addrs := slices.Delete(slices.Clone(f.slotAddrs[k]), i, i+1)
		if err := f.putSlot(k, addrs); err != nil {
			return err
		}
		if len(addrs) == 0 {
			delete(f.slotAddrs, k)
		} else {
			f.slotAddrs[k] = addrs
		}
	}
	m, key := f.addrsMap(a)
	if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("%s addresses: delete %s: %w", f.name, a, err)
	}
	return nil
}

// putSlot writes the slot holding addrs (none: an empty slot). Both filters' slots are
// the same C structs (struct lb4_vip_slot, lb6_vip_slot).
func (f *vipFilter) putSlot(k vipSlotKey, addrs []netip.Addr) error {
	var err error
	if k.v6 {
		v := lbLb6VipSlot{Count: uint32(len(addrs))}
		if len(addrs) > 0 {
			v.Addr = addrWords(addrs[0])
		}
		err = f.slots6.Put(k.slot, v)
	} else {
		v := lbLb4VipSlot{Count: uint32(len(addrs))}
		if len(addrs) > 0 {
			v.Addr = addrWords(addrs[0])[0]
		}
		err = f.slots4.Put(k.slot, v)
	}
	if err != nil {
		return fmt.Errorf("%s slots: put %d: %w", f.name, k.slot, err)
	}
	return nil
}

// PutVIPAddr marks addr as carrying `services` services (> 0).
func (lb *LB) PutVIPAddr(addr netip.Addr, services uint32) error {
	return lb.vips.put(addr, services)
}

// DeleteVIPAddr takes addr out of the node's VIP filter.
func (lb *LB) DeleteVIPAddr(addr netip.Addr) error {
	return lb.vips.remove(addr)
}
