/* encap.h: IPIP (IPv4-in-IPv4, IPv6-in-IPv6) and GUE variant 1 (outer IP + UDP, then
 * the inner IP packet) encapsulation. The inner packet is left byte for byte as the
 * client sent it; only room for the outer headers is added in front. The link-layer
 * header is written afterwards by forward.h, once the FIB has spoken. */
#ifndef LB_ENCAP_H
#define LB_ENCAP_H

#include "parse.h"
#include "csum.h"
#include "node.h"

/* Bytes the encapsulation adds in front of the client's IP packet. */
static __always_inline __u16 encap_overhead(__u8 family, const struct lb_backend *b)
{
	__u16 len = family == LB_FAMILY_V4 ? IPV4_HDR_LEN : IPV6_HDR_LEN;

	if (b->encap == LB_ENCAP_NAT)
		return 0; /* rewritten in place */
	return b->encap == LB_ENCAP_GUE ? len + UDP_HDR_LEN : len;
}

/* Grows the packet by `len` bytes at the front and returns a pointer to where the
 * outer header goes, right after the link-layer header of the original size, with
 * `check_len` bytes from there known to be in the packet. */
static __always_inline void *encap_make_room(struct xdp_md *ctx, const struct lb_packet *pkt,
					     int len, int check_len)
{
	void *data, *data_end, *outer;

	if (bpf_xdp_adjust_head(ctx, -len))
		return NULL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* the verifier needs a constant offset: l2_len is one of two values */
	outer = pkt->has_vlan ? data + ETH_HLEN + sizeof(struct vlan_hdr) : data + ETH_HLEN;
	if (outer + check_len > data_end)
		return NULL;
	return outer;
}

/* Outer source: the node's address, or with entropy on an address of the node's /16 (or
 * /64) picked by the flow hash, so that backends hashing only the outer addresses (RSS
 * on IPIP) still spread the flows over their queues; a flow keeps its address. */
static __always_inline __be32 outer_src4(__u32 hash)
{
	if (!node_settings.entropy4)
		return node_addr4;
	return node_settings.entropy4 | bpf_htonl(hash & ((1U << (32 - LB_ENTROPY4_BITS)) - 1));
}

static __always_inline void outer_src6(__u32 *dst, __u32 hash)
{
	if (!node_settings.entropy6[0] && !node_settings.entropy6[1]) {
		copy_node_addr6(dst);
		return;
	}
	dst[0] = node_settings.entropy6[0];
	dst[1] = node_settings.entropy6[1];
	dst[2] = 0;
	dst[3] = bpf_htonl(hash);
}

static __always_inline __be16 gue_sport(__u32 hash)
{
	return bpf_htons(LB_GUE_SPORT_BASE + (hash >> LB_GUE_SPORT_SHIFT));
}

static __always_inline void gue_udp(struct udphdr *udp, const struct lb_packet *pkt,
				    const struct lb_backend *b, __u32 hash)
{
	udp->source = gue_sport(hash);
	udp->dest = b->gue_port;
	udp->len = bpf_htons(pkt->l3_len + UDP_HDR_LEN);
	udp->check = 0;
}

static __always_inline int encap4(struct xdp_md *ctx, const struct lb_packet *pkt,
				  const struct lb_backend *b, __u32 hash)
{
	int gue = b->encap == LB_ENCAP_GUE;
	/* every inner IPv4 packet has at least 28 bytes, so 28 after the outer start exist */
	struct iphdr *ip = encap_make_room(ctx, pkt, encap_overhead(LB_FAMILY_V4, b),
					   IPV4_HDR_LEN + UDP_HDR_LEN);

	if (!ip)
		return -LB_DROP_ENCAP;
	ipv4_header_write(ip, pkt->tos, bpf_htons(pkt->l3_len + encap_overhead(LB_FAMILY_V4, b)),
			  pkt->df ? IP_DF_BE : 0, LB_OUTER_TTL, gue ? IPPROTO_UDP : IPPROTO_IPIP_V4,
			  outer_src4(hash), b->addr[0]);
	/* UDP checksum 0: optional over IPv4 (RFC 768), as fou, VXLAN and Katran send it */
	if (gue)
		gue_udp((void *)(ip + 1), pkt, b, hash);
	return 0;
}

