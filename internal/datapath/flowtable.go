package datapath

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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
	return uint32(h>>32) ^ uint32(h) ^ f.BackendId*0x9E3779B1 ^ f.ServiceId*0x85EBCA77 ^ f.Hash*0xC2B2AE3D
}

// FlowCount counts the table's entries in use, through its memory mapping (plain
// loads, no system call per bucket; a 256 Ki-entry table is 16 MiB to read).
func (lb *LB) FlowCount() (int, error) {
	n := 0
	err := lb.walkFlows(func([]byte) error { n++; return nil })
	return n, err
}

// walkFlows calls visit with every way in use of the flow table (its bytes, valid for
// the call only), read through the map's memory mapping a chunk at a time.
func (lb *LB) walkFlows(visit func(entry []byte) error) error {
	mm := lb.flowMem
	buf := make([]byte, 1<<16) // a whole number of entries
	for off := 0; off < int(mm.Size()); off += len(buf) {
		chunk := buf[:min(len(buf), int(mm.Size())-off)]
		if _, err := mm.ReadAt(chunk, int64(off)); err != nil {
			return fmt.Errorf("flow table: %w", err)
		}
		for e := 0; e+flowEntrySize <= len(chunk); e += flowEntrySize {
			if binary.NativeEndian.Uint32(chunk[e+flowUsedAt:]) == 0 {
				continue
			}
			if err := visit(chunk[e : e+flowEntrySize]); err != nil {
				return err
			}
		}
	}
	return nil
}

// FlowEntry is one entry of the flow table: a flow and the backend it is pinned to.
type FlowEntry struct {
	Src, Dst     netip.Addr
	SPort, DPort uint16
	Proto        uint8
	ServiceID    uint32
	BackendID    uint32
	// Idle is how long ago a packet of the flow last refreshed the entry (refreshed at
	// most once a second); -1 when the kernel's tick count could not be read.
	Idle time.Duration
}

// Flows reads the flow table through its memory mapping and returns up to max of the
// entries that keep accepts (given an entry's service and backend ids, it says whether
// to list it and whether its addresses are IPv6), and how many entries it accepted in
// all. An
// entry torn by two CPUs writing it at once (its check word fails) is left out, as the
// program ignores it. The walk reads the whole table: a diagnostic, not a hot path.
func (lb *LB) Flows(max int, keep func(serviceID, backendID uint32) (ok, v6 bool)) ([]FlowEntry, int, error) {
	now, nowErr := lb.flowClock()
	out, total := []FlowEntry{}, 0
	err := lb.walkFlows(func(entry []byte) error {
		var ent lbLbFlowEntry
		if _, err := binary.Decode(entry, binary.NativeEndian, &ent); err != nil {
			return fmt.Errorf("flow table entry: %w", err)
		}
		ok, v6 := keep(ent.Flow.ServiceId, ent.Flow.BackendId)
		if !ok || ent.Check != flowCheck(flowKeyHash(ent.Key, lb.flowSeed), ent.Flow) {
			return nil
		}
		total++
		if len(out) >= max {
			return nil
		}
		f := FlowEntry{Src: wordsAddr(ent.Key.Src, v6), Dst: wordsAddr(ent.Key.Dst, v6),
			SPort: be16(ent.Key.Sport), DPort: be16(ent.Key.Dport), Proto: ent.Key.Proto,
			ServiceID: ent.Flow.ServiceId, BackendID: ent.Flow.BackendId, Idle: -1}
		if nowErr == nil {
			f.Idle = lb.flowTicks(now - ent.Used)
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// wordsAddr is the address whose words (as addrWords gives them) are w.
func wordsAddr(w [4]uint32, v6 bool) netip.Addr {
	var b [16]byte
	for i := range w {
		binary.NativeEndian.PutUint32(b[4*i:], w[i])
	}
	if !v6 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// flowClock is flow_clock() of bpf/lib/flowtable.h read from user space: the kernel's
// jiffies when the program keeps them, else CLOCK_MONOTONIC in units of 2^20 ns.
func (lb *LB) flowClock() (uint32, error) {
	if lb.hz == 0 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return 0, err
		}
		return uint32(ts.Nano()>>20) | 1, nil
	}
	j, err := kernelJiffies()
	return uint32(j) | 1, err
}

// flowTicks is a duration of the flow clock's ticks.
func (lb *LB) flowTicks(ticks uint32) time.Duration {
	if lb.hz == 0 {
		return time.Duration(ticks) << 20
	}
	return time.Duration(ticks) * time.Second / time.Duration(lb.hz)
}

// kernelJiffies is the kernel's tick count now (the program's clock when it knows HZ),
// from /proc/timer_list (readable by root only).
func kernelJiffies() (uint64, error) {
	f, err := os.Open("/proc/timer_list")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "jiffies: "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/timer_list: no jiffies line")
}
