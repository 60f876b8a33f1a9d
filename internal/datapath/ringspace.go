package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The services' Maglev rings live packed in blocks (lb_maglev's inner maps, bpf/lib/
// maps.h): a ring is a run of slots in one block, and a service's lb_vips entry names
// its block, first slot and length. A map of its own per ring cost a map creation, a
// mapping and a page of header per service — 18 µs and 12 KiB each, 1.8 s and 1.2 GiB
// for 100 000 services; a block is created once and stays mapped, so placing a ring
// is a copy into memory the program reads.
//
// A new ring always goes into free slots, never over the ring it replaces: the
// service's entry is switched to it with one update, so a packet sees the old ring or
// the new one. The old ring's slots are retired, not freed: a program that read the
// old entry may still be reading them. They become free once a grace period has passed
// (waitPrograms), which the space waits for only when it runs out of free slots or a
// quarter of its slots are retired (tidy): a single ring's change waits for none.

// ringBlockSlots is the size of a block in slots (8 bytes each, as an array map keeps a
// __u32): 512 KiB, 128 rings of 509 slots (the default table size up to 5 backends).
// A ring larger than that gets a block of its own size.
const ringBlockSlots = 1 << 16

// ringPlace is where a ring is: slots [offset, offset+size) of block (0: no ring).
type ringPlace struct {
	block, offset, size uint32
}

type ringBlock struct {
	m    *ebpf.Map
	mem  []byte // the block, mapped for the life of the block
	free []ringPlace
	live uint64 // slots of rings in use (neither free nor retired)
	// fresh: not in lb_maglev yet. Every update of a map of maps waits for a grace
	// period (milliseconds) before it returns, so the blocks a batch of rings needs go
	// in with one update, not one each: 1 563 blocks one by one took 20 s.
	fresh bool
}

// ringSpace hands out the slots of the blocks. Owned by the LB's writer (the
// reconciler's goroutine), as the other map writers are.
type ringSpace struct {
	spec    *ebpf.MapSpec // template of a block
	outer   *ebpf.Map     // lb_maglev
	blocks  []*ringBlock  // by block id; [0] and released ids are nil
	retired []ringPlace   // slots an old entry may still name: free after a grace period
	// slots of the blocks, and of them retired: what tells when to reclaim
	slots, retiredSlots uint64
	// emptied: a block's last ring was retired; the next tidy gives the block back
	emptied bool
	cursor  uint32   // the block that last had room: where the next ring is tried first
	fresh   []uint32 // ids of the blocks not in lb_maglev yet
}

// publish puts the fresh blocks into lb_maglev, with one update.
func (rs *ringSpace) publish() error {
	if len(rs.fresh) == 0 {
		return nil
	}
	var ids []uint32
	var fds []uint32
	for _, id := range rs.fresh {
		if b := rs.blocks[id]; b != nil {
			ids, fds = append(ids, id), append(fds, uint32(b.m.FD()))
		}
	}
	if len(ids) > 0 {
		if _, err := rs.outer.BatchUpdate(ids, fds, nil); err != nil {
			return fmt.Errorf("lb_maglev: put %d ring blocks: %w", len(ids), err)
		}
	}
	for _, id := range ids {
		rs.blocks[id].fresh = false
	}
	rs.fresh = rs.fresh[:0]
	return nil
}

// place writes ring into free slots and returns where it is. Blocks it had to create
// are not in lb_maglev yet: publish puts them in.
func (rs *ringSpace) place(ring []uint32) (ringPlace, error) {
	size := uint32(len(ring))
	p, ok := rs.alloc(size)
	if !ok && len(rs.retired) > 0 {
		if err := rs.reclaim(); err != nil {
			return p, err
		}
		p, ok = rs.alloc(size)
	}
	if !ok {
		var err error
		if p, err = rs.grow(size); err != nil {
			return p, err
		}
	}
	mem := rs.blocks[p.block].mem[8*p.offset:]
	for i, id := range ring {
		// an array map keeps each value in round_up(value_size, 8) bytes, and the
		// mapping shows that layout: the __u32 the program reads, then padding
		binary.NativeEndian.PutUint32(mem[8*i:], id)
	}
	return p, nil
}

// alloc takes size slots from a block with room, the cursor's first.
func (rs *ringSpace) alloc(size uint32) (ringPlace, bool) {
	n := uint32(len(rs.blocks))
	for i := range n {
		id := (rs.cursor + i) % n
		b := rs.blocks[id]
		if b == nil {
			continue
		}
		for j, f := range b.free {
			if f.size < size {
				continue
			}
			if f.size == size {
				b.free = slices.Delete(b.free, j, j+1)
			} else {
				b.free[j] = ringPlace{block: id, offset: f.offset + size, size: f.size - size}
			}
			rs.cursor = id
			b.live += uint64(size)
			return ringPlace{block: id, offset: f.offset, size: size}, true
		}
	}
	return ringPlace{}, false
}

