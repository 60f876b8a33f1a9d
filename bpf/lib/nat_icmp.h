/* nat_icmp.h: "fragmentation needed" / "packet too big" about a NAT flow's reply, sent
 * to the backend as an error about its own packet. The reply left the node translated
 * (from the VIP to the client); a router on the client's side that could not forward
 * it answers the VIP, quoting the translated packet. The backend only knows the packet
 * it sent (to the node's address and the flow's node port), so the message is
 * translated the same way back: from the node to the backend, its quote from the
 * backend to the node. From the node, not from the router that wrote it: the backend
 * only ever talks to the node, and that router may well be on the node's way to the
 * backend, where it would drop a packet bearing its own address as source (Linux
 * does, as a martian). Without it a NAT backend's path MTU discovery towards its
 * clients fails, and large replies are lost. */
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
		return 0; /* cannot happen: icmp_classify read the ports */
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

#endif
