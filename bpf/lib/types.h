/* types.h: structs and enums shared with Go (mirrored by bpf2go -type, never by hand).
 * No bitfields, explicit padding, __be for fields kept in network order. */
#ifndef LB_TYPES_H
#define LB_TYPES_H

#include <linux/types.h>
#include "consts.h"

/* Address families as stored in keys: the IP version number, so a zero family marks an
 * unused or unset slot. Packed: one byte, as the structs hold it. */
enum __attribute__((packed)) lb_family {
	LB_FAMILY_V4 = 4,
	LB_FAMILY_V6 = 6,
};

/* IP protocol numbers of the encapsulations, written by lb.c and stripped by decap.c. */
#define IPPROTO_IPIP_V4 4  /* IPv4 in IP */
#define IPPROTO_IPIP_V6 41 /* IPv6 in IP */

/* Outer header sizes. GUE variant 1 is a bare UDP header in front of the inner packet. */
#define IPV4_HDR_LEN 20
#define IPV6_HDR_LEN 40
#define UDP_HDR_LEN 8

/* An IPv4 or IPv6 address; IPv4 lives in addr[0] with addr[1..3] zero. */
struct lb_addr {
	__be32 addr[4];
	enum lb_family family;
	__u8 pad[3];
};

/* lb_vips key: a service is (VIP, port, protocol); port 0 matches every port. */
struct lb_vip_key {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	enum lb_family family;
};

/* lb4_vip_slots / lb6_vip_slots value: the first probe of the VIP address filter
 * (vipaddr.h). `addr` is meaningful only when count > 0. */
struct lb4_vip_slot {
	__be32 addr;  /* a VIP address whose slot this is */
	__u32 count;  /* VIP addresses hashing to this slot; above 1 the others are in lb4_vip_addrs */
};

struct lb6_vip_slot {
	__be32 addr[4];
	__u32 count;
};

/* Service flags. */
enum lb_vip_flags {
	LB_VIP_F_SOURCE_HASH = 1 << 0, /* maglev-source: hash the client address only */
};

struct lb_vip {
	__u32 service_id;  /* the id its backends and flows carry */
	__u32 table_size;  /* entries of this service's Maglev ring */
	enum lb_vip_flags flags; /* an OR of LB_VIP_F_* */
	__u32 ring_block;  /* index into lb_maglev of the block holding the ring; 0: none */
	__u32 ring_offset; /* the ring's first slot in that block */
};

/* Backend states. Draining keeps established flows but is absent from the Maglev ring;
 * down also loses its flows, which are re-hashed on their next packet. */
enum lb_backend_state {
	LB_BACKEND_UNUSED = 0,
	LB_BACKEND_UP = 1,
	LB_BACKEND_DRAINING = 2,
	LB_BACKEND_DOWN = 3,
};

/* How packets reach a backend: its service's `forwarding`. Kept with the backend, not
 * the service, because an established flow reaches its backend without looking at the
 * service at all. */
enum __attribute__((packed)) lb_encap {
	LB_ENCAP_IPIP = 0, /* IPv4-in-IPv4 / IPv6-in-IPv6 */
	LB_ENCAP_GUE = 1,  /* GUE variant 1: outer IP + UDP, then the client's IP packet */
	LB_ENCAP_NAT = 2,  /* full NAT: node address and port → backend address and port (nat.h) */
	LB_ENCAP_LOCAL = 3, /* the node's own stack: the service's tunnelled origins, reached
			     * by the node's tunnel edge, which listens on the VIP (XDP_PASS) */
};

/* lb_backends value: one (service, backend) pair, indexed by backend id. */
struct lb_backend {
	__be32 addr[4];
	__u32 service_id; /* a flow entry is honoured only for its own service */
	enum lb_backend_state state;
	enum lb_family family;
	enum lb_encap encap;
	__be16 gue_port;  /* UDP destination port when encap is GUE */
	__be16 nat_port;  /* destination port when encap is NAT; 0: the client's */
	__u8 pad[2];
};

