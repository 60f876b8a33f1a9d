// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* decap.c: manifold's backend agent data plane: turns IPIP and GUE packets for this
 * backend's VIPs back into the client's own packets (DSR). Two entry points over the
 * same parser (lib/decap.h); the agent attaches one of them (backend.hook). */
#include "lib/decap.h"

/* backend.hook: tc, at tc ingress. */
SEC("tc")
int manifold_decap(struct __sk_buff *skb)
{
	return decap_tc(skb);
}

/* backend.hook: xdp, native XDP on backend.interface. */
SEC("xdp")
int manifold_decap_xdp(struct xdp_md *ctx)
{
	return decap_xdp(ctx);
}

char _license[] SEC("license") = "Dual BSD/GPL";
