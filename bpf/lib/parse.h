/* parse.h: Ethernet (one optional 802.1Q tag), IPv4/IPv6 and TCP/UDP/ICMP parsing into
 * a struct lb_packet. Traffic that is not addressed to a VIP address is recognised after
 * the IP header and one array probe (vipaddr.h), and handed back untouched. */
#ifndef LB_PARSE_H
#define LB_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "vipaddr.h"

#define ETH_P_8021Q_BE bpf_htons(0x8100)
#define IP_MF_OFFSET_BE bpf_htons(0x3fff) /* more-fragments flag | fragment offset */
#define IP_DF_BE bpf_htons(0x4000)

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

/* IPv6 extension headers that may stand between the fixed header and TCP/UDP. */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* What the program knows about a VIP packet once it is parsed. */
struct lb_packet {
	struct lb_flow_key flow; /* also the flow-table key and the hash input */
	__u16 l2_len;            /* 14, or 18 with a VLAN tag */
	__u16 l3_len;            /* whole IP packet: IPv4 total length, or 40 + IPv6 payload */
	__be16 vlan_tci;
	__u8 has_vlan;
	__u8 family;             /* LB_FAMILY_V4 / LB_FAMILY_V6 */
	__u8 tcp_flags;
	__u8 tos;                /* IPv4 TOS or IPv6 traffic class, copied to the outer header */
	__u8 df;                 /* IPv4 don't-fragment, copied to the outer header (RFC 2003) */
	__u8 icmp;               /* an ICMP message (flow then is the flow it quotes) */
	__u16 l4_off;            /* offset of the TCP/UDP/ICMP header from the frame start */
	__u16 pad;
};

enum {
	LB_PARSE_PASS = 0, /* not VIP traffic: hand to the kernel untouched */
	LB_PARSE_VIP = 1,  /* a well-formed TCP/UDP packet to a VIP address */
	LB_PARSE_ICMP = 2, /* an ICMP / ICMPv6 message to a VIP address (icmp.h) */
	LB_PARSE_OTHER = 3, /* an IP packet for another address: family set, nothing else */
};

/* The flow key as the five 64-bit words the flow table hashes and compares. Parsing
 * writes it a word at a time: a word loaded soon after narrower stores into it (an
 * address, two ports, a protocol byte) cannot be forwarded from the store buffer, and
 * the CPU waits for the stores to retire, which the flow table's first compare did on
 * every packet. */
static __always_inline __u64 *flow_key_words(struct lb_flow_key *k)
{
	return (__u64 *)k;
}

/* Parse TCP/UDP ports (and TCP flags) of a packet whose IP part ends at l3_end. */
static __always_inline int parse_l4(void *l4, void *l3_end, void *data_end, __u8 proto,
				    struct lb_packet *pkt)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end || (void *)(tcp + 1) > l3_end)
			return -LB_DROP_TRUNCATED;
		if (tcp->doff < 5)
			return -LB_DROP_MALFORMED;
		if (l4 + tcp->doff * 4 > l3_end)
			return -LB_DROP_TRUNCATED;
		pkt->tcp_flags = ((__u8 *)tcp)[13];
	} else {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > data_end || (void *)(udp + 1) > l3_end)
			return -LB_DROP_TRUNCATED;
		if (bpf_ntohs(udp->len) < sizeof(*udp))
			return -LB_DROP_MALFORMED;
	}
	/* ports and protocol, the key's last word, in one store (see flow_key_words) */
	flow_key_words(&pkt->flow)[4] = *(__u32 *)l4 | (__u64)proto << 32;
	return LB_PARSE_VIP;
}

/* The fields every VIP packet sets, whatever its protocol. */
static __always_inline void parse_l3_done(struct lb_packet *pkt, void *data, void *l4,
					  __u8 family, __u16 l3_len, __u8 proto)
{
	pkt->family = family;
	pkt->l3_len = l3_len;
	pkt->l4_off = l4 - data;
	pkt->flow.proto = proto;
}

static __always_inline int parse_ipv4(void *data, void *data_end, __u64 off,
				      struct lb_packet *pkt)
{
	struct iphdr *iph = data + off;
	__u32 hlen, tot;
	void *l3_end;

