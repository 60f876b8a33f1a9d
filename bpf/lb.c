// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* lb.c: manifold's XDP load balancer. parse → flow table (or service → Maglev) → FIB
 * → IPIP encapsulation → XDP_TX / redirect. Everything that is not for a VIP
 * passes untouched; every drop is counted by reason. */
#include "lib/parse.h"
#include "lib/flow.h"
#include "lib/encap.h"
#include "lib/forward.h"
#include "lib/stats.h"

static __always_inline const struct lb_vip *vip_lookup(const struct lb_packet *pkt)
{
	struct lb_vip_key key = {
		.port = pkt->flow.dport,
		.proto = pkt->flow.proto,
		.family = pkt->family,
	};
	const struct lb_vip *vip;

	__builtin_memcpy(key.addr, pkt->flow.dst, sizeof(key.addr));
	vip = bpf_map_lookup_elem(&lb_vips, &key);
	if (vip)
		return vip;
	key.port = 0; /* a service on every port of the address */
	return bpf_map_lookup_elem(&lb_vips, &key);
}

/* Returns an XDP action, or a negative enum lb_drop_reason. */
static __always_inline int balance(struct xdp_md *ctx, struct lb_packet *pkt)
{
	struct lb_nexthop *nh = NULL;
	struct lb_choice c = {};
	__u16 outer_len;
	int rc;

	/* A SYN opens a flow: the table cannot know it (a retransmitted SYN hashes to the
	 * same backend unless the ring changed in between), so skip the lookup, a likely
	 * cache miss in a large table. */
	if ((pkt->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN || !flow_lookup(pkt, &c)) {
		const struct lb_vip *vip = vip_lookup(pkt);

		if (!vip)
			return XDP_PASS; /* a VIP address, but no service on this port/protocol */
		if (!maglev_select(pkt, vip, &c))
			return -LB_DROP_NO_BACKEND;
	}
	if (!c.backend)
		return -LB_DROP_NO_BACKEND;

	outer_len = pkt->l3_len + (pkt->family == LB_FAMILY_V4 ? IPV4_HDR_LEN : IPV6_HDR_LEN);
	rc = route_to_backend(ctx, pkt, c.backend, c.backend_id, outer_len, &nh);
	if (rc < 0)
		return rc;
	if (!nh)
		return -LB_DROP_NO_ROUTE;

	rc = pkt->family == LB_FAMILY_V4 ? encap_ipip4(ctx, pkt, c.backend)
					 : encap_ipip6(ctx, pkt, c.backend, c.hash);
	if (rc < 0)
		return rc;
	rc = transmit(ctx, pkt, nh);
	if (rc < 0)
		return rc;
	count_forward(c.service_id, c.backend_id, pkt->l3_len);
	return rc;
}

SEC("xdp")
int manifold_lb(struct xdp_md *ctx)
{
	struct lb_packet pkt = {};
	int rc;

	rc = parse_packet(ctx, &pkt);
	if (rc == LB_PARSE_PASS)
		return XDP_PASS;
	if (rc < 0)
		return count_drop(-rc);

	rc = balance(ctx, &pkt);
	if (rc < 0)
		return count_drop(-rc);
	return rc;
}

char _license[] SEC("license") = "Dual BSD/GPL";
