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

static __always_inline void count_forward(__u32 service_id, __u32 backend_id, __u64 bytes, __u32 new_flow)
{
	struct lb_counters *c;

	c = bpf_map_lookup_elem(&lb_backend_stats, &backend_id);
	if (c) {
		c->packets++;
		c->bytes += bytes;
		c->new_flows += new_flow;
	}
	c = bpf_map_lookup_elem(&lb_service_stats, &service_id);
	if (c) {
		c->packets++;
		c->bytes += bytes;
		c->new_flows += new_flow;
	}
}

#endif
