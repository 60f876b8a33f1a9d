package datapath_test

import (
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// Options sizes the service and backend maps at load, and Memory charges the rings by
// the blocks they are packed in: rings of 1021 and 8191 slots share one block of
// 65536 slots (8 bytes a slot, as an array map keeps a __u32), a ring larger than a
// block gets one of its own size, and the flow table is counted apart.
func TestCapacityAndMemory(t *testing.T) {
	requireRoot(t)
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, FlowTableSize: 4096, MaxServices: 100, MaxBackends: 1000})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer lb.Close()
	if s, b := lb.Capacity(); s != 100 || b != 1000 {
		t.Fatalf("capacity %d services, %d backends, want 100, 1000", s, b)
	}
	// the NAT tables follow the flow table's size: compiled, they keep 262 144 entries
	if nats, flows := lb.NATTableSizes(); nats != 4096 || flows != 4096 {
		t.Errorf("NAT tables of %d and %d entries with a flow table of 4096, want 4096 each", nats, flows)
	}
	if err := lb.PutRing(100, make([]uint32, 7)); err == nil {
		t.Error("service id 100 accepted by a table of 100 services")
	}
	if err := lb.PutRing(1, nil); err == nil {
		t.Error("an empty ring accepted")
	}
	empty, err := lb.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if empty.Rings != 0 || empty.RingBlocks != 0 || empty.Flows < 4096*56 || empty.Other == 0 {
		t.Fatalf("memory of an empty data plane: %+v", empty)
	}
	if err := lb.PutRings(map[uint32][]uint32{1: make([]uint32, 1021), 99: make([]uint32, 8191)}); err != nil {
		t.Fatal(err)
	}
	mem, err := lb.Memory()
	if err != nil {
		t.Fatal(err)
	}
	const block = 8 * 65536
	if mem.RingBlocks != 1 || mem.Rings < block || mem.Rings > block+8192 {
		t.Errorf("two rings of 1021 and 8191 slots: %d blocks, %d bytes, want 1 block of %d bytes", mem.RingBlocks, mem.Rings, block)
	}
	if mem.Flows != empty.Flows || mem.Other != empty.Other {
		t.Errorf("rings changed the other maps' figures: %+v, before %+v", mem, empty)
	}
	if err := lb.PutRing(2, make([]uint32, 100003)); err != nil {
		t.Fatal(err)
	}
	if mem, err = lb.Memory(); err != nil {
		t.Fatal(err)
	}
	if mem.RingBlocks != 2 || mem.Rings < block+8*100003 || mem.Rings > block+8*100003+16384 {
		t.Errorf("and a ring of 100003 slots: %d blocks, %d bytes, want 2 blocks of %d bytes", mem.RingBlocks, mem.Rings, block+8*100003)
	}
}

// A ring replaced again and again reuses the slots of the rings before it, once no
// program can be reading them: the memory stays that of one block.
func TestReplacedRingsReuseTheirSlots(t *testing.T) {
	requireRoot(t)
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, MaxServices: 100, MaxBackends: 1000})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer lb.Close()
	if err := lb.PutService(datapath.ServiceKey{VIP: dptest.NodeAddr4, Port: 80, Proto: 6}, datapath.Service{ID: 1}); err != nil {
		t.Fatal(err)
	}
	ring := make([]uint32, 1021)
	for i := range 1000 { // 15 times what one block holds
		for j := range ring {
			ring[j] = uint32(i)
		}
		if err := lb.PutRing(1, ring); err != nil {
			t.Fatalf("ring %d: %v", i, err)
		}
	}
	got, err := lb.Ring(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1021 || got[0] != 999 || got[1020] != 999 {
		t.Errorf("the kernel's ring after 1000 replacements: %d slots, first %d, last %d; want 1021 of 999", len(got), got[0], got[len(got)-1])
	}
	mem, err := lb.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if mem.RingBlocks != 1 {
		t.Errorf("1000 replacements of one ring of 1021 slots took %d blocks, want 1", mem.RingBlocks)
	}
}

// The blocks of rings taken away go back to the kernel once enough of their slots are
// retired: a node that drops most of its services drops their memory.
func TestEmptiedRingBlocksAreReleased(t *testing.T) {
	requireRoot(t)
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, MaxServices: 100, MaxBackends: 1000})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer lb.Close()
	rings := map[uint32][]uint32{}
	for id := uint32(1); id <= 20; id++ { // 16 rings of 4093 slots a block: 2 blocks
		rings[id] = make([]uint32, 4093)
	}
	if err := lb.PutRings(rings); err != nil {
		t.Fatal(err)
	}
	full, err := lb.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if full.RingBlocks != 2 {
		t.Fatalf("20 rings of 4093 slots in %d blocks, want 2", full.RingBlocks)
	}
	for id := range rings {
		if err := lb.DeleteRing(id); err != nil {
			t.Fatal(err)
		}
	}
	empty, err := lb.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if empty.RingBlocks >= full.RingBlocks || empty.Rings >= full.Rings {
		t.Errorf("all rings deleted: %d blocks, %d bytes; with them %d blocks, %d bytes", empty.RingBlocks, empty.Rings, full.RingBlocks, full.Rings)
	}
}
