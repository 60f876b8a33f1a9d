/* icmp.h: ICMP and ICMPv6 at a VIP address. Echo requests are answered by the node; an
 * error quoting a VIP flow's reply (icmp_error4/6: "fragmentation needed" / "packet too
 * big" above all, from a router that could not forward it) is recognised so that it can
 * go to the backend that sent the reply (with DSR the node never saw it). Every other
 * ICMP message to a VIP address passes to the kernel. The node's own "too big" answers
 * are in mtu.h. */
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
#define ICMP_TIME_EXCEEDED 11
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_TIME_EXCEED 3
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129
/* IPv4 precedence "internetwork control", the TOS Linux gives its ICMP errors */
#define IPTOS_PREC_INTERNETCONTROL 0xc0

enum {
	LB_ICMP_PASS = 0,  /* not the node's business: hand to the kernel */
	LB_ICMP_ECHO = 1,  /* an echo request: answer it (icmp_echo_reply) */
	LB_ICMP_QUOTE = 2, /* an error quoting a TCP/UDP packet from a VIP: pkt->flow is its flow */
};

/* The ICMP errors an end of a flow must see, as IPVS forwards them: destination
 * unreachable (frag-needed above all, for path MTU discovery; port unreachable from a
 * client gone, for a backend's UDP socket) and time exceeded; for ICMPv6 the same and
 * packet too big. Redirects, source quench, parameter problems and everything
 * informational (neighbour discovery among it) are the kernel's. */
static __always_inline int icmp_error4(const struct lb_icmp *icmp)
{
	return icmp->type == ICMP_DEST_UNREACH || icmp->type == ICMP_TIME_EXCEEDED;
}

static __always_inline int icmp_error6(const struct lb_icmp *icmp)
{
	return icmp->type == ICMPV6_DEST_UNREACH || icmp->type == ICMPV6_PKT_TOOBIG ||
	       icmp->type == ICMPV6_TIME_EXCEED;
}

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
	if (!icmp_error4(icmp))
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
	if (!icmp_error6(icmp))
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

#endif