	if ((void *)(iph + 1) > data_end)
		return LB_PARSE_PASS; /* too short to be anyone's: the kernel will discard it */
	if (!is_vip4(iph->daddr)) {
		pkt->family = LB_FAMILY_V4;
		return LB_PARSE_OTHER;
	}

	if (iph->version != 4 || iph->ihl < 5)
		return -LB_DROP_MALFORMED;
	hlen = iph->ihl * 4;
	tot = bpf_ntohs(iph->tot_len);
	if (tot < hlen)
		return -LB_DROP_MALFORMED;
	l3_end = (void *)iph + tot;
	if (l3_end > data_end)
		return -LB_DROP_TRUNCATED;
	if (iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_UDP &&
	    iph->protocol != IPPROTO_ICMP)
		return LB_PARSE_PASS; /* other protocols to a VIP address are the kernel's */
	/* A fragment carries no ports (or not all of the datagram): it cannot be sent to
	 * the backend of its flow, and a fragment sent to any other would be lost there. */
	if (iph->frag_off & IP_MF_OFFSET_BE)
		return -LB_DROP_FRAGMENT;

	pkt->tos = iph->tos;
	pkt->df = !!(iph->frag_off & IP_DF_BE);
	flow_key_words(&pkt->flow)[0] = iph->saddr; /* and src[1] = 0 */
	flow_key_words(&pkt->flow)[2] = iph->daddr; /* and dst[1] = 0 */
	parse_l3_done(pkt, data, (void *)iph + hlen, LB_FAMILY_V4, tot, iph->protocol);
	if (iph->protocol == IPPROTO_ICMP)
		return LB_PARSE_ICMP;
	return parse_l4((void *)iph + hlen, l3_end, data_end, iph->protocol, pkt);
}

static __always_inline int parse_ipv6(void *data, void *data_end, __u64 off,
				      struct lb_packet *pkt)
{
	struct ipv6hdr *ip6 = data + off;
	void *l3_end;
	__u8 nexthdr;

	if ((void *)(ip6 + 1) > data_end)
		return LB_PARSE_PASS;
	if (!is_vip6(&ip6->daddr)) {
		pkt->family = LB_FAMILY_V6;
		return LB_PARSE_OTHER;
	}

	if (ip6->version != 6)
		return -LB_DROP_MALFORMED;
	l3_end = (void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len);
	if (l3_end > data_end)
		return -LB_DROP_TRUNCATED;
	nexthdr = ip6->nexthdr;
	switch (nexthdr) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_ICMPV6:
		break;
	case NEXTHDR_FRAGMENT:
		return -LB_DROP_FRAGMENT;
	case NEXTHDR_HOP:
	case NEXTHDR_ROUTING:
	case NEXTHDR_AUTH:
	case NEXTHDR_DEST:
		return -LB_DROP_IPV6_EXT;
	default:
		return LB_PARSE_PASS;
	}

	/* traffic class straddles the first two bytes: low nibble of byte 0, high of byte 1 */
	pkt->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	{
		const __u64 *a = (const void *)&ip6->saddr; /* saddr, then daddr */
		__u64 *key = flow_key_words(&pkt->flow);

		key[0] = a[0];
		key[1] = a[1];
		key[2] = a[2];
		key[3] = a[3];
	}
	parse_l3_done(pkt, data, ip6 + 1, LB_FAMILY_V6, sizeof(*ip6) + bpf_ntohs(ip6->payload_len),
		      nexthdr);
	if (nexthdr == IPPROTO_ICMPV6)
		return LB_PARSE_ICMP;
	return parse_l4(ip6 + 1, l3_end, data_end, nexthdr, pkt);
}

static __always_inline int parse_packet(struct xdp_md *ctx, struct lb_packet *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u64 off = sizeof(*eth);
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return LB_PARSE_PASS;
	proto = eth->h_proto;
	if (proto == ETH_P_8021Q_BE) {
		struct vlan_hdr *vh = data + off;

		if ((void *)(vh + 1) > data_end)
			return LB_PARSE_PASS;
		pkt->has_vlan = 1;
		pkt->vlan_tci = vh->tci;
		proto = vh->encap_proto;
		off += sizeof(*vh);
	}
	pkt->l2_len = off;

	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(data, data_end, off, pkt);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(data, data_end, off, pkt);
	return LB_PARSE_PASS;
}

#endif
