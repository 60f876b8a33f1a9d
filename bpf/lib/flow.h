/* flow.h: backend selection — the flow table first, so an established flow keeps its
 * backend whatever the ring says now, and the service's Maglev ring second. */
#ifndef LB_FLOW_H
#define LB_FLOW_H

#include "flowtable.h"
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

/* Takes a remembered choice (a flow entry, or a SYN's) if its backend may still take
 * the flow: draining backends keep their flows, down ones lose them. */
static __always_inline int take_choice(const struct lb_packet *pkt, const struct lb_flow *f,
				       struct lb_choice *c)
{
	struct lb_backend *b = backend_of(f->backend_id, f->service_id, pkt->family);

	if (!b || (b->state != LB_BACKEND_UP && b->state != LB_BACKEND_DRAINING))
		return 0;
	c->backend = b;
	c->backend_id = f->backend_id;
	c->service_id = f->service_id;
	c->hash = f->hash;
	return 1;
}

/* Whether a SYN memory slot holds this very 5-tuple (compared as five words). */
static __always_inline int syn_of_flow(const struct lb_packet *pkt, const struct lb_syn *s)
{
	const __u64 *a = (const void *)&pkt->flow, *b = (const void *)&s->flow;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4];
}

/* A flow's slot of the SYN memory: by the flow table's hash of its 5-tuple (seeded, as
 * the table's), so that a packet knows it before it reads anything — the slot's load
 * goes out beside the flow table's (flow_lookup) instead of after it. */
static __always_inline struct lb_syn *syn_slot(__u64 key_hash)
{
	__u32 slot = (__u32)key_hash & (LB_SYN_SLOTS - 1);

	return bpf_map_lookup_elem(&lb_syns, &slot);
}

/* Whether a flow entry belongs to an earlier connection on the same 5-tuple (a client
 * reusing its port): a fresh SYN of this very 5-tuple sits in the flow's SYN slot (s),
 * not yet taken by an ACK. The SYN does not probe the flow table for such an entry (a
 * probe of a full table misses the caches, ~190 ns a SYN); the connection's first
 * packet without SYN finds the entry here and goes the new-flow way instead, where it
 * takes the SYN's choice, empties the slot (syn_recall), overwrites the entry and is
 * counted as a new flow — also when the SYN chose the earlier connection's backend. On
 * the established path this is a compare that fails at the first word for every flow
 * but one whose SYN is there and not taken (a taken slot's first word is 0). A SYN of
 * another flow that took the slot before the ACK came leaves the earlier entry in
 * force (as when the SYN memory misses). */
static __always_inline int flow_superseded(const struct lb_packet *pkt, const struct lb_syn *s)
{
	return s && syn_of_flow(pkt, s) && lb_now() - s->at <= lb_ticks(LB_SYN_MEMORY_NS);
}

/* The flow table's answer (h: the packet's flow_key_hash). Looked up before the service
 * itself, so an established flow costs no service lookup at all. A TCP packet loads its
 * SYN slot's first word before it probes the table: both are likely cache misses on a
 * busy node (a new flow's first ACK reads the slot again in syn_recall), and issued
 * together they cost about one. */
static __always_inline int flow_lookup(const struct lb_packet *pkt, __u64 h, struct lb_choice *c)
{
	const struct lb_syn *s = NULL;
	struct lb_flow flow;

	if (pkt->flow.proto == IPPROTO_TCP) {
		s = syn_slot(h);
		if (s)
			asm volatile("" ::"r"(*(const volatile __u64 *)&s->flow));
	}
	return flow_table_get(&pkt->flow, h, &flow) && !flow_superseded(pkt, s) && take_choice(pkt, &flow, c);
}

/* Whether one more new flow may go into the table this second (node.new_flow_rate).
 * Above the bound a flood of new flows (spoofed packets without SYN, random UDP;
 * spoofed SYNs insert nothing) cannot push the established flows out of the table;
 * the flows it leaves out are still forwarded, by Maglev, to the backend every node
 * picks, only not remembered (Katran's max_conn_rate). Counted per CPU: a shared counter
 * would bounce its cache line between the CPUs on every new flow. */
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

/* Picks a backend from the service's Maglev ring (hash: the flow's flow_hash) for a flow
 * the table does not hold, or whose backend went down. Returns 0 when there is none. */
static __always_inline int maglev_select(const struct lb_packet *pkt, const struct lb_vip *vip,
					 __u32 hash, struct lb_choice *c)
{
	__u32 id = maglev_lookup(vip, hash);
	struct lb_backend *b = backend_of(id, vip->service_id, pkt->family);

	if (!b || b->state != LB_BACKEND_UP)
		return 0;
	c->backend = b;
	c->backend_id = id;
	c->service_id = vip->service_id;
	c->hash = hash;
	return 1;
}

/* Opens the flow's entry (up to node.new_flow_rate) with the backend chosen for it, and
 * counts it as a new flow: once per flow, here. An entry an earlier connection on the
 * same 5-tuple left is overwritten. */
static __always_inline void flow_remember(const struct lb_packet *pkt, __u64 h, struct lb_choice *c)
{
	struct lb_flow entry = {
		.backend_id = c->backend_id,
		.service_id = c->service_id,
		.hash = c->hash,
	};

	if (flow_insert_allowed())
		flow_table_put(&pkt->flow, h, &entry);
	c->new_flow = 1;
}

/* Keeps a SYN's backend for its handshake's ACK, so that a ring change in between does
 * not move the handshake. */
static __always_inline void syn_remember(const struct lb_packet *pkt, __u64 h, const struct lb_choice *c)
{
	struct lb_syn *s = syn_slot(h);

	if (!s)
		return;
	s->flow = pkt->flow;
	s->choice.backend_id = c->backend_id;
	s->choice.service_id = c->service_id;
	s->choice.hash = c->hash;
	s->at = lb_now();
}

/* The backend a recent SYN of this very flow went to, if it may still take the flow;
 * after a collision the ACK follows the ring. The slot is taken (its first word zeroed)
 * whether or not the backend may: one ACK per SYN opens the flow, and the flow's later
 * packets pass flow_superseded at its first word. Two CPUs storing SYNs into one slot
 * at once may leave it torn: the service check keeps such a mix inside the flow's own
 * service (a torn key does not match at all). */
static __always_inline int syn_recall(const struct lb_packet *pkt, const struct lb_vip *vip, __u64 h,
				      struct lb_choice *c)
{
	struct lb_syn *s = syn_slot(h);

	if (!s || lb_now() - s->at > lb_ticks(LB_SYN_MEMORY_NS) || !syn_of_flow(pkt, s) ||
	    s->choice.service_id != vip->service_id)
		return 0;
	*(__u64 *)&s->flow = 0; /* taken */
	return take_choice(pkt, &s->choice, c);
}

#endif
