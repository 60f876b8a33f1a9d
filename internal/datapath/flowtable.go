package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"unsafe"
)

// The flow table's layout and hash, as bpf/lib/flowtable.h has them: an array of
// buckets of flowWays entries, each entry one cache line (key, choice, last use, check
// word). Go reads it through the map's memory mapping (FlowCount) and, in tests,
// finds and writes a flow's entry as the program would.
const (
	flowWays      = len(lbLbFlowBucket{}.Way)
	flowEntrySize = int(unsafe.Sizeof(lbLbFlowEntry{}))
	flowUsedAt    = int(unsafe.Offsetof(lbLbFlowEntry{}.Used))
)

// flowBuckets is the number of buckets of a table of at least size entries.
func flowBuckets(size uint32) uint32 {
	return (size + uint32(flowWays) - 1) / uint32(flowWays)
}

// newFlowSeed is the seed of a new table's hash: random, so that clients cannot
// choose 5-tuples that crowd one bucket.
func newFlowSeed() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("flow table seed: %w", err)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// flowKeyHash is flow_key_hash: the key's five 64-bit words, in host order as the
// program loads them.
func flowKeyHash(k lbLbFlowKey, seed uint64) uint64 {
	var mem [40]byte
	if _, err := binary.Encode(mem[:], binary.NativeEndian, k); err != nil {
		panic(err) // a fixed-size struct into a buffer of its size cannot fail
	}
	primes := [5]uint64{0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD}
	var h uint64
	for i, p := range primes {
		h += (binary.NativeEndian.Uint64(mem[8*i:]) ^ seed) * p
	}
	h ^= h >> 31
	return h * 0xBF58476D1CE4E5B9
}

// flowBucketIndex is flow_bucket_index: a key's first (second false) or second bucket
// of n.
func flowBucketIndex(h uint64, second bool, n uint32) uint32 {
	half := h >> 32
	if second {
		half = uint64(uint32(h))
	}
	return uint32(half * uint64(n) >> 32)
}

// flowCheck is flow_check: the check word of an entry holding f under a key of hash h.
func flowCheck(h uint64, f lbLbFlow) uint32 {
	return uint32(h>>32) ^ uint32(h) ^ f.BackendId*0x9E3779B1 ^ f.ServiceId*0x85EBCA77 ^ f.Hash*0xC2B2AE3D ^ f.SynSlot*0x27D4EB2F
}

// FlowCount counts the table's entries in use, through its memory mapping (plain
// loads, no system call per bucket; a 256 Ki-entry table is 16 MiB to read).
func (lb *LB) FlowCount() (int, error) {
	mm, err := lb.objs.LbFlows.Memory()
	if err != nil {
		return 0, fmt.Errorf("flow table: %w", err)
	}
	buf := make([]byte, 1<<16) // a whole number of entries
	n := 0
	for off := 0; off < int(mm.Size()); off += len(buf) {
		chunk := buf[:min(len(buf), int(mm.Size())-off)]
		if _, err := mm.ReadAt(chunk, int64(off)); err != nil {
			return 0, fmt.Errorf("flow table: %w", err)
		}
		for e := 0; e+flowEntrySize <= len(chunk); e += flowEntrySize {
			if binary.NativeEndian.Uint32(chunk[e+flowUsedAt:]) != 0 {
				n++
			}
		}
	}
	return n, nil
}
