/* flowtable.h: the flow table, a hash table of our own in an array map (lb_flows):
 * buckets of LB_FLOW_WAYS ways, each way one cache line (key, choice, last use, check
 * word), and two buckets for each flow, both chosen by a seeded multiply hash of its
 * 5-tuple. A lookup is the program's own loads and compares: no kernel call, where the
 * LRU hash map it replaces cost ~32 ns of calls per packet (docs/performance.md,
 * "Where the time goes"). A new flow takes a free way, or evicts the least recently
 * used of its two buckets' eight. Entries are written without locks: a way two CPUs
 * write at once may end up with words of both, which its check word then rejects (a
 * miss: the packet goes by the ring, as after an eviction). internal/datapath/flowtable.go
 * reads and writes the same layout from Go. */
#ifndef LB_FLOWTABLE_H
#define LB_FLOWTABLE_H

#include "maps.h"
#include "node.h"

/* Buckets in lb_flows and the hash's seed: written by the daemon before load (the
 * table's size is node.flow_table_size; the seed is random, so that a client cannot pick
 * 5-tuples that crowd one bucket without seeing the node's hash). */
volatile const __u32 flow_buckets = LB_FLOW_TABLE_SIZE / LB_FLOW_WAYS;
volatile const __u64 flow_seed = 0;

/* The 5-tuple's hash for the table: five 64-bit words, each mixed with the seed and
 * multiplied by its own odd constant, summed (the multiplies run side by side). Not the
 * flow's Maglev hash (jhash), which an established packet never needs. */
static __always_inline __u64 flow_key_hash(const struct lb_flow_key *k)
{
	const __u64 *w = (const void *)k;
	__u64 seed = flow_seed;
	__u64 h = (w[0] ^ seed) * 0x9E3779B97F4A7C15ULL + (w[1] ^ seed) * 0xC2B2AE3D27D4EB4FULL +
		  (w[2] ^ seed) * 0x165667B19E3779F9ULL + (w[3] ^ seed) * 0xD6E8FEB86659FD93ULL +
		  (w[4] ^ seed) * 0xFF51AFD7ED558CCDULL;

	/* a sum of products keeps the lattice of neighbouring 5-tuples (a client's ports, a
	 * subnet's addresses): one more xor-shift and multiply (splitmix64's) spreads it */
	h ^= h >> 31;
	return h * 0xBF58476D1CE4E5B9ULL;
}

/* A flow may sit in either of two buckets: the first by the hash's high half, the
 * second by its low half. A new flow goes to the one with more free ways, and a
 * full pair evicts the least recently used of its eight: with two choices a table
 * filled to 75 % still holds 99.3 % of its flows, where one bucket of four holds 89 %,
 * and the victim of an eviction is the oldest of eight flows instead of four. A lookup
 * reads the second bucket only when the first does not hold the flow (about a third of
 * the flows of a well-filled table). */
static __always_inline __u32 flow_bucket_index(__u64 h, int second)
{
	__u64 half = second ? (__u32)h : h >> 32;

	return (half * flow_buckets) >> 32; /* scaled to the table: no division */
}

_Static_assert(sizeof(struct lb_flow_entry) == 64, "a way is one cache line");

/* The check word of an entry: its key's hash and its choice, mixed so that a choice
 * word from another flow's write changes it. */
static __always_inline __u32 flow_check(__u64 key_hash, const struct lb_flow *f)
{
	return (__u32)(key_hash >> 32) ^ (__u32)key_hash ^ f->backend_id * 0x9E3779B1U ^ f->service_id * 0x85EBCA77U ^
	       f->hash * 0xC2B2AE3DU;
}

/* The table's clock for last use: lb_now() in 32 bits (jiffies; with the ns fallback,
 * units of 2^20 ns), never 0, which marks an empty way. Ages are differences, so the
 * wrap (49 days at HZ=1000) only makes a flow idle that long look young once. */
static __always_inline __u32 flow_clock(void)
{
	__u64 now = lb_now();

	if (!kernel_hz)
		now >>= 20;
	return (__u32)now | 1;
}

static __always_inline __u32 flow_clock_ticks(__u64 ns)
{
	return kernel_hz ? (__u32)lb_ticks(ns) : (__u32)(ns >> 20);
}

