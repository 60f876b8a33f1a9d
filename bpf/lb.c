// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* lb.c: manifold's XDP load balancer. parse → flow table (or service → Maglev) → FIB
 * → IPIP or GUE encapsulation → XDP_TX / redirect; ICMP to a VIP is answered or sent to
 * its flow's backend. Everything that is not for a VIP passes untouched, or in router
 * mode is forwarded by the FIB (transit.h); every drop is counted by reason. */
#include "lib/parse.h"
#include "lib/flow.h"
#include "lib/icmp.h"
#include "lib/forward.h"
#include "lib/transit.h"
#include "lib/nat_reply.h"
#include "lib/nat_icmp.h"
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

/* Chooses the backend of a packet the flow table does not answer. A TCP flow is
 * remembered from its first packet without SYN (the client's ACK of the handshake), not
 * from its SYN: a SYN, spoofed or retransmitted, costs no insert into the flow table and
 * evicts no established flow. Its backend is kept in the SYN memory instead (a store
 * into an array), and the ACK opens the entry with it, so a ring change between
 * the two does not move the handshake. A RST ends the flow: remembering it would only
 * evict a live one. Any other miss (UDP, and flows that ECMP moved here from another
 * node) opens an entry, so the flow then survives ring changes on this node too. */
static __always_inline int choose_new(const struct lb_packet *pkt, const struct lb_vip *vip, __u64 key_hash,
				      struct lb_choice *c)
{
	__u32 hash = flow_hash(&pkt->flow, vip->flags);

	if (pkt->tcp_flags & TCP_FLAG_SYN) {
		/* A new connection on the 5-tuple of an earlier one (a client reusing its
		 * port) is not looked for here: its ACK finds the earlier entry superseded by
		 * this SYN (flow_superseded) and reopens it. */
		if (!maglev_select(pkt, vip, hash, c))
			return 0;
		syn_remember(pkt, key_hash, c);
		return 1;
	}
	if (!syn_recall(pkt, vip, key_hash, c) && !maglev_select(pkt, vip, hash, c))
		return 0;
	if (!(pkt->tcp_flags & TCP_FLAG_RST))
		flow_remember(pkt, key_hash, c);
	return 1;
}

/* Returns an XDP action, or a negative enum lb_drop_reason. */
static __always_inline int balance(struct xdp_md *ctx, struct lb_packet *pkt)
{
	struct lb_choice c = {};
	__u64 key_hash = flow_key_hash(&pkt->flow);

	/* A SYN opens a connection: it goes by the ring, never by a flow entry (a
	 * retransmitted SYN hashes to the same backend unless the ring changed in between,
	 * and then its ACK follows it through the SYN memory). */
	if ((pkt->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN || !flow_lookup(pkt, key_hash, &c)) {
		const struct lb_vip *vip = vip_lookup(pkt);

		if (!vip)
			return XDP_PASS; /* a VIP address, but no service on this port/protocol */
		if (!choose_new(pkt, vip, key_hash, &c))
			return -LB_DROP_NO_BACKEND;
	}
	if (!c.backend)
		return -LB_DROP_NO_BACKEND;
	return forward(ctx, pkt, &c);
}

/* ICMP to a VIP address: echo requests are answered; an error quoting a VIP flow goes
 * to the flow's backend, by the same choice as the flow's own packets but without
 * creating a flow entry (to a NAT backend translated, as its reply was); the rest
 * passes to the kernel. */
static __always_inline int handle_icmp(struct xdp_md *ctx, struct lb_packet *pkt)
{
	struct lb_choice c = {};
	int rc;

	rc = icmp_classify(ctx, pkt);
	if (rc < 0)
		return rc;
	if (rc == LB_ICMP_ECHO)
		return icmp_echo_reply(ctx, pkt);
	if (rc != LB_ICMP_QUOTE)
		return XDP_PASS;
	if (!flow_lookup(pkt, flow_key_hash(&pkt->flow), &c)) {
		const struct lb_vip *vip = vip_lookup(pkt);

		if (!vip)
			return XDP_PASS;
		if (!maglev_select(pkt, vip, flow_hash(&pkt->flow, vip->flags), &c))
			return -LB_DROP_NO_BACKEND;
	}
	if (!c.backend)
		return -LB_DROP_NO_BACKEND;
	/* a NAT backend gets the message about its own packet: translated back, not
	 * encapsulated (nat_icmp.h) */
	if (c.backend->encap == LB_ENCAP_NAT)
		rc = icmp_to_nat_backend(ctx, pkt, &c);
	else
		rc = forward(ctx, pkt, &c);
	if (rc >= 0 && rc != XDP_PASS)
		count_event(LB_EV_ICMP_TO_BACKEND);
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
	if (rc == LB_PARSE_OTHER) {
		rc = nat_reply(ctx, &pkt);
		if (rc == LB_NAT_NO_ENTRY)
			return transit(ctx, &pkt);
		if (rc < 0)
			return count_drop(-rc);
		return rc;
	}
	if (rc < 0)
		return count_drop(-rc);

	rc = rc == LB_PARSE_ICMP ? handle_icmp(ctx, &pkt) : balance(ctx, &pkt);
	if (rc < 0)
		return count_drop(-rc);
	return rc;
}

char _license[] SEC("license") = "Dual BSD/GPL";
