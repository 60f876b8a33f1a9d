/* maglev.h: flow hash and Maglev ring lookup. The rings are built in Go
 * (internal/maglev); the program only indexes them. */
#ifndef LB_MAGLEV_H
#define LB_MAGLEV_H

#include "maps.h"
#include "jhash.h"

/* The flow key is laid out as 10 words (src, dst, ports, proto + zero padding) so it is
 * hashed in place. maglev-source hashes the client address alone: every connection of
 * a client lands on the same backend. */
static __always_inline __u32 flow_hash(const struct lb_flow_key *flow, __u32 vip_flags)
{
	if (vip_flags & LB_VIP_F_SOURCE_HASH)
		return jhash2(flow->src, 4, LB_HASH_SEED);
	return jhash2((const __u32 *)flow, sizeof(*flow) / 4, LB_HASH_SEED);
}

/* Backend id of the ring slot the hash falls on, 0 when the service has no ring. */
static __always_inline __u32 maglev_lookup(const struct lb_vip *vip, __u32 hash)
{
	__u32 slot, *id;
	void *ring;

	if (!vip->table_size)
		return 0;
	ring = bpf_map_lookup_elem(&lb_maglev, &vip->ring_block);
	if (!ring)
		return 0;
	slot = vip->ring_offset + hash % vip->table_size;
	id = bpf_map_lookup_elem(ring, &slot);
	return id ? *id : 0;
}

#endif