/* UDP checksum of a GUE packet over IPv6, where it is mandatory (RFC 8200 8.1), without
 * reading the payload: the inner TCP/UDP/ICMPv6 packet carries a valid checksum, so its
 * bytes sum to the complement of its own pseudo-header (the "local checksum offload"
 * identity of Linux's lco_csum). Of the inner header only what the inner pseudo-header
 * does not cancel remains: version/class/label and next-header/hop-limit, minus the next
 * header. A client packet with a wrong checksum gets a wrong outer one, and the backend
 * drops it as the client's own stack would have. */
static __always_inline __sum16 gue6_csum(const struct ipv6hdr *ip6, const struct udphdr *udp,
					 const struct ipv6hdr *inner)
{
	const __u16 *w = (const __u16 *)&ip6->saddr;
	const __u16 *in = (const __u16 *)inner;
	__u32 sum = 0;
	__u16 csum;

#pragma unroll
	for (int i = 0; i < 16; i++) /* outer source and destination */
		sum += w[i];
	sum += bpf_htons(IPPROTO_UDP) + udp->len;           /* outer pseudo-header */
	sum += udp->source + udp->dest + udp->len;          /* UDP header, check 0 */
	sum += in[0] + in[1] + in[3];                       /* inner header ... */
	sum += (__u16)~bpf_htons(inner->nexthdr);           /* ... less its pseudo-header */
	csum = csum_fold(sum);
	return csum ? csum : 0xffff; /* 0 would mean "no checksum" */
}

static __always_inline int encap6(struct xdp_md *ctx, const struct lb_packet *pkt,
				  const struct lb_backend *b, __u32 hash)
{
	void *data_end;
	struct ipv6hdr *ip6 = encap_make_room(ctx, pkt, encap_overhead(LB_FAMILY_V6, b),
					      IPV6_HDR_LEN + UDP_HDR_LEN);

	if (!ip6)
		return -LB_DROP_ENCAP;
	/* version, traffic class copied from the inner packet, and a flow label from the
	 * flow hash so that ECMP and RSS downstream can tell the tunnelled flows apart
	 * (RFC 6438) */
	*(__be32 *)ip6 = bpf_htonl((6U << 28) | ((__u32)pkt->tos << 20) | (hash & 0xfffff));
	ip6->hop_limit = LB_OUTER_TTL;
	outer_src6(ip6->saddr.in6_u.u6_addr32, hash);
	__builtin_memcpy(&ip6->daddr, b->addr, sizeof(ip6->daddr));
	if (b->encap != LB_ENCAP_GUE) {
		ip6->payload_len = bpf_htons(pkt->l3_len);
		ip6->nexthdr = IPPROTO_IPIP_V6;
		return 0;
	}

	struct udphdr *udp = (void *)(ip6 + 1);
	struct ipv6hdr *inner = (void *)(udp + 1);

	data_end = (void *)(long)ctx->data_end;
	if ((void *)(inner + 1) > data_end)
		return -LB_DROP_ENCAP;
	ip6->payload_len = bpf_htons(pkt->l3_len + UDP_HDR_LEN);
	ip6->nexthdr = IPPROTO_UDP;
	gue_udp(udp, pkt, b, hash);
	udp->check = gue6_csum(ip6, udp, inner);
	return 0;
}

static __always_inline int encap(struct xdp_md *ctx, const struct lb_packet *pkt,
				 const struct lb_backend *b, __u32 hash)
{
	return pkt->family == LB_FAMILY_V4 ? encap4(ctx, pkt, b, hash) : encap6(ctx, pkt, b, hash);
}

#endif
