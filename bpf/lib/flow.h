/* flow.h: backend selection — the flow table first, so an established flow keeps its
 * backend whatever the ring says now, and the service's Maglev ring second. */
#ifndef LB_FLOW_H
#define LB_FLOW_H

#include "maps.h"
#include "maglev.h"
#include "node.h"
#include "parse.h"
#include "stats.h"

/* The backend a packet goes to, and what the rest of the path needs to know of it. */
struct lb_choice {
	struct lb_backend *backend;
	__u32 backend_id;
	__u32 service_id;
	__u32 hash; /* flow hash: Maglev slot, and the outer flow label, GUE port, entropy source */
	__u32 new_flow; /* 1 when the packet opens a flow entry (or would, above the bound): counted once per flow */
};

static __always_inline struct lb_backend *backend_of(__u32 id, __u32 service_id, __u8 family)
{
	struct lb_backend *b;

	if (!id)
		return NULL;
	b = bpf_map_lookup_elem(&lb_backends, &id);
	/* ids are per (service, backend) and may be reused after a while: an entry left
	 * by a removed backend never leaks into another service */
	if (!b || b->service_id != service_id || b->family != family)
		return NULL;
	return b;
}

/* The flow table's answer, if its backend may still take the flow: draining backends
 * keep their flows, down ones lose them. Looked up before the service itself, so an
 * established flow costs no service lookup at all. */
static __always_inline int flow_lookup(const struct lb_packet *pkt, struct lb_choice *c)
{
	struct lb_flow *flow = bpf_map_lookup_elem(&lb_flows, &pkt->flow);
	struct lb_backend *b;

	if (!flow)
		return 0;
	b = backend_of(flow->backend_id, flow->service_id, pkt->family);
	if (!b || (b->state != LB_BACKEND_UP && b->state != LB_BACKEND_DRAINING))
		return 0;
	c->backend = b;
	c->backend_id = flow->backend_id;
	c->service_id = flow->service_id;
	c->hash = flow->hash;
	return 1;
}

/* Whether one more new flow may go into the table this second (node.new_flow_rate).
 * Above the bound a flood of new flows (spoofed packets without SYN, random UDP;
 * spoofed SYNs insert nothing) cannot push the established flows out of the LRU table;
 * the flows it leaves out are still forwarded, by Maglev, to the backend every node
 * picks, only not remembered (Katran's max_conn_rate). Counted per CPU, like the LRU lists it protects. */
static __always_inline int flow_insert_allowed(void)
{
	__u32 limit = node_settings.new_flows_per_cpu, zero = 0;
	struct lb_flow_rate *r;
	__u64 now;

	if (!limit)
		return 1;
	r = bpf_map_lookup_elem(&lb_new_flows, &zero);
	if (!r)
		return 1;
	now = lb_now();
	if (now - r->window >= lb_ticks(LB_FLOW_RATE_WINDOW_NS)) {
		r->window = now;
		r->inserted = 0;
	}
	if (r->inserted >= limit) {
		count_event(LB_EV_FLOW_NOT_INSERTED);
		return 0;
	}
	r->inserted++;
	return 1;
}

/* Picks a backend from the service's Maglev ring for a flow the table does not hold
 * (or whose backend went down) and, when `remember`, inserts it and counts it as a new
 * flow. Returns 0 when there is none. */
static __always_inline int maglev_select(const struct lb_packet *pkt, const struct lb_vip *vip,
					 struct lb_choice *c, int remember)
{
	struct lb_flow entry = {};
	struct lb_backend *b;
	__u32 hash, id;

	hash = flow_hash(&pkt->flow, vip->flags);
	id = maglev_lookup(vip, hash);
	b = backend_of(id, vip->service_id, pkt->family);
	if (!b || b->state != LB_BACKEND_UP)
		return 0;

	if (remember && flow_insert_allowed()) {
		entry.backend_id = id;
		entry.service_id = vip->service_id;
		entry.hash = hash;
		bpf_map_update_elem(&lb_flows, &pkt->flow, &entry, BPF_ANY);
	}
	c->backend = b;
	c->backend_id = id;
	c->service_id = vip->service_id;
	c->hash = hash;
	c->new_flow = remember;
	return 1;
}

#endif