static __always_inline struct lb_flow_bucket *flow_bucket(__u64 key_hash, int second)
{
	__u32 i = flow_bucket_index(key_hash, second);

	return bpf_map_lookup_elem(&lb_flows, &i);
}

/* Compared word by word, the ports first: flows of one bucket differ there most often. */
static __always_inline int flow_key_equal(const struct lb_flow_key *a, const struct lb_flow_key *b)
{
	const __u64 *x = (const void *)a, *y = (const void *)b;

	return x[4] == y[4] && x[0] == y[0] && x[2] == y[2] && x[1] == y[1] && x[3] == y[3];
}

/* Looks for k in bucket b: 1 with its choice in f, 0 when b does not hold it, -1 when
 * the way that holds it fails its check (torn: a miss). Refreshes the entry's last use
 * at most once per LB_FLOW_REFRESH_NS. */
static __always_inline int flow_bucket_get(struct lb_flow_bucket *b, const struct lb_flow_key *k, __u64 h,
					   struct lb_flow *f)
{
#pragma unroll
	for (int i = 0; i < LB_FLOW_WAYS; i++) {
		struct lb_flow_entry *e = &b->way[i];
		__u32 now;

		if (!flow_key_equal(&e->key, k))
			continue;
		*f = e->flow;
		if (e->check != flow_check(h, f))
			return -1;
		now = flow_clock();
		if (now - e->used > flow_clock_ticks(LB_FLOW_REFRESH_NS))
			e->used = now;
		return 1;
	}
	return 0;
}

/* Copies k's choice into f and returns 1 when the table holds k (h: its flow_key_hash). */
static __always_inline int flow_table_get(const struct lb_flow_key *k, __u64 h, struct lb_flow *f)
{
	struct lb_flow_bucket *b = flow_bucket(h, 0);
	int rc;

	if (!b)
		return 0;
	rc = flow_bucket_get(b, k, h, f);
	if (rc)
		return rc > 0;
	b = flow_bucket(h, 1);
	return b && flow_bucket_get(b, k, h, f) > 0;
}

/* Where in bucket b a flow of key k may go: its own way if b holds k (p->own), else the
 * first free way and how many are free, and the way used least recently with its age. */
struct lb_flow_place {
	struct lb_flow_entry *own, *free, *oldest;
	__u32 nfree, age;
};

static __always_inline void flow_bucket_place(struct lb_flow_bucket *b, const struct lb_flow_key *k,
					      __u32 now, struct lb_flow_place *p)
{
#pragma unroll
	for (int i = 0; i < LB_FLOW_WAYS; i++) {
		struct lb_flow_entry *e = &b->way[i];
		__u32 used = e->used;

		if (!used) {
			if (!p->nfree++)
				p->free = e;
			continue;
		}
		if (flow_key_equal(&e->key, k)) {
			p->own = e;
			return;
		}
		if (!p->oldest || now - used > p->age) {
			p->oldest = e;
			p->age = now - used;
		}
	}
}

/* Stores k's choice f (h: k's flow_key_hash): over k's own entry if either bucket holds
 * one (a reused 5-tuple), else into a free way of the bucket with more free ways, else
 * over the way of the two buckets used least recently. */
static __always_inline void flow_table_put(const struct lb_flow_key *k, __u64 h, const struct lb_flow *f)
{
	__u32 now = flow_clock();
	struct lb_flow_bucket *b0 = flow_bucket(h, 0), *b1 = flow_bucket(h, 1);
	struct lb_flow_place p0 = {}, p1 = {};
	struct lb_flow_entry *e;

	if (!b0 || !b1)
		return;
	flow_bucket_place(b0, k, now, &p0);
	if (!p0.own)
		flow_bucket_place(b1, k, now, &p1);
	if (p0.own)
		e = p0.own;
	else if (p1.own)
		e = p1.own;
	else if (p0.nfree && p0.nfree >= p1.nfree)
		e = p0.free;
	else if (p1.nfree)
		e = p1.free;
	else if (!p1.oldest || (p0.oldest && p0.age >= p1.age))
		e = p0.oldest;
	else
		e = p1.oldest;
	if (!e)
		return;
	e->key = *k;
	e->flow = *f;
	e->check = flow_check(h, f);
	e->used = now;
}

#endif
