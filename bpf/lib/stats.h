/* stats.h: per-CPU counters. Every drop goes through count_drop so that no packet for a
 * VIP disappears without a reason. */
#ifndef LB_STATS_H
#define LB_STATS_H

#include "maps.h"

static __always_inline int count_drop(enum lb_drop_reason reason)
{
	__u64 *n = bpf_map_lookup_elem(&lb_drops, &reason);

	if (n)
		*n += 1;
	return XDP_DROP;
}

static __always_inline void count_event(enum lb_event event)
{
	__u64 *n = bpf_map_lookup_elem(&lb_events, &event);

	if (n)
		*n += 1;
}

/* Counts a packet sent to a backend, into the backend's counters of this CPU. */
static __always_inline void count_forward(struct lb_counters *c, __u64 bytes, __u32 new_flow)
{
	c->packets++;
	c->bytes += bytes;
	c->new_flows += new_flow;
}

#endif
