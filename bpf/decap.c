// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* decap.c: manifold's backend agent data plane, a tc-ingress program that turns IPIP
 * packets for this backend's VIPs back into the client's own packets (DSR). */
#include "lib/decap.h"

SEC("tc")
int manifold_decap(struct __sk_buff *skb)
{
	return decap(skb);
}

char _license[] SEC("license") = "Dual BSD/GPL";
