/* mtu.h: the node's answer to a client packet that would not fit the egress MTU once
 * encapsulated: "fragmentation needed" / "packet too big", never an oversized packet. */
#ifndef LB_MTU_H
#define LB_MTU_H

#include "icmp.h"

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
