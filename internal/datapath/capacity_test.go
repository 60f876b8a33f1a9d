package datapath_test

import (
	"testing"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// Options sizes the service and backend maps at load, and Memory charges each ring by
// its size: a ring of 1021 slots costs an eighth of one of 8191 (8 bytes a slot, as an
// array map keeps a __u32), and the flow table is counted apart.
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
	if err := lb.PutRing(100, make([]uint32, 7)); err == nil {
		t.Error("service id 100 accepted by a table of 100 services")
	}
	empty, err := lb.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if empty.Rings != 0 || empty.RingMaps != 0 || empty.Flows < 4096*56 || empty.Other == 0 {
		t.Fatalf("memory of an empty data plane: %+v", empty)
	}
	if err := lb.PutRings(map[uint32][]uint32{1: make([]uint32, 1021), 99: make([]uint32, 8191)}); err != nil {
		t.Fatal(err)
	}
	mem, err := lb.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if mem.RingMaps != 2 || mem.Rings < 8*(1021+8191) || mem.Rings > 8*(1021+8191)+2*16384 {
		t.Errorf("two rings of 1021 and 8191 slots: %d maps, %d bytes", mem.RingMaps, mem.Rings)
	}
	if mem.Flows != empty.Flows || mem.Other != empty.Other {
		t.Errorf("rings changed the other maps' figures: %+v, before %+v", mem, empty)
	}
}
