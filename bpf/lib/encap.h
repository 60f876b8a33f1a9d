/* encap.h: IPIP encapsulation (IPv4-in-IPv4, IPv6-in-IPv6). The inner packet is left
 * byte for byte as the client sent it; only room for the outer header is added in front.
 * The link-layer header is written afterwards by forward.h, once the FIB has spoken. */
#ifndef LB_ENCAP_H
#define LB_ENCAP_H

#include "parse.h"
#include "csum.h"
#include "node.h"

#define IPV4_HDR_LEN 20
#define IPV6_HDR_LEN 40

/* Grows the packet by `len` bytes at the front and returns a pointer to where the
 * outer header goes, right after the link-layer header of the original size. */
static __always_inline void *encap_make_room(struct xdp_md *ctx, const struct lb_packet *pkt,
					     int len, int hdr_len)
{
	void *data, *data_end, *outer;

	if (bpf_xdp_adjust_head(ctx, -len))
		return NULL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* the verifier needs a constant offset: l2_len is one of two values */
	outer = pkt->has_vlan ? data + ETH_HLEN + sizeof(struct vlan_hdr) : data + ETH_HLEN;
	if (outer + hdr_len > data_end)
		return NULL;
	return outer;
}

static __always_inline int encap_ipip4(struct xdp_md *ctx, const struct lb_packet *pkt,
				       const struct lb_backend *b)
{
	struct iphdr *ip = encap_make_room(ctx, pkt, IPV4_HDR_LEN, IPV4_HDR_LEN);

	if (!ip)
		return -LB_DROP_ENCAP;
	ip->version = 4;
	ip->ihl = IPV4_HDR_LEN / 4;
	ip->tos = pkt->tos;
	ip->tot_len = bpf_htons(pkt->l3_len + IPV4_HDR_LEN);
	ip->id = 0;
	ip->frag_off = pkt->df ? IP_DF_BE : 0;
	ip->ttl = LB_OUTER_TTL;
	ip->protocol = IPPROTO_IPIP_V4;
	ip->check = 0;
	ip->saddr = node_addr4;
	ip->daddr = b->addr[0];
	ip->check = ipv4_header_csum(ip);
	return 0;
}

static __always_inline int encap_ipip6(struct xdp_md *ctx, const struct lb_packet *pkt,
				       const struct lb_backend *b, __u32 hash)
{
	struct ipv6hdr *ip6 = encap_make_room(ctx, pkt, IPV6_HDR_LEN, IPV6_HDR_LEN);

	if (!ip6)
		return -LB_DROP_ENCAP;
	/* version, traffic class copied from the inner packet, and a flow label from the
	 * flow hash so that ECMP and RSS downstream can tell the tunnelled flows apart
	 * (RFC 6438) */
	*(__be32 *)ip6 = bpf_htonl((6U << 28) | ((__u32)pkt->tos << 20) | (hash & 0xfffff));
	ip6->payload_len = bpf_htons(pkt->l3_len);
	ip6->nexthdr = IPPROTO_IPIP_V6;
	ip6->hop_limit = LB_OUTER_TTL;
	copy_node_addr6(ip6->saddr.in6_u.u6_addr32);
	__builtin_memcpy(&ip6->daddr, b->addr, sizeof(ip6->daddr));
	return 0;
}

#endif
