/* forward.h: where an encapsulated packet goes is the Linux routing table's decision
 * (bpf_fib_lookup, its answer cached per backend for LB_FIB_CACHE_NS): XDP_TX when it
 * leaves by the port it came in on, a devmap redirect otherwise. */
#ifndef LB_FORWARD_H
#define LB_FORWARD_H

#include "encap.h"
#include "flow.h"
#include "nat.h"
#include "mtu.h"
#include "stats.h"

#define LB_AF_INET 2
#define LB_AF_INET6 10

/* Asks the FIB for the route to the backend before the packet is touched, so a drop
 * costs no rewrite. `outer_len` is the IP length after encapsulation: the kernel checks
 * it against the egress MTU and, when it does not fit, says what fits in fib->mtu_result. */
static __always_inline int fib_lookup_backend(struct xdp_md *ctx, const struct lb_packet *pkt,
					      const struct lb_backend *b, __u16 outer_len,
					      struct bpf_fib_lookup *fib)
{
	int gue = b->encap == LB_ENCAP_GUE;
	/* a NAT packet keeps its protocol; policy routing may match on it */
	__u8 proto = b->encap == LB_ENCAP_NAT ? pkt->flow.proto : gue ? IPPROTO_UDP : 0;
	int rc;

	fib->ifindex = ctx->ingress_ifindex;
	fib->tot_len = outer_len;
	if (pkt->family == LB_FAMILY_V4) {
		fib->family = LB_AF_INET;
		fib->l4_protocol = proto ? proto : IPPROTO_IPIP_V4;
		fib->tos = pkt->tos;
		fib->ipv4_src = node_addr4;
		fib->ipv4_dst = b->addr[0];
	} else {
		fib->family = LB_AF_INET6;
		fib->l4_protocol = proto ? proto : IPPROTO_IPIP_V6;
		copy_node_addr6(fib->ipv6_src);
		__builtin_memcpy(fib->ipv6_dst, b->addr, sizeof(fib->ipv6_dst));
	}

	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return 0;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return -LB_DROP_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return -LB_DROP_TOO_BIG;
	default:
		return -LB_DROP_NO_ROUTE;
	}
}

/* Makes nh, this CPU's cached next hop towards backend b, good for a packet of outer IP
 * length outer_len: as it is while it is fresh and has seen packets this large pass the
 * MTU check, from the FIB otherwise. The cache is per backend only, so the ingress port
 * (an input of the FIB lookup) does not matter for a hit: routes to backends do not
 * depend on where the client's packet came in. On -LB_DROP_TOO_BIG, *mtu is the largest
 * outer IP length the route takes. */
static __always_inline int route_to_backend(struct xdp_md *ctx, const struct lb_packet *pkt,
					    const struct lb_backend *b, struct lb_nexthop *nh,
					    __u16 outer_len, __u32 *mtu)
{
	__u64 now = lb_now();
	int rc;

	if (now < nh->expires && outer_len <= nh->max_len)
		return 0;
	/* in its own scope, so that a cache hit does not pay for zeroing it */
	{
		struct bpf_fib_lookup fib = {};

		rc = fib_lookup_backend(ctx, pkt, b, outer_len, &fib);
		if (rc == -LB_DROP_TOO_BIG)
			*mtu = fib.mtu_result;
		if (rc < 0)
			return rc;
		if (now >= nh->expires || nh->ifindex != fib.ifindex || outer_len > nh->max_len)
			nh->max_len = outer_len; /* a new answer: only this size is known to fit */
		nh->ifindex = fib.ifindex;
		__builtin_memcpy(nh->dmac, fib.dmac, ETH_ALEN);
		__builtin_memcpy(nh->smac, fib.smac, ETH_ALEN);
	}
	nh->expires = now + lb_ticks(LB_FIB_CACHE_NS);
	return 0;
}

/* Writes the link-layer header in front of the outer IP header and sends the packet.
 * The VLAN tag, if any, belongs to the ingress link: it is kept when the packet goes
 * back out that port and dropped when the packet is redirected to another one. */
