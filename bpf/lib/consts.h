/* consts.h: tunables of the data plane, one place, each with its unit and reason. */
#ifndef LB_CONSTS_H
#define LB_CONSTS_H

/* Number of services (VIP:port/proto) a node can hold. Bounds lb_vips and lb_maglev;
 * 16k leaves room for the "10 000 services" programming benchmark. */
#ifndef LB_MAX_SERVICES
#define LB_MAX_SERVICES 16384
#endif

/* Number of distinct VIP addresses (several services may share one address). */
#ifndef LB_MAX_VIP_ADDRS
#define LB_MAX_VIP_ADDRS 16384
#endif

/* Number of (service, backend) slots. Slot 0 is reserved to mean "no backend", so a
 * zeroed flow entry can never point at a live backend. */
#ifndef LB_MAX_BACKENDS
#define LB_MAX_BACKENDS 65536
#endif

/* Default number of flow-table entries; the daemon overrides max_entries before load
 * from node.flow_table_size. */
#ifndef LB_FLOW_TABLE_SIZE
#define LB_FLOW_TABLE_SIZE 262144
#endif

/* Egress ports the program may redirect to (devmap keyed by ifindex). */
#ifndef LB_MAX_TX_PORTS
#define LB_MAX_TX_PORTS 64
#endif

/* How long a FIB answer for a backend is reused, in ns. bpf_fib_lookup is the most
 * expensive step of the packet path; re-asking every 100 ms keeps route and neighbour
 * changes effective within that time at a fraction of the cost. */
#ifndef LB_FIB_CACHE_NS
#define LB_FIB_CACHE_NS 100000000ULL
#endif

/* Outer IPv4/IPv6 TTL / hop limit of encapsulated packets (the contract says 64). */
#define LB_OUTER_TTL 64

/* Seed of the flow hash. Every node must use the same one so that a flow hashes to the
 * same Maglev slot everywhere; the Go mirror (internal/datapath/hash.go) uses it too. */
#define LB_HASH_SEED 0x6d616e69 /* "mani" */

#endif
