// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* reference.c: the trivial programs the data-plane benchmark measures manifold against,
 * in the same run: the least any XDP forwarder does (swap MACs, XDP_TX), nothing at all
 * (XDP_DROP), and for the backend's decapsulation, a tc program and an XDP program that
 * let every packet through, and the least a tc decapsulation does (take the outer
 * header off with the kernel's helper, nothing else). */
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

/* The one way tc has to take bytes off the front of a packet, alone: 20 bytes (an outer
 * IPv4 header) after the MAC header, no parsing, no check. The floor under any tc
 * decapsulation, manifold's included. */
SEC("tc")
int reference_tc_strip(struct __sk_buff *skb)
{
	bpf_skb_adjust_room(skb, -20, BPF_ADJ_ROOM_MAC, 0);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual BSD/GPL";
