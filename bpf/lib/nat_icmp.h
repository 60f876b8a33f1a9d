/* nat_icmp.h: ICMP errors about a NAT flow, translated as its packets are, so that
 * each end gets an error about the packet it sent itself.
 *
 * About a reply: any error icmp_error4/6 names (icmp.h). The reply left the node
 * translated (from the VIP to the client); the client, or a router on its side that
 * could not forward it ("fragmentation needed" / "packet too big" above all), answers
 * the VIP, quoting the translated packet. The backend only knows the packet it sent (to
 * the node's address and the flow's node port), so the message goes to it translated
 * back: from the node, its quote from the backend to the node. From the
 * node, not from the router that wrote it: the backend only ever talks to the node, and
 * that router may well be on the node's way to the backend, where it would drop a
 * packet bearing its own address as source (Linux does, as a martian).
 *
 * About a client's packet: any error the backend or a router on its side sends to the
 * node's address (nat_icmp_to_client, below).
 *
 * Without them path MTU discovery through a NAT node fails both ways and large
 * transfers stall, and a UDP client of a closed port, or a backend answering a client
 * gone, waits for its timeout. */
#ifndef LB_NAT_ICMP_H
#define LB_NAT_ICMP_H

#include "nat.h"
#include "icmp.h"
#include "forward.h"

/* What the checksum over 16-bit words gains when one of them goes from `from` to `to`
 * (the 16-bit half of csum_diff32). */
static __always_inline __u32 csum_diff16(__u32 sum, __u16 from, __u16 to)
{
	return sum + (__u16)~from + to;
}

/* Whether n bytes from p are in the packet (data_end) and in its IP packet (l3_end):
 * the verifier knows the first, the checksums need the second. */
static __always_inline int nat_icmp_has(void *p, int n, void *l3_end, void *data_end)
{
	return p + n <= data_end && p + n <= l3_end;
}

/* Rewrites the quoted TCP/UDP header's ports, and its checksum when the quote holds
 * it, for a quoted packet whose addresses changed by addr_diff (csum_diff32 sums).
 * Returns what changed in the ICMP message's bytes, for its own checksum. */
static __always_inline __u32 nat_icmp_quoted_l4(void *ql4, void *l3_end, void *data_end, __u8 proto,
						__u32 addr_diff, __be32 ports, int v4)
{
	__u32 l4_diff, msg_diff;
	__u16 *check = NULL, old;

	if (!nat_icmp_has(ql4, 4, l3_end, data_end))
		return 0; /* cannot happen: the callers read the ports */
	l4_diff = csum_diff32(addr_diff, *(__be32 *)ql4, ports);
	msg_diff = csum_diff32(0, *(__be32 *)ql4, ports);
	*(__be32 *)ql4 = ports;
	if (proto == IPPROTO_TCP && nat_icmp_has(ql4, 18, l3_end, data_end))
		check = ql4 + 16;
	else if (proto == IPPROTO_UDP && nat_icmp_has(ql4, 8, l3_end, data_end))
		check = ql4 + 6;
	if (!check || (proto == IPPROTO_UDP && v4 && !*check))
		return msg_diff; /* not quoted, or an IPv4 datagram without checksum */
	old = *check;
	*check = csum_apply(old, l4_diff);
	if (proto == IPPROTO_UDP && !*check)
		*check = 0xffff;
	return csum_diff16(msg_diff, old, *check);
}

/* pkt is the ICMP message to the VIP, its flow the client's flow it quotes (icmp.h),
 * whose backend c is a NAT one. Returns an XDP action or a negative drop reason;
 * XDP_PASS when the node holds no NAT flow of that 5-tuple towards that backend. */
