/* decap.h: backend-side IPIP and GUE decapsulation at tc ingress, for hosts whose kernel
 * has no ipip or fou module (and any other): strip the outer headers when the inner
 * destination is one of this backend's VIPs, and let everything else through untouched. */
#ifndef LB_DECAP_H
#define LB_DECAP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "types.h"

#define LB_MAX_DECAP_VIPS 4096

/* VIPs this backend serves: the only inner destinations it decapsulates. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_DECAP_VIPS);
	__type(key, struct lb_addr);
	__type(value, __u32);
} lb_decap_vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_DECAP_MAX);
	__type(key, enum lb_decap_counter);
	__type(value, __u64);
} lb_decap_stats SEC(".maps");

static __always_inline void decap_count(enum lb_decap_counter counter)
{
	__u64 *n = bpf_map_lookup_elem(&lb_decap_stats, &counter);

	if (n)
		*n += 1;
}

/* Outer and inner headers must be in the linear part for direct access; encapsulated
 * packets built by the XDP node always are, but a GRO'd or fragmented skb may not be. */
#define DECAP_PULL_LEN (ETH_HLEN + 60 + sizeof(struct udphdr) + sizeof(struct ipv6hdr))

/* UDP destination port of GUE packets (backend.gue_port), network order; set before load. */
volatile const __be16 decap_gue_port = 0;

/* The inner destination of an encapsulated packet, if it is one of our VIPs: then the
 * packet is ours to strip; otherwise it is counted and left alone. */
static __always_inline int decap_is_vip(struct lb_addr *inner_dst)
{
	if (bpf_map_lookup_elem(&lb_decap_vips, inner_dst))
		return 1;
	decap_count(LB_DECAP_NOT_VIP);
	return 0;
}

/* GUE variant 1 carries the inner IP packet straight after the UDP header; the version
 * nibble of that packet is its only "header" (RFC draft-ietf-intarea-gue 4.1). */
static __always_inline void *decap_gue_inner(void *l4, void *data_end)
{
	struct udphdr *udp = l4;

	if ((void *)(udp + 1) > data_end || !decap_gue_port || udp->dest != decap_gue_port)
		return NULL;
	return udp + 1;
}

/* Returns the number of outer bytes to strip, 0 to leave the packet alone. */
static __always_inline int decap_outer_len(struct __sk_buff *skb, enum lb_decap_counter *counter)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct lb_addr inner_dst = {};

	if ((void *)(eth + 1) > data_end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *outer = (void *)(eth + 1);
		struct iphdr *inner;
		__u32 olen;

		if ((void *)(outer + 1) > data_end || outer->ihl < 5)
			return 0;
		olen = outer->ihl * 4;
		if (outer->protocol == IPPROTO_IPIP_V4) {
			*counter = LB_DECAP_IPIP4;
			inner = (void *)outer + olen;
		} else if (outer->protocol == IPPROTO_UDP &&
			   !(outer->frag_off & bpf_htons(0x3fff))) { /* a fragment: the stack's */
			*counter = LB_DECAP_GUE4;
			inner = decap_gue_inner((void *)outer + olen, data_end);
			if (!inner)
				return 0;
			olen += sizeof(struct udphdr);
		} else {
			return 0;
		}
		if ((void *)(inner + 1) > data_end || inner->version != 4)
			return 0;
		inner_dst.family = LB_FAMILY_V4;
		inner_dst.addr[0] = inner->daddr;
		return decap_is_vip(&inner_dst) ? olen : 0;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *outer = (void *)(eth + 1);
		struct ipv6hdr *inner;
		__u32 olen = sizeof(*outer);

		if ((void *)(outer + 1) > data_end)
			return 0;
		if (outer->nexthdr == IPPROTO_IPIP_V6) {
			*counter = LB_DECAP_IPIP6;
			inner = (void *)(outer + 1);
		} else if (outer->nexthdr == IPPROTO_UDP) {
			*counter = LB_DECAP_GUE6;
			inner = decap_gue_inner(outer + 1, data_end);
			if (!inner)
				return 0;
			olen += sizeof(struct udphdr);
		} else {
			return 0;
		}
		if ((void *)(inner + 1) > data_end || inner->version != 6)
			return 0;
		inner_dst.family = LB_FAMILY_V6;
		__builtin_memcpy(inner_dst.addr, &inner->daddr, sizeof(inner_dst.addr));
		return decap_is_vip(&inner_dst) ? olen : 0;
	}
	return 0;
}

static __always_inline int decap(struct __sk_buff *skb)
{
	enum lb_decap_counter counter = LB_DECAP_MAX;
	int len;

	/* Only a packet with paged data needs pulling: the helper is a quarter of what
	 * decapsulation costs, and every packet shorter than DECAP_PULL_LEN (a bare ACK
	 * in IPIP is 74 bytes) would call it for nothing. */
	if (skb->data + DECAP_PULL_LEN > skb->data_end && skb->data_end - skb->data < skb->len)
		bpf_skb_pull_data(skb, DECAP_PULL_LEN); /* best effort: short packets stay short */
	len = decap_outer_len(skb, &counter);
	if (!len)
		return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, -len, BPF_ADJ_ROOM_MAC, 0)) {
		decap_count(LB_DECAP_ERROR);
		return TC_ACT_OK;
	}
	decap_count(counter);
	return TC_ACT_OK;
}

#endif
