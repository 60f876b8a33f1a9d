// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* pktrate.c: the programs of the packet-rate benchmark (bench/pktrate.go) other than
 * manifold itself: the traffic generator, the sink's counter, and the references a
 * node is measured against (XDP_PASS in front of the kernel's own forwarding, a
 * minimal XDP redirect, a minimal XDP IPIP forwarder). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lib/csum.h"

/* The generated frame's first 48 bytes (Ethernet + IPv4 + UDP headers, checksums
 * included, and the start of the payload), set from Go before load. In 64-bit words
 * read through volatile: a plain copy of a const global would let the compiler fold in
 * its compile-time zeros. */
#define GEN_HDR_WORDS 6
volatile const __u64 gen_header[GEN_HDR_WORDS];

/* Flows the generator cycles through (their UDP source ports are gen_sport_base +
 * 0 .. gen_flows-1). Not const: one loaded generator serves every flow count, and Go
 * changes it between runs. */
__u32 gen_flows = 1;
volatile const __u16 gen_sport_base = 10000;

/* What a forwarder writes: the link-layer addresses toward the sink (destination then
 * source, as on the wire, in 32-bit words for the reason given at gen_header), and for
 * IPIP the outer source and destination. */
volatile const __u32 fwd_macs[3];
volatile const __be32 fwd_outer_src;
volatile const __be32 fwd_outer_dst;

/* Frames the generator has made, per CPU: BPF_PROG_RUN may run the program more often
 * than asked when a signal interrupts it, so the program counts for itself. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gen_sent SEC(".maps");

struct sink_count {
	__u64 packets;
	__u64 ipip; /* of them IPv4-in-IPv4 */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_count);
} sink_counts SEC(".maps");

/* The forwarders' one egress port, at key 0. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fwd_port SEC(".maps");

/* Run by BPF_PROG_RUN in live-frame mode, where XDP_TX sends the frame out of the
 * context's ingress device. Live frames sit in recycled pages that the device under
 * test rewrites in place (TTL, NAT, encapsulation in front of the frame), so every
 * header byte is written again on every run, not only the port that varies. */
SEC("xdp")
int pktrate_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct udphdr *udp = data + ETH_HLEN + sizeof(struct iphdr);
	__u64 *words = data;
	__u32 zero = 0;
	__u64 *sent;

	if (data + GEN_HDR_WORDS * sizeof(__u64) > data_end)
		return XDP_ABORTED;
	sent = bpf_map_lookup_elem(&gen_sent, &zero);
	if (!sent)
		return XDP_ABORTED;
#pragma unroll
	for (int i = 0; i < GEN_HDR_WORDS; i++)
		words[i] = gen_header[i];
	/* the UDP checksum is 0 (none), so the port changes no checksum */
	udp->source = bpf_htons(gen_sport_base + (__u16)(*sent % gen_flows));
	*sent += 1;
	return XDP_TX;
}

/* Counts and drops, so the sink's stack never limits the rate. */
SEC("xdp")
int pktrate_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	__u32 zero = 0;
	struct sink_count *c = bpf_map_lookup_elem(&sink_counts, &zero);

	if (!c)
		return XDP_DROP;
	c->packets++;
	if ((void *)(ip + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP) &&
	    ip->protocol == IPPROTO_IPIP)
		c->ipip++;
	return XDP_DROP;
}

/* Hands every frame to the kernel. On a veth the frames another device redirects in
 * are received only while the veth has an XDP program (it is what gives it NAPI). */
SEC("xdp")
int pktrate_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

static __always_inline int write_macs(struct ethhdr *eth)
{
	__u32 *w = (__u32 *)eth;

	w[0] = fwd_macs[0];
	w[1] = fwd_macs[1];
	w[2] = fwd_macs[2];
	return bpf_redirect_map(&fwd_port, 0, 0);
}

/* The least a forwarder across ports does: new link-layer addresses, devmap redirect. */
SEC("xdp")
int pktrate_redirect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	return write_macs(eth);
}

/* The least an encapsulating load balancer does: an outer IPv4 header to one fixed
 * backend, new link-layer addresses, devmap redirect. No parsing beyond the inner
 * length, no hashing, no lookups but the devmap. */
SEC("xdp")
int pktrate_ipip(struct xdp_md *ctx)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *outer, *inner;

	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct iphdr)))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	outer = data + ETH_HLEN;
	inner = outer + 1;
	if ((void *)(inner + 1) > data_end)
		return XDP_DROP;
	outer->version = 4;
	outer->ihl = sizeof(*outer) / 4;
	outer->tos = 0;
	outer->tot_len = bpf_htons(bpf_ntohs(inner->tot_len) + sizeof(*outer));
	outer->id = 0;
	outer->frag_off = 0;
	outer->ttl = 64;
	outer->protocol = IPPROTO_IPIP;
	outer->check = 0;
	outer->saddr = fwd_outer_src;
	outer->daddr = fwd_outer_dst;
	outer->check = ipv4_header_csum(outer);
	eth->h_proto = bpf_htons(ETH_P_IP);
	return write_macs(eth);
}

char _license[] SEC("license") = "Dual BSD/GPL";
