/* icmp.h: ICMP and ICMPv6 at a VIP address. Echo requests are answered by the node;
 * "fragmentation needed" / "packet too big" quoting a VIP flow is recognised so that it
 * can go to the backend that sent the packet that did not fit (with DSR the node never
 * saw it); and the node tells a client when its packet would not fit once encapsulated.
 * Every other ICMP message to a VIP address passes to the kernel. */
#ifndef LB_ICMP_H
#define LB_ICMP_H

#include "parse.h"
#include "csum.h"
#include "stats.h"

/* The first 8 bytes of ICMP and ICMPv6 have the same layout. */
struct lb_icmp {
	__u8 type;
	__u8 code;
	__be16 check;
	__be32 data; /* echo id and sequence; next-hop MTU (low 16 bits in v4, all 32 in v6) */
};

#define ICMP_HDR_LEN 8
#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4 /* code of ICMP_DEST_UNREACH */
#define ICMP_ECHO 8
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129
/* IPv4 precedence "internetwork control", the TOS Linux gives its ICMP errors */
#define IPTOS_PREC_INTERNETCONTROL 0xc0

enum {
	LB_ICMP_PASS = 0,  /* not the node's business: hand to the kernel */
	LB_ICMP_ECHO = 1,  /* an echo request: answer it (icmp_echo_reply) */
	LB_ICMP_QUOTE = 2, /* an error quoting a TCP/UDP packet from a VIP: pkt->flow is its flow */
};

static __always_inline void swap_macs(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

/* Reads the ports of the TCP/UDP packet quoted at `l4` and makes pkt->flow the flow it
 * belongs to: the quoted packet went from the VIP to the client, the flow is the other
 * way round. Its addresses are set by the caller. */
static __always_inline int icmp_quoted_ports(struct lb_packet *pkt, __be16 *ports, void *l3_end,
					     void *data_end)
{
	if ((void *)(ports + 2) > data_end || (void *)(ports + 2) > l3_end)
		return -LB_DROP_TRUNCATED;
	pkt->flow.sport = ports[1];
	pkt->flow.dport = ports[0];
	pkt->icmp = 1;
	return LB_ICMP_QUOTE;
}

static __always_inline int icmp4_classify(struct lb_packet *pkt, struct lb_icmp *icmp,
					  void *l3_end, void *data_end)
{
	struct iphdr *q = (void *)(icmp + 1);

	if (icmp->type == ICMP_ECHO && icmp->code == 0)
		return LB_ICMP_ECHO;
	if (icmp->type != ICMP_DEST_UNREACH || icmp->code != ICMP_FRAG_NEEDED)
		return LB_ICMP_PASS;
	if ((void *)(q + 1) > data_end || (void *)(q + 1) > l3_end)
		return -LB_DROP_TRUNCATED;
	if (q->version != 4 || q->ihl < 5)
		return -LB_DROP_MALFORMED;
	/* about a packet the VIP sent (not some other address's), with ports */
	if (q->saddr != pkt->flow.dst[0] || (q->frag_off & bpf_htons(0x1fff)) ||
	    (q->protocol != IPPROTO_TCP && q->protocol != IPPROTO_UDP))
		return LB_ICMP_PASS;
	pkt->flow.src[0] = q->daddr;
	pkt->flow.proto = q->protocol;
	return icmp_quoted_ports(pkt, (void *)q + q->ihl * 4, l3_end, data_end);
}

static __always_inline int same_addr6(const __be32 *a, const __be32 *b)
{
	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]));
}

static __always_inline int icmp6_classify(struct lb_packet *pkt, struct lb_icmp *icmp,
					  void *l3_end, void *data_end)
{
	struct ipv6hdr *q = (void *)(icmp + 1);

	if (icmp->type == ICMPV6_ECHO_REQUEST && icmp->code == 0)
		return LB_ICMP_ECHO;
	if (icmp->type != ICMPV6_PKT_TOOBIG)
		return LB_ICMP_PASS; /* neighbour discovery for the VIP among them */
	if ((void *)(q + 1) > data_end || (void *)(q + 1) > l3_end)
		return -LB_DROP_TRUNCATED;
	if (q->version != 6)
		return -LB_DROP_MALFORMED;
	if (!same_addr6(q->saddr.in6_u.u6_addr32, pkt->flow.dst) ||
	    (q->nexthdr != IPPROTO_TCP && q->nexthdr != IPPROTO_UDP))
		return LB_ICMP_PASS;
	__builtin_memcpy(pkt->flow.src, &q->daddr, sizeof(pkt->flow.src));
	pkt->flow.proto = q->nexthdr;
	return icmp_quoted_ports(pkt, (void *)(q + 1), l3_end, data_end);
}

