/* flow.h: backend selection — the flow table first, so an established flow keeps its
 * backend whatever the ring says now, and the Maglev ring second. */
#ifndef LB_FLOW_H
#define LB_FLOW_H

#include "maps.h"
#include "maglev.h"
#include "parse.h"

static __always_inline struct lb_backend *backend_of(__u32 id, const struct lb_vip *vip,
						     const struct lb_packet *pkt)
{
	struct lb_backend *b;

	if (!id)
		return NULL;
	b = bpf_map_lookup_elem(&lb_backends, &id);
	/* ids are per (service, backend): an entry left by a removed service never leaks
	 * into another one */
	if (!b || b->service_id != vip->service_id || b->family != pkt->family)
		return NULL;
	return b;
}

/* Picks the backend of this packet and returns its id (0: none, drop); *hash is the
 * flow's hash (the IPv6 flow label is taken from it). */
static __always_inline __u32 select_backend(const struct lb_packet *pkt, const struct lb_vip *vip,
					    __u32 *hash, struct lb_backend **out)
{
	struct lb_flow *flow = bpf_map_lookup_elem(&lb_flows, &pkt->flow);
	struct lb_flow entry = {};
	struct lb_backend *b;
	__u32 id;

	if (flow) {
		id = flow->backend_id;
		b = backend_of(id, vip, pkt);
		/* draining backends keep their flows; down ones lose them to the ring below */
		if (b && (b->state == LB_BACKEND_UP || b->state == LB_BACKEND_DRAINING)) {
			*hash = flow->hash;
			*out = b;
			return id;
		}
	}

	*hash = flow_hash(&pkt->flow, vip->flags);
	id = maglev_lookup(vip, *hash);
	b = backend_of(id, vip, pkt);
	if (!b || b->state != LB_BACKEND_UP)
		return 0;

	/* Any miss inserts (SYNs, new UDP flows, and flows that ECMP moved here from another
	 * node), so the flow then survives ring changes on this node too. A RST ends the
	 * flow: remembering it would only evict a live one. */
	if (!(pkt->tcp_flags & TCP_FLAG_RST)) {
		entry.backend_id = id;
		entry.hash = *hash;
		bpf_map_update_elem(&lb_flows, &pkt->flow, &entry, BPF_ANY);
	}
	*out = b;
	return id;
}

#endif
