/* transit.h: router mode (node.forward_transit). A packet for neither a VIP nor the
 * node leaves in XDP by the kernel's FIB when the FIB knows the next hop's link-layer
 * address; everything a router must look at more closely (TTL running out, IPv4
 * options, hop-by-hop options, link-local and loopback addresses, broadcast and
 * multicast, an unresolved neighbour, a packet too big for the egress, a port manifold
 * may not redirect to, a VLAN tag) goes to the kernel untouched, which forwards it,
 * answers it or drops it as it would without manifold. */
#ifndef LB_TRANSIT_H
#define LB_TRANSIT_H

#include "parse.h"
#include "csum.h"
#include "forward.h"
#include "node.h"
#include "stats.h"

#define IPV4_LOOPBACK_NET_BE bpf_htonl(0x7f000000)  /* 127.0.0.0/8 */
#define IPV4_LINK_LOCAL_NET_BE bpf_htonl(0xa9fe0000) /* 169.254.0.0/16 */
#define IPV4_MCAST_NET_BE bpf_htonl(0xe0000000)      /* 224.0.0.0/4 */

static __always_inline int ipv4_local_scope(__be32 a)
{
	return (a & bpf_htonl(0xff000000)) == IPV4_LOOPBACK_NET_BE ||
	       (a & bpf_htonl(0xffff0000)) == IPV4_LINK_LOCAL_NET_BE ||
	       (a & bpf_htonl(0xf0000000)) == IPV4_MCAST_NET_BE || !a;
}

/* fe80::/10 (link-local), ff00::/8 (multicast), ::/96 (unspecified, loopback, the
 * deprecated IPv4-compatible addresses): none is forwarded by a router. */
static __always_inline int ipv6_local_scope(const struct in6_addr *a)
{
	const __u32 *w = a->in6_u.u6_addr32;

	return (w[0] & bpf_htonl(0xffc00000)) == bpf_htonl(0xfe800000) ||
	       (w[0] & bpf_htonl(0xff000000)) == bpf_htonl(0xff000000) ||
	       (!w[0] && !w[1] && !w[2]);
}

/* Fills the FIB query of an IPv4 packet and decrements its TTL once the FIB said yes
 * (split so that a packet passed to the kernel leaves unchanged). */
static __always_inline int transit4_query(struct iphdr *iph, struct bpf_fib_lookup *fib)
{
	if (iph->version != 4 || iph->ihl != 5 || iph->ttl <= 1)
		return 0;
	if (ipv4_local_scope(iph->saddr) || ipv4_local_scope(iph->daddr))
		return 0;
	fib->family = LB_AF_INET;
	fib->tos = iph->tos;
	fib->l4_protocol = iph->protocol;
	fib->tot_len = bpf_ntohs(iph->tot_len);
	fib->ipv4_src = iph->saddr;
	fib->ipv4_dst = iph->daddr;
	return 1;
}

static __always_inline int transit6_query(struct ipv6hdr *ip6, struct bpf_fib_lookup *fib)
{
	if (ip6->version != 6 || ip6->hop_limit <= 1 || ip6->nexthdr == NEXTHDR_HOP)
		return 0;
	if (ipv6_local_scope(&ip6->saddr) || ipv6_local_scope(&ip6->daddr))
		return 0;
	fib->family = LB_AF_INET6;
	fib->flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
	fib->l4_protocol = ip6->nexthdr;
	fib->tot_len = IPV6_HDR_LEN + bpf_ntohs(ip6->payload_len);
	__builtin_memcpy(fib->ipv6_src, &ip6->saddr, sizeof(fib->ipv6_src));
	__builtin_memcpy(fib->ipv6_dst, &ip6->daddr, sizeof(fib->ipv6_dst));
	return 1;
}

/* A packet parse_packet found not addressed to a VIP. Returns an XDP action. */
static __always_inline int transit(struct xdp_md *ctx, const struct lb_packet *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup fib = {};
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	struct iphdr *iph = data + ETH_HLEN;
	__u32 ifindex;

	/* a tagged frame came in on a VLAN device, which the FIB query would not name */
	if (!node_settings.forward_transit || pkt->has_vlan)
		return XDP_PASS;
	if ((void *)(eth + 1) > data_end || (eth->h_dest[0] & 1))
		return XDP_PASS; /* broadcast or multicast frame */
	if (pkt->family == LB_FAMILY_V4) {
		if ((void *)(iph + 1) > data_end || !transit4_query(iph, &fib))
			return XDP_PASS;
	} else {
		if ((void *)(ip6 + 1) > data_end || !transit6_query(ip6, &fib))
			return XDP_PASS;
	}
	fib.ifindex = ctx->ingress_ifindex;
	/* NOT_FWDED covers the node's own addresses (local routes); FWD_DISABLED an
	 * interface that does not forward; NO_NEIGH and FRAG_NEEDED are the kernel's to
	 * resolve and answer. */
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	ifindex = fib.ifindex;
	if (ifindex != ctx->ingress_ifindex && !bpf_map_lookup_elem(&lb_tx_ports, &ifindex))
		return XDP_PASS;

	if (pkt->family == LB_FAMILY_V4) {
		__u16 *ttl_word = (__u16 *)&iph->ttl;
		__u16 old = *ttl_word;

		iph->ttl--;
		iph->check = csum_replace2(iph->check, old, *ttl_word);
	} else {
		ip6->hop_limit--;
	}
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	count_event(LB_EV_TRANSIT_FORWARDED);
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect_map(&lb_tx_ports, ifindex, 0);
}

#endif
