package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// The VIP address filter (bpf/lib/vipaddr.h): lb4/lb6_vip_addrs hold every VIP address,
// and in front of them the arrays lb4/lb6_vip_slots hold, at each address's slot, one of
// the addresses hashing there and how many do. The program asks the hash map only for a
// slot more than one address shares; the LB, their only writer, remembers which.

const vipSlots = uint32(lbLbSharedLB_VIP_SLOTS)

// vipSlot mirrors vip_slot() of bpf/lib/vipaddr.h over the address's words.
func vipSlot(a netip.Addr) uint32 {
	w := addrWords(a)
	x := w[0] ^ w[1] ^ w[2] ^ w[3]
	return (x ^ x>>16) & (vipSlots - 1)
}

type vipSlotKey struct {
	v6   bool
	slot uint32
}

// vipAddrsMap returns the address filter of addr's family and addr as its key (the
// bytes on the wire).
func (lb *LB) vipAddrsMap(addr netip.Addr) (*ebpf.Map, any) {
	if addr.Is4() {
		return lb.objs.Lb4VipAddrs, addr.As4()
	}
	return lb.objs.Lb6VipAddrs, addr.As16()
}

// PutVIPAddr marks addr as carrying `services` services (> 0).
func (lb *LB) PutVIPAddr(addr netip.Addr, services uint32) error {
	m, key := lb.vipAddrsMap(addr)
	if err := m.Put(key, services); err != nil {
		return fmt.Errorf("lb_vip_addrs put %s: %w", addr, err)
	}
	// the hash map first: a slot that says "shared" must find every address there
	lb.vipMu.Lock()
	defer lb.vipMu.Unlock()
	k := vipSlotKey{addr.Is6(), vipSlot(addr)}
	if slices.Contains(lb.vipSlotAddrs[k], addr) {
		return nil
	}
	addrs := append(lb.vipSlotAddrs[k], addr)
	if err := lb.putVIPSlot(k, addrs); err != nil {
		return err
	}
	lb.vipSlotAddrs[k] = addrs
	return nil
}

func (lb *LB) DeleteVIPAddr(addr netip.Addr) error {
	lb.vipMu.Lock()
	defer lb.vipMu.Unlock()
	k := vipSlotKey{addr.Is6(), vipSlot(addr)}
	if i := slices.Index(lb.vipSlotAddrs[k], addr); i >= 0 {
		// the slot first: it must never send an address to the hash map that lacks it
		addrs := slices.Delete(slices.Clone(lb.vipSlotAddrs[k]), i, i+1)
		if err := lb.putVIPSlot(k, addrs); err != nil {
			return err
		}
		if len(addrs) == 0 {
			delete(lb.vipSlotAddrs, k)
		} else {
			lb.vipSlotAddrs[k] = addrs
		}
	}
	m, key := lb.vipAddrsMap(addr)
	if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("lb_vip_addrs delete %s: %w", addr, err)
	}
	return nil
}

// putVIPSlot writes the slot holding addrs (none: an empty slot).
func (lb *LB) putVIPSlot(k vipSlotKey, addrs []netip.Addr) error {
	var err error
	if k.v6 {
		v := lbLb6VipSlot{Count: uint32(len(addrs))}
		if len(addrs) > 0 {
			v.Addr = addrWords(addrs[0])
		}
		err = lb.objs.Lb6VipSlots.Put(k.slot, v)
	} else {
		v := lbLb4VipSlot{Count: uint32(len(addrs))}
		if len(addrs) > 0 {
			v.Addr = addrWords(addrs[0])[0]
		}
		err = lb.objs.Lb4VipSlots.Put(k.slot, v)
	}
	if err != nil {
		return fmt.Errorf("lb_vip_slots put %d: %w", k.slot, err)
	}
	return nil
}
