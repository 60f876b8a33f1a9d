/* nat_reply.h: a backend's reply to a NAT flow (nat.h), addressed to the node's address
 * and the flow's node port, translated back in XDP on its way in: from the VIP to the
 * client, routed by the FIB. */
#ifndef LB_NAT_REPLY_H
#define LB_NAT_REPLY_H

#include "nat.h"
#include "nat_icmp.h"
#include "forward.h"

/* A packet parse_packet found not for a VIP address: if it is a backend's reply to a
 * NAT flow (to the node's address and a node port of a live entry), it is translated
 * back and sent to the client; otherwise LB_NAT_NO_ENTRY, untouched. */
static __always_inline int nat_reply(struct xdp_md *ctx, struct lb_packet *pkt)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *l3 = nat_l3(ctx, pkt);
	struct bpf_fib_lookup fib = {};
	struct lb_nat_key key = {};
	struct lb_nexthop nh = {};
	struct lb_nat *e;
	__u8 flags = 0;
	void *l4;
	__u64 now;
	int rc;

	if (pkt->family == LB_FAMILY_V4) {
		struct iphdr *iph = l3;

		if ((void *)(iph + 1) > data_end || iph->daddr != node_addr4 || !node_addr4)
			return LB_NAT_NO_ENTRY;
		if (iph->protocol == IPPROTO_ICMP)
			return nat_icmp_to_client(ctx, pkt, l3, &fib, &key, &nh);
		if ((iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_UDP) ||
		    (iph->frag_off & IP_MF_OFFSET_BE) || iph->ihl < 5)
			return LB_NAT_NO_ENTRY;
		key.backend[0] = iph->saddr;
		key.proto = iph->protocol;
		pkt->l3_len = bpf_ntohs(iph->tot_len);
		l4 = l3 + iph->ihl * 4;
	} else {
		struct ipv6hdr *ip6 = l3;
		const __u32 *d;

		if ((void *)(ip6 + 1) > data_end)
			return LB_NAT_NO_ENTRY;
		d = ip6->daddr.in6_u.u6_addr32;
		if (d[0] != node_addr6[0] || d[1] != node_addr6[1] || d[2] != node_addr6[2] ||
		    d[3] != node_addr6[3] || !(d[0] | d[1] | d[2] | d[3]))
			return LB_NAT_NO_ENTRY;
		if (ip6->nexthdr == IPPROTO_ICMPV6)
			return nat_icmp_to_client(ctx, pkt, l3, &fib, &key, &nh);
		if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
			return LB_NAT_NO_ENTRY;
		__builtin_memcpy(key.backend, &ip6->saddr, sizeof(key.backend));
		key.proto = ip6->nexthdr;
		pkt->l3_len = IPV6_HDR_LEN + bpf_ntohs(ip6->payload_len);
		l4 = ip6 + 1;
	}
	if (l4 + sizeof(struct tcphdr) <= data_end && key.proto == IPPROTO_TCP)
		flags = ((__u8 *)l4)[13];
	if (l4 + sizeof(struct udphdr) > data_end)
		return LB_NAT_NO_ENTRY;
	key.backend_port = ((struct udphdr *)l4)->source;
	key.node_port = ((struct udphdr *)l4)->dest;
	key.family = pkt->family;
	e = bpf_map_lookup_elem(&lb_nats, &key);
	now = lb_now();
	if (!e || now >= e->expires)
		return LB_NAT_NO_ENTRY;

	if (pkt->family == LB_FAMILY_V4) {
		fib.family = LB_AF_INET;
		fib.ipv4_src = e->vip[0];
		fib.ipv4_dst = e->client[0];
	} else {
		fib.family = LB_AF_INET6;
		__builtin_memcpy(fib.ipv6_src, e->vip, sizeof(fib.ipv6_src));
		__builtin_memcpy(fib.ipv6_dst, e->client, sizeof(fib.ipv6_dst));
	}
	rc = nat_route_to_client(ctx, pkt, key.proto, &fib, &nh);
	if (rc < 0)
		return rc;

	nat_track(e, key.proto, flags, 1, now);
	rc = nat_rewrite(l3, l4, data_end, pkt->family, key.proto, e->vip, e->client,
			 nat_ports(e->vip_port, e->client_port));
	if (rc < 0)
		return rc;
	rc = transmit(ctx, pkt, &nh);
	if (rc >= 0)
		count_event(LB_EV_NAT_REPLY);
	return rc;
}

#endif
