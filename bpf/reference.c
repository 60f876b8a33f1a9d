// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* reference.c: the trivial programs the data-plane benchmark measures manifold against,
 * in the same run: the least any XDP forwarder does (swap MACs, XDP_TX), nothing at all
 * (XDP_DROP), and for the backend's decapsulation, a tc program and an XDP program that
 * let every packet through. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int reference_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char tmp[ETH_ALEN];

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	return XDP_TX;
}

SEC("xdp")
int reference_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

SEC("xdp")
int reference_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("tc")
int reference_tc_ok(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual BSD/GPL";
