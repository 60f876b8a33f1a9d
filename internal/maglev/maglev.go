// Package maglev builds Maglev consistent-hashing lookup tables (Eisenbud et al.,
// "Maglev: A Fast and Reliable Software Network Load Balancer", NSDI 2016), extended
// with integer backend weights.
//
// # Algorithm
//
// Every backend gets a permutation of the M table slots (M prime):
//
//	offset  = h1 mod M
//	skip    = h2 mod (M-1) + 1
//	perm[j] = (offset + j*skip) mod M
//
// Because M is prime and 1 ≤ skip < M, perm visits every slot exactly once. The table
// is filled in rounds: on its turn a backend walks its permutation from where it last
// stopped and claims the first slot nobody owns yet. Filling stops as soon as all M
// slots are owned. With equal weights every backend takes exactly one turn per round,
// so slot counts differ by at most one; and because each backend prefers the same slots
// regardless of who else is present, adding or removing a backend moves few slots that
// belonged to the others.
//
// # Weights
//
// Weights use an accumulator ("smooth credit") scheme. Let W be the largest weight
// among the backends with weight > 0. Each backend starts a build with credit 0; at
// every round, in canonical order, it adds its weight to its credit and, if the credit
// is now ≥ W, subtracts W and takes one turn. Since weight ≤ W a backend takes at most
// one turn per round, a backend of weight W takes one every round, and a backend of
// weight w takes w turns every W rounds, so slot shares are proportional to weight
// (to within one turn). Only the ratios matter: scaling every weight by the same
// factor yields the same table. With equal weights this is exactly the paper's
// algorithm.
// Backends with weight 0 take no part at all, which is how draining backends lose
// their slots while keeping their index in the caller's slice.
//
// # Hashes
//
// h1 and h2 must be the same in every process and on every machine, so that replicas
// of the load balancer agree on the table; that rules out hash/maphash, which is seeded
// randomly per process. Instead, per backend:
//
//	x  = FNV-1a 64 (hash/fnv) over seed ‖ 0x00 ‖ key
//	h1 = first  output of SplitMix64 seeded with x
//	h2 = second output of SplitMix64 seeded with x
//
// FNV-1a's multiply only carries towards the high bits, so the low bits of x depend on
// the low bits of the input alone and nearby keys such as "10.0.1.1:80" and
// "10.0.1.2:80" would get correlated offsets and skips; SplitMix64's finaliser (Steele, Lea and Flood, OOPSLA 2014) gives full avalanche and
// yields the two independent-looking values cheaply. The seed (the service identity)
// is hashed into every backend so that services sharing backends get unrelated tables
// and a failed backend's traffic spreads differently in each service.
//
// # Canonical order
//
// Ties between backends are resolved by turn order, so a table built from the same
// backends listed in a different order would differ. Backends are therefore processed
// sorted by Key, making the table a function of the seed, the size and the set of
// (Key, Weight) pairs only: control-plane replicas that learn backends in different
// orders still program identical tables. Returned entries are indices into the
// caller's slice, not into the sorted order.
package maglev

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"slices"
	"strings"
)

// Backend is one entry to place in the table. Key identifies the backend (for
// manifold: the backend's address and port as a string, e.g. "10.0.1.1:80" or
// "[2001:db8::1]:80").
type Backend struct {
	Key    string
	Weight uint32 // 0 = gets no slots (draining); backends with weight 0 are skipped
}

// cursor is one weighted backend's state while the table is being filled. The
// permutation is generated on the fly rather than stored, which keeps memory at
// O(N + M) instead of the paper's O(N·M).
type cursor struct {
	pos    uint64 // next permutation slot to try
	skip   uint64
	weight uint64
	credit uint64
	index  int32 // position in the caller's slice
}

