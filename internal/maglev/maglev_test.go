package maglev

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const testSeed = "web|198.51.100.10|80|tcp"

// makeBackends returns n distinct backends of weight 1 with realistic, similar keys:
// near-identical keys are the hard case for the hashes.
func makeBackends(n int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{Key: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250+1), Weight: 1}
	}
	return bs
}

func mustBuild(t testing.TB, seed string, bs []Backend, size uint32) []int32 {
	t.Helper()
	table, err := Build(seed, bs, size)
	if err != nil {
		t.Fatalf("Build(%q, %d backends, %d): %v", seed, len(bs), size, err)
	}
	if len(table) != int(size) {
		t.Fatalf("Build returned %d entries, want %d", len(table), size)
	}
	return table
}

// ownerKeys maps a table of indices to the owning keys, so tables built from
// differently ordered slices can be compared.
func ownerKeys(table []int32, bs []Backend) []string {
	keys := make([]string, len(table))
	for i, idx := range table {
		if idx >= 0 {
			keys[i] = bs[idx].Key
		}
	}
	return keys
}

func slotCounts(t *testing.T, table []int32, n int) []int {
	t.Helper()
	counts := make([]int, n)
	for i, idx := range table {
		if idx < 0 || int(idx) >= n {
			t.Fatalf("slot %d = %d, want an index in [0, %d)", i, idx, n)
		}
		counts[idx]++
	}
	return counts
}

// TestBuildGolden pins small tables to values computed once with this implementation
// (and reproduced by an independent re-implementation of the package documentation).
// Every replica of the load balancer must program the same table, so any change to the
// hashes, the permutation, the canonical order or the weighting scheme is a
// compatibility break and must show up here.
func TestBuildGolden(t *testing.T) {
	tests := []struct {
		name     string
		backends []Backend
		size     uint32
		want     []int32
	}{
		{
			name: "equal weights",
			backends: []Backend{
				{Key: "10.0.1.1:80", Weight: 1},
				{Key: "10.0.1.2:80", Weight: 1},
				{Key: "[2001:db8::1]:80", Weight: 1},
			},
			size: 13,
			want: []int32{1, 0, 1, 2, 0, 1, 0, 2, 1, 0, 0, 2, 2},
		},
		{
			name: "weights 3,1,0,2 unsorted",
			backends: []Backend{
				{Key: "10.0.1.3:80", Weight: 3},
				{Key: "10.0.1.1:80", Weight: 1},
				{Key: "10.0.1.4:80", Weight: 0},
				{Key: "10.0.1.2:80", Weight: 2},
			},
			size: 17,
			want: []int32{0, 0, 3, 3, 3, 0, 0, 3, 0, 3, 3, 0, 1, 1, 0, 0, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustBuild(t, testSeed, tt.backends, tt.size)
			if !slices.Equal(got, tt.want) {
				t.Errorf("table changed:\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

// TestBalanceEqualWeights: with equal weights every backend takes one turn per round,
// so counts differ by at most one slot and (max-min)/min ≤ 1/⌊M/N⌋ ≤ 1% once M ≥ 100·N.
func TestBalanceEqualWeights(t *testing.T) {
	tests := []struct {
		n    int
		size uint32
	}{
		{3, 65537},
		{10, 65537},
		{50, 65537},
		{100, 655373},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("N=%d/M=%d", tt.n, tt.size), func(t *testing.T) {
			counts := slotCounts(t, mustBuild(t, testSeed, makeBackends(tt.n), tt.size), tt.n)
			lo, hi := slices.Min(counts), slices.Max(counts)
			if spread := float64(hi-lo) / float64(lo); spread > 0.01 {
				t.Errorf("slot counts range %d..%d, (max-min)/min = %.4f > 0.01", lo, hi, spread)
			}
		})
	}
}

// TestRemoveBackendDisruption removes each backend in turn and counts the slots that
// change owner although their old owner is still present ("collateral" moves; the
// removed backend's own ⌈M/N⌉ slots must move and are not counted). Maglev does not
// guarantee zero collateral, only that it is small when M ≫ N. Bound asserted:
// collateral ≤ ⌊M/N⌋, i.e. removing one backend moves at most about twice the minimum
// of M/N slots in total. (With the fixed hashes the worst case over all removals is
// about 0.6%, 3.5% and 19% of M/N for N = 5, 10, 30.)
func TestRemoveBackendDisruption(t *testing.T) {
	const size = 65537
	for _, n := range []int{5, 10, 30} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			bs := makeBackends(n)
			before := ownerKeys(mustBuild(t, testSeed, bs, size), bs)
			bound := size / n
			for r := range bs {
				rest := slices.Delete(slices.Clone(bs), r, r+1)
				after := ownerKeys(mustBuild(t, testSeed, rest, size), rest)
				collateral := 0
				for i := range before {
					if after[i] == bs[r].Key {
						t.Fatalf("slot %d still owned by removed backend %s", i, bs[r].Key)
					}
					if before[i] != bs[r].Key && after[i] != before[i] {
						collateral++
					}
				}
				if collateral > bound {
					t.Errorf("removing %s moved %d other slots, want ≤ M/N = %d", bs[r].Key, collateral, bound)
				}
			}
		})
	}
}

// TestAddBackendDisruption adds one new backend to N and counts every slot that
// changes owner. The unavoidable part is the newcomer's own share, ⌈M/(N+1)⌉ < M/N
// (one turn per round). The rest is collateral among the existing backends, which,
// like on removal, has no hard bound but is small for M ≫ N. Bound asserted:
// total ≤ 1.25·M/N, which leaves M/N - M/(N+1) + 0.25·M/N for collateral (about 2.7k,
// 1.2k and 0.6k slots for N = 5, 10, 30; measured worst over these keys: 165, 269 and
// 271).
func TestAddBackendDisruption(t *testing.T) {
	const size = 65537
	for _, n := range []int{5, 10, 30} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			bs := makeBackends(n)
			before := mustBuild(t, testSeed, bs, size)
			bound := 1.25 * size / float64(n)
			for a := range 20 {
				grown := append(slices.Clone(bs), Backend{Key: fmt.Sprintf("10.1.0.%d:80", a+1), Weight: 1})
				after := mustBuild(t, testSeed, grown, size)
				changed := 0
				for i := range before {
					// Indices of the old backends are unchanged: the newcomer is appended.
					if after[i] != before[i] {
						changed++
					}
				}
				if float64(changed) > bound {
					t.Errorf("adding %s changed %d slots, want ≤ 1.25·M/N = %.0f", grown[n].Key, changed, bound)
				}
			}
		})
	}
}