static __always_inline int icmp_to_nat_backend(struct xdp_md *ctx, struct lb_packet *pkt,
					       const struct lb_choice *c)
{
	const struct lb_backend *b = c->backend;
	struct lb_nat_flow *nf = bpf_map_lookup_elem(&lb_nat_flows, &pkt->flow);
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 id = c->backend_id, mtu = 0, qdiff = 0, mdiff = 0;
	struct lb_backend_cpu_state *bc;
	struct lb_icmp *icmp;
	__be32 ports;
	void *l3_end;
	int rc;

	if (!nf || nf->backend_id != c->backend_id)
		return XDP_PASS;
	/* the quoted packet, as the backend sent it: from its port to the node port */
	ports = nat_ports(b->nat_port ? b->nat_port : pkt->flow.dport, nf->node_port);
	icmp = data + (pkt->l4_off & 0xff);
	l3_end = nat_l3(ctx, pkt) + (pkt->l3_len & 0xffff);
	if (pkt->family == LB_FAMILY_V4) {
		struct iphdr *iph = nat_l3(ctx, pkt);
		struct iphdr *q = (void *)(icmp + 1);
		__u16 old;

		if ((void *)(iph + 1) > data_end || !nat_icmp_has(q, sizeof(*q), l3_end, data_end) || q->ihl < 5)
			return -LB_DROP_TRUNCATED;
		/* outer: from the node to the backend (no pseudo-header in ICMPv4) */
		iph->check = csum_apply(iph->check, csum_diff32(csum_diff32(0, iph->saddr, node_addr4), iph->daddr,
								b->addr[0]));
		iph->saddr = node_addr4;
		iph->daddr = b->addr[0];
		/* quote: from the backend to the node instead of from the VIP to the client */
		qdiff = csum_diff32(0, q->saddr, b->addr[0]);
		qdiff = csum_diff32(qdiff, q->daddr, node_addr4);
		q->saddr = b->addr[0];
		q->daddr = node_addr4;
		old = q->check;
		q->check = csum_apply(old, qdiff);
		mdiff = csum_diff16(qdiff, old, q->check);
		mdiff += nat_icmp_quoted_l4((void *)q + (q->ihl & 0xf) * 4, l3_end, data_end, q->protocol, qdiff,
					    ports, 1);
	} else {
		struct ipv6hdr *ip6 = nat_l3(ctx, pkt);
		struct ipv6hdr *q = (void *)(icmp + 1);
		__u32 pdiff = 0;

		if ((void *)(ip6 + 1) > data_end || !nat_icmp_has(q, sizeof(*q), l3_end, data_end))
			return -LB_DROP_TRUNCATED;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			/* the outer addresses are in ICMPv6's pseudo-header */
			pdiff = csum_diff32(pdiff, ip6->saddr.in6_u.u6_addr32[i], node_addr6[i]);
			pdiff = csum_diff32(pdiff, ip6->daddr.in6_u.u6_addr32[i], b->addr[i]);
			ip6->saddr.in6_u.u6_addr32[i] = node_addr6[i];
			ip6->daddr.in6_u.u6_addr32[i] = b->addr[i];
			qdiff = csum_diff32(qdiff, q->saddr.in6_u.u6_addr32[i], b->addr[i]);
			qdiff = csum_diff32(qdiff, q->daddr.in6_u.u6_addr32[i], node_addr6[i]);
			q->saddr.in6_u.u6_addr32[i] = b->addr[i];
			q->daddr.in6_u.u6_addr32[i] = node_addr6[i];
		}
		mdiff = pdiff + qdiff + nat_icmp_quoted_l4(q + 1, l3_end, data_end, q->nexthdr, qdiff, ports, 0);
	}
	if ((void *)(icmp + 1) > data_end)
		return -LB_DROP_TRUNCATED;
	icmp->check = csum_apply(icmp->check, mdiff);

	bc = bpf_map_lookup_elem(&lb_backend_cpu, &id);
	if (!bc)
		return -LB_DROP_NO_ROUTE;
	/* an error about an error is never sent: a message too big for the route drops */
	rc = route_to_backend(ctx, pkt, b, &bc->nh, pkt->l3_len, &mtu);
	if (rc < 0)
		return rc;
	rc = transmit(ctx, pkt, &bc->nh);
	if (rc < 0)
		return rc;
	count_forward(&bc->stats, pkt->l3_len, 0);
	return rc;
}

/* Routes a packet to a NAT flow's client: fib holds its family and addresses (from the
 * VIP to the client); the next hop goes into nh. The flow's replies (nat_reply.h) and
 * errors about its packets take this route. */
static __always_inline int nat_route_to_client(struct xdp_md *ctx, const struct lb_packet *pkt, __u8 proto,
					       struct bpf_fib_lookup *fib, struct lb_nexthop *nh)
{
	int rc;

