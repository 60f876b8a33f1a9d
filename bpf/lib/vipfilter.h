/* vipfilter.h: is an address one of a set of VIPs? The question every packet asks,
 * answered by one inlined array probe (a slot per address hash, holding one of the
 * addresses there and how many share it) for all addresses but the few that share a
 * slot, which ask a hash map of every address. The node (vipaddr.h) and the backend
 * agent (decap.h) each have such a filter over maps of their own, passed in here;
 * internal/datapath/vipaddrs.go writes both and mirrors vip_slot. No maps here, so that
 * including it brings none into an object. */
#ifndef LB_VIPFILTER_H
#define LB_VIPFILTER_H

#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

/* Words are taken as loaded from the packet (network-order bytes in host order); the
 * fold keeps the bits that differ between the addresses of one prefix. nslots is a
 * power of two. */
static __always_inline __u32 vip_slot(__u32 x, __u32 nslots)
{
	return (x ^ (x >> 16)) & (nslots - 1);
}

static __always_inline int vip_filter_has4(void *slots, __u32 nslots, void *addrs, __be32 daddr)
{
	__u32 slot = vip_slot(daddr, nslots);
	struct lb4_vip_slot *s = bpf_map_lookup_elem(slots, &slot);

	if (!s || !s->count)
		return 0;
	if (s->addr == daddr)
		return 1;
	return s->count > 1 && bpf_map_lookup_elem(addrs, &daddr);
}

static __always_inline int vip_filter_has6(void *slots, __u32 nslots, void *addrs,
					   const struct in6_addr *daddr)
{
	const __u32 *w = daddr->in6_u.u6_addr32;
	__u32 slot = vip_slot(w[0] ^ w[1] ^ w[2] ^ w[3], nslots);
	struct lb6_vip_slot *s = bpf_map_lookup_elem(slots, &slot);

	if (!s || !s->count)
		return 0;
	if (s->addr[0] == w[0] && s->addr[1] == w[1] && s->addr[2] == w[2] && s->addr[3] == w[3])
		return 1;
	return s->count > 1 && bpf_map_lookup_elem(addrs, daddr);
}

#endif