func TestOrderIndependence(t *testing.T) {
	bs := makeBackends(40)
	for i := range bs {
		bs[i].Weight = uint32(i % 4) // includes weight-0 backends
	}
	const size = 4099
	want := ownerKeys(mustBuild(t, testSeed, bs, size), bs)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(bs)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := ownerKeys(mustBuild(t, testSeed, shuffled, size), shuffled); !slices.Equal(got, want) {
			t.Fatal("shuffling the backends changed the table")
		}
	}
}

// TestSeedsDiffer: services sharing backends must get unrelated tables, otherwise a
// backend failure shifts load identically in every service. Two unrelated tables over
// N = 10 agree on about 1/N of slots, so require at least half to differ.
func TestSeedsDiffer(t *testing.T) {
	const size = 65537
	bs := makeBackends(10)
	seeds := []string{
		testSeed,
		"web|198.51.100.10|80|udp",
		"web|198.51.100.11|80|tcp",
		"web|198.51.100.10|443|tcp",
		"api|198.51.100.10|80|tcp",
		"",
	}
	tables := make([][]int32, len(seeds))
	for i, s := range seeds {
		tables[i] = mustBuild(t, s, bs, size)
	}
	for i := range seeds {
		for j := i + 1; j < len(seeds); j++ {
			differ := 0
			for k := range tables[i] {
				if tables[i][k] != tables[j][k] {
					differ++
				}
			}
			if differ < size/2 {
				t.Errorf("seeds %q and %q: only %d of %d slots differ", seeds[i], seeds[j], differ, size)
			}
		}
	}
}

func TestWeights(t *testing.T) {
	const size = 65537
	t.Run("proportional", func(t *testing.T) {
		bs := []Backend{
			{Key: "10.0.1.1:80", Weight: 1},
			{Key: "10.0.1.2:80", Weight: 2},
			{Key: "10.0.1.3:80", Weight: 3},
			{Key: "10.0.1.4:80", Weight: 0},
		}
		counts := slotCounts(t, mustBuild(t, testSeed, bs, size), len(bs))
		for i, b := range bs[:3] {
			want := float64(size) * float64(b.Weight) / 6
			if dev := float64(counts[i])/want - 1; dev > 0.02 || dev < -0.02 {
				t.Errorf("%s (weight %d) owns %d slots, want %.0f ± 2%%", b.Key, b.Weight, counts[i], want)
			}
		}
		if counts[3] != 0 {
			t.Errorf("weight-0 backend owns %d slots, want 0", counts[3])
		}
	})
	t.Run("zero weight is absent", func(t *testing.T) {
		// A draining backend must not perturb anyone else's slots either.
		bs := makeBackends(6)
		without := ownerKeys(mustBuild(t, testSeed, bs[:5], size), bs[:5])
		bs[5].Weight = 0
		with := ownerKeys(mustBuild(t, testSeed, bs, size), bs)
		if !slices.Equal(with, without) {
			t.Error("adding a weight-0 backend changed the table")
		}
	})
	t.Run("scale invariant", func(t *testing.T) {
		bs := makeBackends(7)
		scaled := slices.Clone(bs)
		for i := range bs {
			bs[i].Weight = uint32(i + 1)
			scaled[i].Weight = 1000 * uint32(i+1)
		}
		if !slices.Equal(mustBuild(t, testSeed, bs, size), mustBuild(t, testSeed, scaled, size)) {
			t.Error("weights 1..7 and 1000..7000 give different tables")
		}
	})
	t.Run("all zero", func(t *testing.T) {
		for _, bs := range [][]Backend{nil, {{Key: "a", Weight: 0}, {Key: "b", Weight: 0}}} {
			for i, idx := range mustBuild(t, testSeed, bs, 13) {
				if idx != -1 {
					t.Fatalf("%d backends, none weighted: slot %d = %d, want -1", len(bs), i, idx)
				}
			}
		}
	})
}