	fib->ifindex = ctx->ingress_ifindex;
	fib->l4_protocol = proto;
	fib->tot_len = pkt->l3_len;
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return -LB_DROP_NO_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return -LB_DROP_TOO_BIG;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return -LB_DROP_NO_ROUTE;
	nh->ifindex = fib->ifindex;
	__builtin_memcpy(nh->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(nh->smac, fib->smac, ETH_ALEN);
	return 0;
}

/* The live NAT entry of a quoted packet from the node: its TCP/UDP header at ql4 gives
 * the node port and the backend port, key->backend and key->family are set by the
 * caller. NULL when the quote is cut before the ports or no live entry has them. */
static __always_inline struct lb_nat *nat_icmp_entry(struct lb_nat_key *key, void *ql4, __u8 proto,
						     void *l3_end, void *data_end)
{
	struct lb_nat *e;

	if (!nat_icmp_has(ql4, 4, l3_end, data_end))
		return NULL;
	key->node_port = ((struct udphdr *)ql4)->source;
	key->backend_port = ((struct udphdr *)ql4)->dest;
	key->proto = proto;
	e = bpf_map_lookup_elem(&lb_nats, key);
	return e && lb_now() < e->expires ? e : NULL;
}

/* The other way: an ICMP error about a client's packet after translation (from the
 * node's address and the flow's node port to the backend), which the backend or a
 * router on its side sent to the node's address: "fragmentation needed" / "packet too
 * big", port unreachable, time exceeded. The client only knows the packet it sent (to
 * the VIP), so the message goes to it translated back: from the VIP (as the node's own
 * too-big answers, mtu.h), its quote from the client to the VIP.
 * pkt is a packet to no VIP (parse_packet's LB_PARSE_OTHER), l3 its IP header; fib, key
 * and nh are nat_reply's, zeroed (the stack has no room for a second set). Returns an
 * XDP action, a negative drop reason, or LB_NAT_NO_ENTRY for any other packet. */
static __always_inline int nat_icmp_to_client(struct xdp_md *ctx, struct lb_packet *pkt, void *l3,
					      struct bpf_fib_lookup *fib, struct lb_nat_key *key,
					      struct lb_nexthop *nh)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u32 qdiff = 0, mdiff = 0;
	struct lb_icmp *icmp;
	struct lb_nat *e;
	void *l3_end, *ql4;
	__u8 proto;
	int rc;