static __always_inline int transmit(struct xdp_md *ctx, const struct lb_packet *pkt,
				    const struct lb_nexthop *nh)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__be16 proto = pkt->family == LB_FAMILY_V4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	int same_port = nh->ifindex == ctx->ingress_ifindex;
	__u32 ifindex = nh->ifindex;
	struct ethhdr *eth = data;
	long rc;

	if (pkt->has_vlan) {
		struct vlan_hdr *vh = data + ETH_HLEN;

		if ((void *)(vh + 1) > data_end)
			return -LB_DROP_ENCAP;
		if (same_port) {
			vh->tci = pkt->vlan_tci;
			vh->encap_proto = proto;
			proto = ETH_P_8021Q_BE;
		} else {
			/* shift the Ethernet header over the tag's place, then drop the tag */
			eth = data + sizeof(*vh);
		}
	}
	if ((void *)(eth + 1) > data_end)
		return -LB_DROP_ENCAP;
	__builtin_memcpy(eth->h_dest, nh->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, nh->smac, ETH_ALEN);
	eth->h_proto = proto;

	if (same_port)
		return XDP_TX;
	if (pkt->has_vlan && bpf_xdp_adjust_head(ctx, sizeof(struct vlan_hdr)))
		return -LB_DROP_ENCAP;
	/* An egress port manifold may not redirect to is a miss of the redirect's own
	 * lookup, which then returns the flags' action (XDP_DROP) instead of XDP_REDIRECT:
	 * a lookup of the port beforehand was a second kernel call (~10 ns with this host's
	 * return thunks) on every redirected packet. Such a packet, already rewritten, is
	 * dropped and counted as no_tx_port. */
	rc = bpf_redirect_map(&lb_tx_ports, ifindex, XDP_DROP);
	return rc == XDP_REDIRECT ? XDP_REDIRECT : -LB_DROP_NO_TX_PORT;
}

/* The local pseudo-backend of a service that mixes routed and tunnelled origins: its
 * share of the flows passes up to the node's stack untouched, where the VIP is on lo
 * and the tunnel edge ends them. Pinned in the flow table like any backend, so a flow
 * stays on the stack; counted like any backend's, so its new flows are the share's
 * load. */
static __always_inline int pass_to_stack(const struct lb_packet *pkt, const struct lb_choice *c)
{
	__u32 id = c->backend_id;
	struct lb_backend_cpu_state *bc = bpf_map_lookup_elem(&lb_backend_cpu, &id);

	if (bc)
		count_forward(&bc->stats, pkt->l3_len, c->new_flow);
	return XDP_PASS;
}

/* Sends a packet to the backend chosen for it: route, encapsulate (or translate, for
 * a NAT backend), transmit, count. A packet that would not fit the route's MTU once
 * encapsulated is answered with "fragmentation needed" / "packet too big" instead
 * (mtu.h). */
static __always_inline int forward(struct xdp_md *ctx, struct lb_packet *pkt,
				   const struct lb_choice *c)
{
	__u16 overhead;
	__u32 id = c->backend_id, mtu = 0;
	struct lb_backend_cpu_state *bc;
	int rc;

	/* checked before the lookup below, on the encap byte encap_overhead reads anyway:
	 * after the call, the compiler kept it in a register across it, and the
	 * encapsulated path measured a few ns slower */
	if (c->backend->encap == LB_ENCAP_LOCAL)
		return pass_to_stack(pkt, c);
	overhead = encap_overhead(pkt->family, c->backend);
	bc = bpf_map_lookup_elem(&lb_backend_cpu, &id);
	if (!bc)
		return -LB_DROP_NO_ROUTE;
	rc = route_to_backend(ctx, pkt, c->backend, &bc->nh, pkt->l3_len + overhead, &mtu);
	if (rc == -LB_DROP_TOO_BIG)
		return icmp_too_big(ctx, pkt, mtu - overhead);
	if (rc < 0)
		return rc;
	if (c->backend->encap == LB_ENCAP_NAT)
		rc = nat_translate(ctx, pkt, c);
	else
		rc = encap(ctx, pkt, c->backend, c->hash);
	if (rc < 0)
		return rc;
	rc = transmit(ctx, pkt, &bc->nh);
	if (rc < 0)
		return rc;
	count_forward(&bc->stats, pkt->l3_len, c->new_flow);
	return rc;
}

#endif