// TestEverySlotFilled covers the edges of the fill loop: a single backend, exactly as
// many backends as slots, and extreme weight ratios where the light backends take a
// turn only every few billion rounds.
func TestEverySlotFilled(t *testing.T) {
	extreme := makeBackends(5)
	extreme[0].Weight = ^uint32(0)
	tests := []struct {
		name     string
		backends []Backend
		size     uint32
	}{
		{"one backend", makeBackends(1), 65537},
		{"size 2", makeBackends(2), 2},
		{"N = M", makeBackends(13), 13},
		{"N just below M", makeBackends(16), 17},
		{"mixed weights", []Backend{{"a", 5}, {"b", 0}, {"c", 1}, {"d", 7}}, 1009},
		{"extreme weights", extreme, 65537},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts := slotCounts(t, mustBuild(t, testSeed, tt.backends, tt.size), len(tt.backends))
			if len(tt.backends) == int(tt.size) && slices.Max(counts) != 1 {
				t.Errorf("N = M, but counts are %v, want one slot each", counts)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name     string
		backends []Backend
		size     uint32
		wantErr  string
	}{
		{"size zero", makeBackends(3), 0, "not prime"},
		{"size one", makeBackends(1), 1, "not prime"},
		{"size composite", makeBackends(3), 65535, "not prime"},
		{"duplicate key", []Backend{{"10.0.1.1:80", 1}, {"10.0.1.2:80", 1}, {"10.0.1.1:80", 2}}, 13, `"10.0.1.1:80"`},
		{"duplicate draining key", []Backend{{"10.0.1.1:80", 0}, {"10.0.1.1:80", 0}}, 13, "duplicate"},
		{"size below backends", makeBackends(4), 3, "smaller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := Build(testSeed, tt.backends, tt.size)
			if err == nil {
				t.Fatalf("Build succeeded with %d entries, want error containing %q", len(table), tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
	// Only weighted backends need a slot.
	bs := makeBackends(5)
	bs[0].Weight, bs[1].Weight = 0, 0
	mustBuild(t, testSeed, bs, 3)
}

func TestIsPrime(t *testing.T) {
	primes := []uint64{2, 3, 5, 13, 65537, 65539, 655373, 1048573, 1<<31 - 1, 4294967291, 1<<61 - 1, 18446744073709551557}
	composites := []uint64{
		0, 1, 4, 9, 65535, 655371, 1048575,
		561,                  // Carmichael number
		3215031751,           // strong pseudoprime to bases 2, 3, 5 and 7
		4294967297,           // 2^32 + 1 = 641 · 6700417
		65537 * 65539,        // product of two large primes
		65519 * 65521,        // the same, just below 2^32 (trial division)
		18446744073709551615, // 2^64 - 1
	}
	for _, n := range primes {
		if !IsPrime(n) {
			t.Errorf("IsPrime(%d) = false, want true", n)
		}
	}
	for _, n := range composites {
		if IsPrime(n) {
			t.Errorf("IsPrime(%d) = true, want false", n)
		}
	}
	for n := range uint64(10000) {
		want := n >= 2
		for d := uint64(2); d*d <= n; d++ {
			if n%d == 0 {
				want = false
				break
			}
		}
		if got := IsPrime(n); got != want {
			t.Fatalf("IsPrime(%d) = %v, want %v (trial division)", n, got, want)
		}
	}
}

func BenchmarkBuild(b *testing.B) {
	for _, bb := range []struct {
		n    int
		size uint32
	}{
		{10, 65537},
		{100, 65537},
		{1000, 65537},
		{1000, 655373},
	} {
		bs := makeBackends(bb.n)
		b.Run(fmt.Sprintf("N=%d/M=%d", bb.n, bb.size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(testSeed, bs, bb.size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