// Build returns the lookup table of `size` entries (size must be prime, > 0). Entry i
// is the index, in the given slice, of the backend that owns slot i, or -1 for every
// slot when no backend has weight > 0. `seed` is the service identity (e.g.
// "web|198.51.100.10|80|tcp") and is mixed into every backend's permutation so that
// different services get different tables. The result depends only on seed, size and
// the SET of (Key, Weight) pairs — never on the order of the slice (returned indices
// refer to the caller's order, of course).
func Build(seed string, backends []Backend, size uint32) ([]int32, error) {
	if !IsPrime(uint64(size)) {
		return nil, fmt.Errorf("maglev: table size %d is not prime", size)
	}
	// Table entries are int32 indices into backends.
	if len(backends) > math.MaxInt32 {
		return nil, fmt.Errorf("maglev: %d backends exceed the maximum of %d", len(backends), math.MaxInt32)
	}

	order := make([]int32, len(backends))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		return strings.Compare(backends[a].Key, backends[b].Key)
	})
	for i := 1; i < len(order); i++ {
		if k := backends[order[i]].Key; k == backends[order[i-1]].Key {
			return nil, fmt.Errorf("maglev: duplicate backend key %q", k)
		}
	}

	m := uint64(size)
	cursors := make([]cursor, 0, len(backends))
	var maxWeight uint64
	h := fnv.New64a()
	var buf []byte
	for _, i := range order {
		b := backends[i]
		if b.Weight == 0 {
			continue
		}
		buf = append(append(append(buf[:0], seed...), 0), b.Key...)
		h.Reset()
		h.Write(buf) // never fails
		state := h.Sum64()
		h1, h2 := splitmix64(&state), splitmix64(&state)
		cursors = append(cursors, cursor{
			pos:    h1 % m,
			skip:   h2%(m-1) + 1,
			weight: uint64(b.Weight),
			index:  i,
		})
		maxWeight = max(maxWeight, uint64(b.Weight))
	}
	if uint64(len(cursors)) > m {
		return nil, fmt.Errorf("maglev: table size %d is smaller than the %d backends with weight > 0", size, len(cursors))
	}

	table := make([]int32, size)
	for i := range table {
		table[i] = -1
	}
	if len(cursors) == 0 {
		return table, nil
	}

	// Terminates: the backend(s) of weight maxWeight take a turn every round, and
	// every turn claims one of the remaining free slots.
	filled := uint64(0)
	for {
		for k := range cursors {
			c := &cursors[k]
			c.credit += c.weight
			if c.credit < maxWeight {
				continue
			}
			c.credit -= maxWeight
			for {
				p := c.pos
				c.pos += c.skip // < 2·M, so one conditional subtraction reduces it
				if c.pos >= m {
					c.pos -= m
				}
				if table[p] < 0 {
					table[p] = c.index
					break
				}
			}
			filled++
			if filled == m {
				return table, nil
			}
		}
	}
}

// splitmix64 advances a SplitMix64 generator and returns its next output.
func splitmix64(state *uint64) uint64 {
	*state += 0x9e3779b97f4a7c15
	z := *state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// IsPrime reports whether n is prime: Build asks it of a table size, and config of
// services[].table_size before anything is built.
func IsPrime(n uint64) bool {
	if n < 1<<32 {
		// table sizes: trial division takes at most a few hundred divisions for them,
		// where math/big seeds a random source on every call (a tenth of the time of
		// programming 10 000 services of 1021 slots)
		return isPrimeByDivision(n)
	}
	// ProbablyPrime(0) runs Baillie-PSW only, which is documented to be exact below 2^64.
	return new(big.Int).SetUint64(n).ProbablyPrime(0)
}

func isPrimeByDivision(n uint64) bool {
	if n < 4 {
		return n >= 2
	}
	if n%2 == 0 || n%3 == 0 {
		return false
	}
	for d := uint64(5); d*d <= n; d += 6 {
		if n%d == 0 || n%(d+2) == 0 {
			return false
		}
	}
	return true
}
