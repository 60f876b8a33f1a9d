/* maps.h: the load balancer's maps, one purpose each. Written only by the daemon's
 * reconciler (internal/reconcile, through internal/datapath), except lb_flows and the
 * counters, which the program writes. */
#ifndef LB_MAPS_H
#define LB_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include <linux/in6.h>

/* VIP addresses with at least one service: what tells VIP traffic from everything
 * else, which passes untouched. Asked only for the addresses that share a slot of
 * lb4/lb6_vip_slots (vipaddr.h). IPv4 has its own map with a 4-byte key. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_VIP_ADDRS);
	__type(key, __be32);
	__type(value, __u32); /* number of services on this address */
} lb4_vip_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_VIP_ADDRS);
	__type(key, struct in6_addr);
	__type(value, __u32);
} lb6_vip_addrs SEC(".maps");

/* The VIP address filter's first probe: slot vip4_slot(addr) holds the VIP address that
 * hashes there. An array, because the verifier inlines an array lookup into a few
 * instructions, where a hash lookup is a helper call that hashes and compares the key
 * (20 ns of an established flow's packet, and most of what a non-VIP packet costs). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_VIP_SLOTS);
	__type(key, __u32);
	__type(value, struct lb4_vip_slot);
} lb4_vip_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_VIP_SLOTS);
	__type(key, __u32);
	__type(value, struct lb6_vip_slot);
} lb6_vip_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_SERVICES);
	__type(key, struct lb_vip_key);
	__type(value, struct lb_vip);
} lb_vips SEC(".maps");

/* The Maglev rings, packed into blocks: a ring is table_size slots at ring_offset of
 * block ring_block (struct lb_vip). A new ring is written into free slots aside and
 * swapped in with the service's one lb_vips update, so readers never see half a table;
 * one block holds many rings, so 100 000 services cost a few hundred maps, not one
 * map (and a page of header) each. */
struct lb_maglev_ring {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	/* blocks differ in size (a ring larger than a block gets a block of its own);
	 * mmapable so that the daemon writes rings with plain stores (internal/datapath
	 * ringspace.go) */
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); /* backend id */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, LB_MAX_SERVICES);
	__type(key, __u32); /* ring block, 1.. */
	__array(values, struct lb_maglev_ring);
} lb_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_MAX_BACKENDS);
	__type(key, __u32); /* backend id */
	__type(value, struct lb_backend);
} lb_backends SEC(".maps");

/* Connection table: buckets of LB_FLOW_WAYS entries in an array, probed and filled by
 * the program's own inlined code (flowtable.h), where a hash map's lookup is a chain of
 * kernel calls. Mappable, so that the daemon reads it with plain loads. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, LB_FLOW_TABLE_SIZE / LB_FLOW_WAYS);
	__type(key, __u32);
	__type(value, struct lb_flow_bucket);
} lb_flows SEC(".maps");

/* NAT flows by their backend-side 4-tuple: replies are translated with it, and a
 * source port is taken by inserting here (BPF_NOEXIST: two CPUs never get the same
 * one). LRU: a full table evicts the least recent flows rather than refusing new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LB_NAT_TABLE_SIZE);
	__type(key, struct lb_nat_key);
	__type(value, struct lb_nat);
} lb_nats SEC(".maps");

/* NAT flows by their client-side 5-tuple: the port each was given. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, LB_NAT_TABLE_SIZE);
	__type(key, struct lb_flow_key);
	__type(value, struct lb_nat_flow);
} lb_nat_flows SEC(".maps");

/* Devices the program may redirect to, keyed by ifindex (XDP_TX covers the ingress). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, LB_MAX_TX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} lb_tx_ports SEC(".maps");

/* Per CPU and backend id: the cached FIB answer (see LB_FIB_CACHE_NS) and the
 * counters, one lookup for both. There are no per-service counters in the data plane: a
 * packet would pay a second lookup and three more adds for what user space sums from
 * the service's backends. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_MAX_BACKENDS);
	__type(key, __u32); /* backend id */
	__type(value, struct lb_backend_cpu_state);
} lb_backend_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_DROP_MAX);
	__type(key, enum lb_drop_reason);
	__type(value, __u64);
} lb_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_EV_MAX);
	__type(key, enum lb_event);
	__type(value, __u64);
} lb_events SEC(".maps");

/* The SYN memory (flow.h): a direct-mapped array, written by a plain store where the
 * flow table's insert would evict. A collision overwrites a slot: that handshake's ACK
 * then follows the ring, as it would have anyway unless the ring changed. Shared by the
 * CPUs, because a SYN and its ACK need not come in on the same one (they do behind a
 * NIC's RSS, not on a veth). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_SYN_SLOTS);
	__type(key, __u32);
	__type(value, struct lb_syn);
} lb_syns SEC(".maps");

/* Flow-table inserts of the current second, per CPU (node.new_flow_rate). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_flow_rate);
} lb_new_flows SEC(".maps");

#endif
