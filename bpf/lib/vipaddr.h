/* vipaddr.h: is a destination one of the node's VIP addresses? The node's VIP filter
 * (vipfilter.h) over lb4/lb6_vip_slots and lb4/lb6_vip_addrs. */
#ifndef LB_VIPADDR_H
#define LB_VIPADDR_H

#include "maps.h"
#include "vipfilter.h"

static __always_inline int is_vip4(__be32 daddr)
{
	return vip_filter_has4(&lb4_vip_slots, LB_VIP_SLOTS, &lb4_vip_addrs, daddr);
}

static __always_inline int is_vip6(const struct in6_addr *daddr)
{
	return vip_filter_has6(&lb6_vip_slots, LB_VIP_SLOTS, &lb6_vip_addrs, daddr);
}

#endif