	key->family = pkt->family;
	if (pkt->family == LB_FAMILY_V4) {
		struct iphdr *iph = l3;
		struct iphdr *q;
		__u16 old;

		/* to the node, ICMP, no options (then the message is at a constant offset), whole */
		if ((void *)(iph + 1) > data_end || iph->daddr != node_addr4 || !node_addr4 ||
		    iph->protocol != IPPROTO_ICMP || iph->ihl != 5 || (iph->frag_off & IP_MF_OFFSET_BE))
			return LB_NAT_NO_ENTRY;
		pkt->l3_len = bpf_ntohs(iph->tot_len);
		l3_end = l3 + (pkt->l3_len & 0xffff);
		icmp = (void *)(iph + 1);
		q = (void *)(icmp + 1);
		if (!nat_icmp_has(q, sizeof(*q), l3_end, data_end) || !icmp_error4(icmp) || q->version != 4 ||
		    q->ihl < 5 || q->saddr != node_addr4 ||
		    (q->frag_off & bpf_htons(0x1fff)) || (q->protocol != IPPROTO_TCP && q->protocol != IPPROTO_UDP))
			return LB_NAT_NO_ENTRY;
		proto = q->protocol;
		ql4 = (void *)q + (q->ihl & 0xf) * 4;
		key->backend[0] = q->daddr;
		e = nat_icmp_entry(key, ql4, proto, l3_end, data_end);
		if (!e)
			return LB_NAT_NO_ENTRY;
		/* outer: from the VIP to the client */
		iph->check = csum_apply(iph->check, csum_diff32(csum_diff32(0, iph->saddr, e->vip[0]), iph->daddr,
								e->client[0]));
		iph->saddr = e->vip[0];
		iph->daddr = e->client[0];
		/* quote: from the client to the VIP, as the client sent it */
		qdiff = csum_diff32(0, q->saddr, e->client[0]);
		qdiff = csum_diff32(qdiff, q->daddr, e->vip[0]);
		q->saddr = e->client[0];
		q->daddr = e->vip[0];
		old = q->check;
		q->check = csum_apply(old, qdiff);
		mdiff = csum_diff16(qdiff, old, q->check);
		mdiff += nat_icmp_quoted_l4(ql4, l3_end, data_end, proto, qdiff,
					    nat_ports(e->client_port, e->vip_port), 1);
		fib->family = LB_AF_INET;
		fib->ipv4_src = e->vip[0];
		fib->ipv4_dst = e->client[0];
	} else {
		struct ipv6hdr *ip6 = l3;
		struct ipv6hdr *q;
		const __u32 *d;
		__u32 pdiff = 0;

		if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_ICMPV6)
			return LB_NAT_NO_ENTRY;
		d = ip6->daddr.in6_u.u6_addr32;
		if (d[0] != node_addr6[0] || d[1] != node_addr6[1] || d[2] != node_addr6[2] ||
		    d[3] != node_addr6[3] || !(d[0] | d[1] | d[2] | d[3]))
			return LB_NAT_NO_ENTRY;
		pkt->l3_len = IPV6_HDR_LEN + bpf_ntohs(ip6->payload_len);
		l3_end = l3 + (pkt->l3_len & 0xffff);
		icmp = (void *)(ip6 + 1);
		q = (void *)(icmp + 1);
		if (!nat_icmp_has(q, sizeof(*q), l3_end, data_end) || !icmp_error6(icmp) ||
		    q->version != 6 || q->saddr.in6_u.u6_addr32[0] != node_addr6[0] ||
		    q->saddr.in6_u.u6_addr32[1] != node_addr6[1] || q->saddr.in6_u.u6_addr32[2] != node_addr6[2] ||
		    q->saddr.in6_u.u6_addr32[3] != node_addr6[3] ||
		    (q->nexthdr != IPPROTO_TCP && q->nexthdr != IPPROTO_UDP))
			return LB_NAT_NO_ENTRY;
		proto = q->nexthdr;
		ql4 = q + 1;
		__builtin_memcpy(key->backend, &q->daddr, sizeof(key->backend));
		e = nat_icmp_entry(key, ql4, proto, l3_end, data_end);
		if (!e)
			return LB_NAT_NO_ENTRY;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			/* the outer addresses are in ICMPv6's pseudo-header */
			pdiff = csum_diff32(pdiff, ip6->saddr.in6_u.u6_addr32[i], e->vip[i]);
			pdiff = csum_diff32(pdiff, ip6->daddr.in6_u.u6_addr32[i], e->client[i]);
			ip6->saddr.in6_u.u6_addr32[i] = e->vip[i];
			ip6->daddr.in6_u.u6_addr32[i] = e->client[i];
			qdiff = csum_diff32(qdiff, q->saddr.in6_u.u6_addr32[i], e->client[i]);
			qdiff = csum_diff32(qdiff, q->daddr.in6_u.u6_addr32[i], e->vip[i]);
			q->saddr.in6_u.u6_addr32[i] = e->client[i];
			q->daddr.in6_u.u6_addr32[i] = e->vip[i];
		}
		mdiff = pdiff + qdiff +
			nat_icmp_quoted_l4(ql4, l3_end, data_end, proto, qdiff, nat_ports(e->client_port, e->vip_port), 0);
		fib->family = LB_AF_INET6;
		__builtin_memcpy(fib->ipv6_src, e->vip, sizeof(fib->ipv6_src));
		__builtin_memcpy(fib->ipv6_dst, e->client, sizeof(fib->ipv6_dst));
	}
	if ((void *)(icmp + 1) > data_end)
		return -LB_DROP_TRUNCATED;
	icmp->check = csum_apply(icmp->check, mdiff);

	rc = nat_route_to_client(ctx, pkt, pkt->family == LB_FAMILY_V4 ? IPPROTO_ICMP : IPPROTO_ICMPV6, fib, nh);
	if (rc < 0)
		return rc;
	rc = transmit(ctx, pkt, nh);
	if (rc >= 0)
		count_event(LB_EV_NAT_ICMP_TO_CLIENT);
	return rc;
}

#endif
