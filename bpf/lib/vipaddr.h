/* vipaddr.h: is a destination one of our VIP addresses? The question every packet asks,
 * answered by one inlined array probe (lb4/lb6_vip_slots) for all addresses but the few
 * that share a slot, which ask the hash maps. internal/datapath/vipaddrs.go writes both
 * and mirrors the slot function. */
#ifndef LB_VIPADDR_H
#define LB_VIPADDR_H

#include "maps.h"

/* Words are taken as loaded from the packet (network-order bytes in host order); the
 * fold keeps the bits that differ between the addresses of one prefix. */
static __always_inline __u32 vip_slot(__u32 x)
{
	return (x ^ (x >> 16)) & (LB_VIP_SLOTS - 1);
}

static __always_inline int is_vip4(__be32 daddr)
{
	__u32 slot = vip_slot(daddr);
	struct lb4_vip_slot *s = bpf_map_lookup_elem(&lb4_vip_slots, &slot);

	if (!s || !s->count)
		return 0;
	if (s->addr == daddr)
		return 1;
	return s->count > 1 && bpf_map_lookup_elem(&lb4_vip_addrs, &daddr);
}

static __always_inline int is_vip6(const struct in6_addr *daddr)
{
	const __u32 *w = daddr->in6_u.u6_addr32;
	__u32 slot = vip_slot(w[0] ^ w[1] ^ w[2] ^ w[3]);
	struct lb6_vip_slot *s = bpf_map_lookup_elem(&lb6_vip_slots, &slot);

	if (!s || !s->count)
		return 0;
	if (s->addr[0] == w[0] && s->addr[1] == w[1] && s->addr[2] == w[2] && s->addr[3] == w[3])
		return 1;
	return s->count > 1 && bpf_map_lookup_elem(&lb6_vip_addrs, daddr);
}

#endif