/* lb_flows key: the 5-tuple as seen on the wire. */
struct lb_flow_key {
	__be32 src[4];
	__be32 dst[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct lb_flow {
	__u32 backend_id;
	__u32 service_id; /* the backend slot must still belong to it (ids get reused) */
	__u32 hash;       /* the flow's hash, kept so an established flow never recomputes it */
};

/* One way of a flow-table bucket: a flow's key and choice in one cache line. */
struct lb_flow_entry {
	struct lb_flow_key key;
	struct lb_flow flow;
	__u32 used;  /* flow_clock() when stored or last refreshed, never 0; 0: an empty way */
	__u32 check; /* flow_check() of the key's hash and the choice: a way that two CPUs
		      * wrote at once, its words mixed, fails it and is a miss */
	__u32 pad;   /* to the cache line (64 bytes): a way never straddles two */
};

/* lb_flows value: a bucket of the flow table (flowtable.h). */
struct lb_flow_bucket {
	struct lb_flow_entry way[LB_FLOW_WAYS];
};

/* A SYN's backend, kept in lb_syns until its handshake's ACK opens the flow entry. */
struct lb_syn {
	struct lb_flow_key flow;
	struct lb_flow choice;
	__u64 at; /* lb_now() when the SYN passed */
};

/* lb_nats key: a NAT flow as its backend's replies carry it, the node's address of the
 * family implied (node_addr4 / node_addr6). */
struct lb_nat_key {
	__be32 backend[4];
	__be16 backend_port;
	__be16 node_port;  /* the source port the node gave the flow */
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

/* TCP states of a NAT flow, each with its own timeout (consts.h); UDP has one. */
enum __attribute__((packed)) lb_nat_state {
	LB_NAT_UDP = 0,
	LB_NAT_TCP_OPENING,     /* SYN seen, the handshake not yet complete */
	LB_NAT_TCP_ESTABLISHED, /* a packet without SYN, FIN or RST after the backend answered */
	LB_NAT_TCP_CLOSING,     /* a FIN either way */
	LB_NAT_TCP_CLOSED,      /* a RST either way */
};

/* lb_nats value: what a reply is translated back to, and the flow's state. */
struct lb_nat {
	__be32 client[4];
	__be32 vip[4];
	__be16 client_port;
	__be16 vip_port;
	__u32 backend_id;     /* the backend slot the forward direction chose */
	__u64 expires;        /* lb_now() from which on the entry is dead and its port free */
	enum lb_nat_state state;
	__u8 replied;         /* the backend has answered */
	__u8 pad[6];
};

/* lb_nat_flows value: the node port a client flow (lb_flow_key) was given. */
struct lb_nat_flow {
	__u32 backend_id;
	__be16 node_port;
	__u8 pad[2];
};

/* Where the last FIB lookup sent a backend's packets (lb_backend_cpu). */
struct lb_nexthop {
	__u64 expires;     /* lb_now() from which on to ask the FIB again */
	__u32 ifindex;     /* egress device */
	__u16 max_len;     /* largest outer IP length the FIB accepted (MTU check) */
	__u8 dmac[6];
	__u8 smac[6];
	__u8 pad[2];
};

/* Packet and byte counters of a backend, on one CPU. A service's are the sum of its
 * backends', taken in user space (internal/datapath/counters.go). */
struct lb_counters {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows; /* flows this node picked a backend for from the ring: its load in flows/s */
};

/* lb_backend_cpu value: all that a packet to a backend reads and writes of this CPU's
 * own, side by side (56 bytes): the next hop its packets took and its counters. */
struct lb_backend_cpu_state {
	struct lb_nexthop nh;
	struct lb_counters stats;
};

/* Why a packet for a VIP was dropped. Index into lb_drops; names exported to metrics. */
enum lb_drop_reason {
	LB_DROP_NONE = 0,
	LB_DROP_TRUNCATED,    /* a header is cut short or IP length exceeds the frame */
	LB_DROP_MALFORMED,    /* a header field is impossible (IHL < 5, TCP offset < 5, ...) */
	LB_DROP_FRAGMENT,     /* IPv4 fragment or IPv6 fragment header */
	LB_DROP_IPV6_EXT,     /* IPv6 extension header in front of TCP/UDP */
	LB_DROP_NO_BACKEND,   /* the service has no live backend */
	LB_DROP_NO_ROUTE,     /* FIB has no usable route to the backend */
	LB_DROP_NO_NEIGH,     /* next hop's link-layer address unknown */
	LB_DROP_TOO_BIG,      /* encapsulated packet exceeds the egress MTU */
	LB_DROP_NO_TX_PORT,   /* egress device is not one manifold may redirect to */
	LB_DROP_ENCAP,        /* the kernel refused to grow the packet */
	LB_DROP_NAT_PORTS,    /* NAT: no free source port towards the backend */
	LB_DROP_MAX,
};

/* What the program did besides forwarding and dropping (index into lb_events): each
 * is worth watching, none is a drop. */
enum lb_event {
	LB_EV_FLOW_NOT_INSERTED = 0, /* new flow above node.new_flow_rate: forwarded, not remembered */
	LB_EV_ICMP_ECHO_REPLY,       /* echo request to a VIP answered */
	LB_EV_ICMP_TO_BACKEND,       /* frag-needed / packet-too-big sent to its flow's backend */
	LB_EV_ICMP_TOO_BIG_SENT,     /* client told its packet does not fit after encapsulation */
	LB_EV_TRANSIT_FORWARDED,     /* a packet for neither a VIP nor the node routed in XDP */
	LB_EV_NAT_REPLY,             /* a backend's reply to a NAT flow translated back to its client */
	LB_EV_NAT_ICMP_TO_CLIENT,    /* an ICMP error about a NAT flow's packet, translated to its client */
	LB_EV_MAX,
};

/* Per-CPU state of the new-flow bound (lb_new_flows). */
struct lb_flow_rate {
	__u64 window;    /* lb_now() at the start of the current one-second window */
	__u64 inserted;  /* flows inserted in it */
};

/* Node settings the daemon may write while the program runs (a .bss global, node.h). */
struct lb_settings {
	__be32 entropy4;    /* /16 network of IPIP/GUE outer sources, 0: node_addr4 */
	__be32 entropy6[2]; /* /64 network of IPv6 outer sources, 0: node_addr6 */
	__u32 new_flows_per_cpu; /* flow-table inserts per second and CPU, 0: unbounded */
	__u32 forward_transit;   /* 1: route transit packets in XDP (transit.h) */
};

/* Backend-side decapsulation counters (index into lb_decap_stats). */
enum lb_decap_counter {
	LB_DECAP_IPIP4 = 0,  /* IPv4-in-IPv4 stripped */
	LB_DECAP_IPIP6,      /* IPv6-in-IPv6 stripped */
	LB_DECAP_GUE4,       /* GUE in IPv4 stripped */
	LB_DECAP_GUE6,       /* GUE in IPv6 stripped */
	LB_DECAP_NOT_VIP,    /* encapsulated, but the inner destination is not ours: passed */
	LB_DECAP_ERROR,      /* the kernel refused to shrink the packet: passed untouched */
	LB_DECAP_MAX,
};

#endif
