/* nat.h: full NAT (forwarding: nat) for backends that cannot decapsulate. The client's
 * packet leaves with the node's address and a port the node chose as its source and the
 * backend's address and port as its destination; the backend answers the node, and its
 * replies are translated back in XDP on their way in and sent to the client from the
 * VIP. Whichever node ECMP picked for a flow, its replies come back to that node.
 * This header keeps the state and rewrites; forward.h routes the client's packets
 * and nat_reply.h the replies. */
#ifndef LB_NAT_H
#define LB_NAT_H

#include "csum.h"
#include "flow.h"
#include "jhash.h"

/* What the NAT paths (nat_reply.h, nat_icmp.h) answer for a packet that is none of
 * theirs (not an XDP action). */
#define LB_NAT_NO_ENTRY 0x100

#define LB_NS_PER_SEC 1000000000ULL

static __always_inline __u64 nat_timeout(enum lb_nat_state s)
{
	switch (s) {
	case LB_NAT_TCP_OPENING:
		return lb_ticks(LB_NAT_TIMEOUT_OPENING * LB_NS_PER_SEC);
	case LB_NAT_TCP_ESTABLISHED:
		return lb_ticks(LB_NAT_TIMEOUT_ESTABLISHED * LB_NS_PER_SEC);
	case LB_NAT_TCP_CLOSING:
		return lb_ticks(LB_NAT_TIMEOUT_CLOSING * LB_NS_PER_SEC);
	case LB_NAT_TCP_CLOSED:
		return lb_ticks(LB_NAT_TIMEOUT_CLOSED * LB_NS_PER_SEC);
	default:
		return lb_ticks(LB_NAT_TIMEOUT_UDP * LB_NS_PER_SEC);
	}
}

/* Moves a flow's state on by a packet with TCP flags `flags`, from the backend when
 * `reply`, and pushes its expiry out. Written at most once a second while nothing
 * changes: the entry is shared by every CPU the flow's packets arrive on. */
static __always_inline void nat_track(struct lb_nat *e, __u8 proto, __u8 flags, int reply, __u64 now)
{
	enum lb_nat_state s = e->state;
	__u64 expires;

	if (proto == IPPROTO_TCP) {
		if (flags & TCP_FLAG_RST)
			s = LB_NAT_TCP_CLOSED;
		else if ((flags & TCP_FLAG_FIN) && s != LB_NAT_TCP_CLOSED)
			s = LB_NAT_TCP_CLOSING;
		else if (!(flags & TCP_FLAG_SYN) && s == LB_NAT_TCP_OPENING && (e->replied || reply))
			s = LB_NAT_TCP_ESTABLISHED;
	}
	if (reply && !e->replied)
		e->replied = 1;
	expires = now + nat_timeout(s);
	if (s != e->state || expires > e->expires + lb_ticks(LB_NS_PER_SEC)) {
		e->state = s;
		e->expires = expires;
	}
}

/* Whether a NAT entry was made for this client flow. */
static __always_inline int nat_owns(const struct lb_nat *e, const struct lb_packet *pkt)
{
	const struct lb_flow_key *f = &pkt->flow;

	return e->client_port == f->sport && e->vip_port == f->dport &&
	       e->client[0] == f->src[0] && e->client[1] == f->src[1] && e->client[2] == f->src[2] &&
	       e->client[3] == f->src[3] && e->vip[0] == f->dst[0] && e->vip[1] == f->dst[1] &&
	       e->vip[2] == f->dst[2] && e->vip[3] == f->dst[3];
}

/* Finds or gives the client flow its node port towards the backend in key (whose
 * node_port it sets). A free port is taken by inserting its entry with BPF_NOEXIST, so
 * two flows (on any CPUs) never get the same (backend, backend port, node port). An
 * entry past its expiry frees its port, which is taken over by overwriting: the one
 * window left is two CPUs taking over the same expired port in the same instant, which
 * needs two new flows whose candidates meet there within nanoseconds (an atomic
 * compare-and-swap would close it, at the price of BPF ISA v3 for the whole program). */
static __always_inline int nat_port_of(const struct lb_packet *pkt, const struct lb_choice *c,
				       struct lb_nat_key *key, __u64 now)
{
	struct lb_nat_flow *f = bpf_map_lookup_elem(&lb_nat_flows, &pkt->flow);
	struct lb_nat_flow given = {.backend_id = c->backend_id};
	struct lb_nat entry = {};
	struct lb_nat *e;
	__u32 hash;

	if (f && f->backend_id == c->backend_id) {
		key->node_port = f->node_port;
		e = bpf_map_lookup_elem(&lb_nats, key);
		if (e && now < e->expires && nat_owns(e, pkt)) {
			nat_track(e, pkt->flow.proto, pkt->tcp_flags, 0, now);
			return 0;
		}
	}

	__builtin_memcpy(entry.client, pkt->flow.src, sizeof(entry.client));
	__builtin_memcpy(entry.vip, pkt->flow.dst, sizeof(entry.vip));
	entry.client_port = pkt->flow.sport;
	entry.vip_port = pkt->flow.dport;
	entry.backend_id = c->backend_id;
	entry.state = pkt->flow.proto == IPPROTO_TCP ? LB_NAT_TCP_OPENING : LB_NAT_UDP;
	nat_track(&entry, pkt->flow.proto, pkt->tcp_flags, 0, now);
	entry.expires = now + nat_timeout(entry.state);