/* What to do with an ICMP message to a VIP address: LB_ICMP_PASS, LB_ICMP_ECHO,
 * LB_ICMP_QUOTE, or a negative drop reason. */
static __always_inline int icmp_classify(struct xdp_md *ctx, struct lb_packet *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *l3 = data + pkt->l2_len;
	struct lb_icmp *icmp;
	void *l3_end;

	/* the verifier wants the offsets bounded: both come from the parser, which
	 * checked them against the packet; the masks only restate that */
	icmp = data + (pkt->l4_off & 0xff);
	l3_end = l3 + (pkt->l3_len & 0xffff);
	if ((void *)(icmp + 1) > data_end || (void *)(icmp + 1) > l3_end)
		return -LB_DROP_TRUNCATED;
	if (pkt->family == LB_FAMILY_V4)
		return icmp4_classify(pkt, icmp, l3_end, data_end);
	return icmp6_classify(pkt, icmp, l3_end, data_end);
}

/* Answers an echo request in place: addresses and MACs swapped, type changed, the
 * checksum updated for the one word that changed. Sent back out the port it came in by. */
static __always_inline int icmp_echo_reply(struct xdp_md *ctx, struct lb_packet *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct lb_icmp *icmp = data + (pkt->l4_off & 0xff);
	void *l3 = pkt->has_vlan ? data + ETH_HLEN + sizeof(struct vlan_hdr) : data + ETH_HLEN;
	__u16 old, new;

	if ((void *)(icmp + 1) > data_end)
		return -LB_DROP_TRUNCATED;
	if (pkt->family == LB_FAMILY_V4) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return -LB_DROP_TRUNCATED;
		if (ip->ihl != 5)
			return XDP_PASS; /* options (record route...) are the kernel's business */
		old = bpf_htons(ICMP_ECHO << 8);
		new = bpf_htons(ICMP_ECHOREPLY << 8);
		icmp->type = ICMP_ECHOREPLY;
		ip->daddr = ip->saddr;
		ip->saddr = pkt->flow.dst[0];
		ip->ttl = LB_OUTER_TTL;
		ip->check = 0;
		ip->check = ipv4_header_csum(ip);
	} else {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return -LB_DROP_TRUNCATED;
		old = bpf_htons(ICMPV6_ECHO_REQUEST << 8);
		new = bpf_htons(ICMPV6_ECHO_REPLY << 8);
		icmp->type = ICMPV6_ECHO_REPLY;
		/* the pseudo-header's sum does not change when the addresses swap */
		__builtin_memcpy(&ip6->daddr, &ip6->saddr, sizeof(ip6->daddr));
		__builtin_memcpy(&ip6->saddr, pkt->flow.dst, sizeof(ip6->saddr));
		ip6->hop_limit = LB_OUTER_TTL;
	}
	icmp->check = csum_replace2(icmp->check, old, new);
	if ((void *)(eth + 1) > data_end)
		return -LB_DROP_TRUNCATED;
	swap_macs(eth);
	count_event(LB_EV_ICMP_ECHO_REPLY);
	return XDP_TX;
}

/* Turns the packet into "fragmentation needed" (DF set) / "packet too big" for its
 * sender, quoting the first LB_ICMP*_QUOTE bytes of it, from the VIP, out the port it
 * came in by. `mtu` is the largest client packet that fits once encapsulated. An IPv4
 * packet without DF gets no answer: the sender asked routers to fragment it, which an
 * encapsulating node cannot do, so it is dropped and counted (too_big). */
