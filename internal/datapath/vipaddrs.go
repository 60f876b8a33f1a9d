package datapath

import (
	"errors"
	"fmt"
	"maps"
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
	return f.putMany([]netip.Addr{a}, []uint32{value})
}

// putMany adds many addresses (unmapped) with their values, with one batch update of
// each map: the addresses of a node's 100 000 services took 200 000 updates one by one.
func (f *vipFilter) putMany(addrs []netip.Addr, values []uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var (
		keys4        [][4]byte
		keys6        [][16]byte
		vals4, vals6 []uint32
	)
	for i, a := range addrs {
		if a.Is4() {
			keys4, vals4 = append(keys4, a.As4()), append(vals4, values[i])
		} else {
			keys6, vals6 = append(keys6, a.As16()), append(vals6, values[i])
		}
	}
	// the hash maps first: a slot that says "shared" must find every address there
	if len(keys4) > 0 {
		if _, err := f.addrs4.BatchUpdate(keys4, vals4, nil); err != nil {
			return fmt.Errorf("%s addresses: put %d IPv4 addresses: %w", f.name, len(keys4), err)
		}
	}
	if len(keys6) > 0 {
		if _, err := f.addrs6.BatchUpdate(keys6, vals6, nil); err != nil {
			return fmt.Errorf("%s addresses: put %d IPv6 addresses: %w", f.name, len(keys6), err)
		}
	}
	changed := map[vipSlotKey][]netip.Addr{}
	for _, a := range addrs {
		k := f.slotOf(a)
		now, ok := changed[k]
		if !ok {
			now = f.slotAddrs[k]
		}
		if !slices.Contains(now, a) {
			changed[k] = append(slices.Clone(now), a)
		}
	}
	var (
		slots4, slots6 []uint32
		v4             []lbLb4VipSlot
		v6             []lbLb6VipSlot
	)
	for k, addrs := range changed {
		if k.v6 {
			slots6, v6 = append(slots6, k.slot), append(v6, lbLb6VipSlot{Count: uint32(len(addrs)), Addr: addrWords(addrs[0])})
		} else {
			slots4, v4 = append(slots4, k.slot), append(v4, lbLb4VipSlot{Count: uint32(len(addrs)), Addr: addrWords(addrs[0])[0]})
		}
	}
	if len(slots4) > 0 {
		if _, err := f.slots4.BatchUpdate(slots4, v4, nil); err != nil {
			return fmt.Errorf("%s slots: put %d: %w", f.name, len(slots4), err)
		}
	}
	if len(slots6) > 0 {
		if _, err := f.slots6.BatchUpdate(slots6, v6, nil); err != nil {
			return fmt.Errorf("%s slots: put %d: %w", f.name, len(slots6), err)
		}
	}
	maps.Copy(f.slotAddrs, changed)
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

// PutVIPAddrs marks addrs[i] as carrying services[i] services (> 0), with one batch
// update of each of the filter's maps.
func (lb *LB) PutVIPAddrs(addrs []netip.Addr, services []uint32) error {
	return lb.vips.putMany(addrs, services)
}

// PutVIPAddr marks addr as carrying `services` services (> 0).
func (lb *LB) PutVIPAddr(addr netip.Addr, services uint32) error {
	return lb.vips.put(addr, services)
}

// DeleteVIPAddr takes addr out of the node's VIP filter.
func (lb *LB) DeleteVIPAddr(addr netip.Addr) error {
	return lb.vips.remove(addr)
}