	/* the whole 5-tuple: c->hash is the client address alone under maglev-source */
	hash = jhash2((const __u32 *)&pkt->flow, sizeof(pkt->flow) / 4, LB_HASH_SEED);
	for (int i = 0; i < LB_NAT_PROBES; i++) {
		key->node_port = bpf_htons(LB_NAT_PORT_MIN + (hash + i * LB_NAT_PROBE_STEP) % LB_NAT_PORT_COUNT);
		if (bpf_map_update_elem(&lb_nats, key, &entry, BPF_NOEXIST) == 0)
			goto given;
		e = bpf_map_lookup_elem(&lb_nats, key);
		if (!e)
			continue;
		if (nat_owns(e, pkt)) { /* ours, its lb_nat_flows entry lost */
			nat_track(e, pkt->flow.proto, pkt->tcp_flags, 0, now);
			goto given;
		}
		if (now >= e->expires) {
			bpf_map_update_elem(&lb_nats, key, &entry, BPF_EXIST);
			goto given;
		}
	}
	return -LB_DROP_NAT_PORTS;
given:
	given.node_port = key->node_port;
	bpf_map_update_elem(&lb_nat_flows, &pkt->flow, &given, BPF_ANY);
	return 0;
}

/* Rewrites a TCP/UDP packet's addresses (4 words; IPv4: word 0) and ports (the first
 * word of the L4 header: source, destination), updating the IPv4 header checksum and
 * the L4 checksum incrementally. An IPv4 UDP datagram without checksum keeps none. */
static __always_inline int nat_rewrite(void *l3, void *l4, void *data_end, __u8 family, __u8 proto,
				       const __be32 *src, const __be32 *dst, __be32 ports)
{
	struct udphdr *udp = l4;
	__u32 diff = 0;

	if (family == LB_FAMILY_V4) {
		struct iphdr *iph = l3;

		if ((void *)(iph + 1) > data_end)
			return -LB_DROP_TRUNCATED;
		diff = csum_diff32(diff, iph->saddr, src[0]);
		diff = csum_diff32(diff, iph->daddr, dst[0]);
		iph->saddr = src[0];
		iph->daddr = dst[0];
		iph->check = csum_apply(iph->check, diff);
	} else {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return -LB_DROP_TRUNCATED;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			diff = csum_diff32(diff, ip6->saddr.in6_u.u6_addr32[i], src[i]);
			diff = csum_diff32(diff, ip6->daddr.in6_u.u6_addr32[i], dst[i]);
			ip6->saddr.in6_u.u6_addr32[i] = src[i];
			ip6->daddr.in6_u.u6_addr32[i] = dst[i];
		}
	}
	if ((void *)(udp + 1) > data_end)
		return -LB_DROP_TRUNCATED;
	diff = csum_diff32(diff, *(__be32 *)udp, ports);
	*(__be32 *)udp = ports;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end)
			return -LB_DROP_TRUNCATED;
		tcp->check = csum_apply(tcp->check, diff);
	} else {
		if (udp->check || family == LB_FAMILY_V6) {
			__u16 check = csum_apply(udp->check, diff);

			udp->check = check ? check : 0xffff; /* 0 would mean "no checksum" */
		}
	}
	return 0;
}

/* The L4 ports word as it sits in the header: source, then destination. */
static __always_inline __be32 nat_ports(__be16 sport, __be16 dport)
{
	union {
		__be16 p[2];
		__be32 w;
	} u = {.p = {sport, dport}};

	return u.w;
}

/* The IP header of the frame: constant offsets for the verifier (one tag at most). */
static __always_inline void *nat_l3(struct xdp_md *ctx, const struct lb_packet *pkt)
{
	void *data = (void *)(long)ctx->data;

	return pkt->has_vlan ? data + ETH_HLEN + sizeof(struct vlan_hdr) : data + ETH_HLEN;
}

/* Gives the client's packet, routed to its NAT backend, the node's address and the
 * flow's node port as source and the backend's address and port as destination. */
static __always_inline int nat_translate(struct xdp_md *ctx, const struct lb_packet *pkt,
					 const struct lb_choice *c)
{
	const struct lb_backend *b = c->backend;
	void *data = (void *)(long)ctx->data;
	struct lb_nat_key key = {};
	__be32 src[4] = {};
	int rc;

	__builtin_memcpy(key.backend, b->addr, sizeof(key.backend));
	key.backend_port = b->nat_port ? b->nat_port : pkt->flow.dport;
	key.proto = pkt->flow.proto;
	key.family = pkt->family;
	rc = nat_port_of(pkt, c, &key, lb_now());
	if (rc < 0)
		return rc;
	if (pkt->family == LB_FAMILY_V4)
		src[0] = node_addr4;
	else
		copy_node_addr6(src);
	return nat_rewrite(nat_l3(ctx, pkt), data + (pkt->l4_off & 0xff), (void *)(long)ctx->data_end,
			   pkt->family, pkt->flow.proto, src, b->addr, nat_ports(key.node_port, key.backend_port));
}

#endif