// grow creates a block with room for size slots and places size slots at its start.
// The block goes into lb_maglev with the others of its batch (publish).
func (rs *ringSpace) grow(size uint32) (ringPlace, error) {
	if len(rs.blocks) == 0 {
		rs.blocks = []*ringBlock{nil} // id 0 means "no ring"
	}
	id := uint32(len(rs.blocks))
	if i := slices.Index(rs.blocks[1:], nil); i >= 0 {
		id = uint32(i + 1) // a released block's id
	}
	if id >= rs.outer.MaxEntries() {
		return ringPlace{}, fmt.Errorf("lb_maglev: no room for a ring block %d (%d blocks, node.max_services)", id, rs.outer.MaxEntries()-1)
	}
	slots := max(size, ringBlockSlots)
	spec := rs.spec.Copy()
	spec.MaxEntries = slots
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return ringPlace{}, fmt.Errorf("create ring block %d (%d slots): %w", id, slots, err)
	}
	// unix.Mmap, not Map.Memory: the mapping must go when the block does (Close), not
	// when the garbage collector finds it
	mem, err := unix.Mmap(m.FD(), 0, 8*int(slots), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		m.Close()
		return ringPlace{}, fmt.Errorf("map ring block %d: %w", id, err)
	}
	b := &ringBlock{m: m, mem: mem, fresh: true, live: uint64(size)}
	rs.fresh = append(rs.fresh, id)
	if slots > size {
		b.free = []ringPlace{{block: id, offset: size, size: slots - size}}
	}
	for uint32(len(rs.blocks)) <= id {
		rs.blocks = append(rs.blocks, nil)
	}
	rs.blocks[id] = b
	rs.slots += uint64(slots)
	rs.cursor = id
	return ringPlace{block: id, offset: 0, size: size}, nil
}

// retire hands back the slots of a ring no entry names any more.
func (rs *ringSpace) retire(p ringPlace) {
	if p.block != 0 {
		rs.retired = append(rs.retired, p)
		rs.retiredSlots += uint64(p.size)
		b := rs.blocks[p.block]
		b.live -= uint64(p.size)
		rs.emptied = rs.emptied || b.live == 0
	}
}

// tidy reclaims the retired slots once they are a quarter of all, and a block's worth
// at least, or once a block holds no ring any more: the blocks of services that went
// away are given back to the kernel, and a node removing 100 000 services waits for a
// few dozen grace periods, not for one per service. Below that they wait for the next
// place that finds no room.
func (rs *ringSpace) tidy() error {
	if !rs.emptied && (rs.retiredSlots < ringBlockSlots || 4*rs.retiredSlots < rs.slots) {
		return nil
	}
	return rs.reclaim()
}

// reclaim waits until no program can still be reading a retired ring, frees their
// slots, and releases the blocks left empty.
func (rs *ringSpace) reclaim() error {
	if err := rs.waitPrograms(); err != nil {
		return err
	}
	touched := map[uint32]bool{}
	for _, p := range rs.retired {
		b := rs.blocks[p.block]
		i, _ := slices.BinarySearchFunc(b.free, p.offset, func(f ringPlace, off uint32) int { return int(f.offset) - int(off) })
		b.free = slices.Insert(b.free, i, p)
		touched[p.block] = true
	}
	rs.retired, rs.retiredSlots, rs.emptied = rs.retired[:0], 0, false
	for id := range touched {
		b := rs.blocks[id]
		b.free = coalesce(b.free)
		if len(b.free) == 1 && b.free[0].offset == 0 && b.free[0].size == b.m.MaxEntries() {
			if err := rs.release(id); err != nil {
				return err
			}
		}
	}
	return nil
}

// coalesce merges adjacent free runs (sorted by offset).
func coalesce(free []ringPlace) []ringPlace {
	out := free[:0]
	for _, f := range free {
		if n := len(out); n > 0 && out[n-1].offset+out[n-1].size == f.offset {
			out[n-1].size += f.size
			continue
		}
		out = append(out, f)
	}
	return out
}

// release takes an empty block out of lb_maglev and frees it.
func (rs *ringSpace) release(id uint32) error {
	b := rs.blocks[id]
	if err := rs.outer.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("lb_maglev delete block %d: %w", id, err)
	}
	rs.blocks[id] = nil
	rs.slots -= uint64(b.m.MaxEntries())
	return b.close()
}

// waitPrograms returns once every program run that started before it has ended. An
// update of a map of maps does just that before it returns (the kernel's
// maybe_wait_bpf_programs, a synchronize_rcu): putting a block back in its own place
// changes nothing else.
func (rs *ringSpace) waitPrograms() error {
	for id, b := range rs.blocks {
		if b != nil && !b.fresh { // a fresh block holds no ring any entry names
			if err := rs.outer.Put(uint32(id), b.m); err != nil {
				return fmt.Errorf("lb_maglev: wait for running programs: %w", err)
			}
			return nil
		}
	}
	return nil
}

func (b *ringBlock) close() error {
	err := unix.Munmap(b.mem)
	return errors.Join(err, b.m.Close())
}

func (rs *ringSpace) close() error {
	var err error
	for _, b := range rs.blocks {
		if b != nil {
			err = errors.Join(err, b.close())
		}
	}
	rs.blocks = nil
	return err
}