static __always_inline int icmp_too_big(struct xdp_md *ctx, const struct lb_packet *pkt, __u32 mtu)
{
	int v4 = pkt->family == LB_FAMILY_V4;
	int quote = v4 ? LB_ICMP4_QUOTE : LB_ICMP6_QUOTE;
	int hdrs = (v4 ? IPV4_HDR_LEN : IPV6_HDR_LEN) + ICMP_HDR_LEN;
	void *data, *data_end;
	__u8 client_mac[ETH_ALEN], node_mac[ETH_ALEN];
	struct ethhdr *eth;
	struct lb_icmp *icmp;
	void *l3;
	__u64 sum;

	/* never an error about an error (RFC 1122 3.2.2) */
	if (pkt->icmp || (v4 && !pkt->df) || pkt->l3_len < quote)
		return -LB_DROP_TOO_BIG;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return -LB_DROP_TRUNCATED;
	__builtin_memcpy(client_mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(node_mac, eth->h_dest, ETH_ALEN);

	/* cut the packet to the quote, then make room for IP + ICMP in front of it: the
	 * quote stays where it is, the new headers go between it and the link layer */
	if (bpf_xdp_adjust_tail(ctx, (int)(pkt->l2_len + quote) - (int)bpf_xdp_get_buff_len(ctx)))
		return -LB_DROP_ENCAP;
	if (bpf_xdp_adjust_head(ctx, -hdrs))
		return -LB_DROP_ENCAP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	l3 = pkt->has_vlan ? data + ETH_HLEN + sizeof(struct vlan_hdr) : data + ETH_HLEN;
	if ((void *)(eth + 1) > data_end)
		return -LB_DROP_ENCAP;
	__builtin_memcpy(eth->h_dest, client_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, node_mac, ETH_ALEN);
	if (pkt->has_vlan) {
		struct vlan_hdr *vh = (void *)(eth + 1);

		if ((void *)(vh + 1) > data_end)
			return -LB_DROP_ENCAP;
		eth->h_proto = ETH_P_8021Q_BE;
		vh->tci = pkt->vlan_tci;
		vh->encap_proto = v4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	} else {
		eth->h_proto = v4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	}

	if (v4) {
		struct iphdr *ip = l3;

		icmp = (void *)(ip + 1);
		if ((void *)(icmp + 1) + LB_ICMP4_QUOTE > data_end)
			return -LB_DROP_ENCAP;
		ip->version = 4;
		ip->ihl = IPV4_HDR_LEN / 4;
		ip->tos = IPTOS_PREC_INTERNETCONTROL;
		ip->tot_len = bpf_htons(IPV4_HDR_LEN + ICMP_HDR_LEN + LB_ICMP4_QUOTE);
		ip->id = 0;
		ip->frag_off = IP_DF_BE;
		ip->ttl = LB_OUTER_TTL;
		ip->protocol = IPPROTO_ICMP;
		ip->check = 0;
		ip->saddr = pkt->flow.dst[0];
		ip->daddr = pkt->flow.src[0];
		ip->check = ipv4_header_csum(ip);
		icmp->type = ICMP_DEST_UNREACH;
		icmp->code = ICMP_FRAG_NEEDED;
		icmp->check = 0;
		icmp->data = bpf_htonl(mtu & 0xffff);
		sum = bpf_csum_diff(NULL, 0, (void *)icmp, ICMP_HDR_LEN + LB_ICMP4_QUOTE, 0);
	} else {
		struct ipv6hdr *ip6 = l3;

		icmp = (void *)(ip6 + 1);
		if ((void *)(icmp + 1) + LB_ICMP6_QUOTE > data_end)
			return -LB_DROP_ENCAP;
		*(__be32 *)ip6 = bpf_htonl(6U << 28);
		ip6->payload_len = bpf_htons(ICMP_HDR_LEN + LB_ICMP6_QUOTE);
		ip6->nexthdr = IPPROTO_ICMPV6;
		ip6->hop_limit = LB_OUTER_TTL;
		__builtin_memcpy(&ip6->saddr, pkt->flow.dst, sizeof(ip6->saddr));
		__builtin_memcpy(&ip6->daddr, pkt->flow.src, sizeof(ip6->daddr));
		icmp->type = ICMPV6_PKT_TOOBIG;
		icmp->code = 0;
		icmp->check = 0;
		icmp->data = bpf_htonl(mtu);
		/* pseudo-header: addresses, upper-layer length, next header */
		sum = bpf_csum_diff(NULL, 0, (void *)&ip6->saddr, 32, 0);
		sum += bpf_htons(ICMP_HDR_LEN + LB_ICMP6_QUOTE) + bpf_htons(IPPROTO_ICMPV6);
		sum += bpf_csum_diff(NULL, 0, (void *)icmp, ICMP_HDR_LEN + LB_ICMP6_QUOTE, 0);
	}
	icmp->check = csum_fold64(sum);
	count_event(LB_EV_ICMP_TOO_BIG_SENT);
	return XDP_TX;
}

#endif
