/* consts.h: tunables of the data plane, one place, each with its unit and reason. */
#ifndef LB_CONSTS_H
#define LB_CONSTS_H

/* Number of distinct VIP addresses (several services may share one address). */
#ifndef LB_MAX_VIP_ADDRS
#define LB_MAX_VIP_ADDRS 16384
#endif

/* Default number of flow-table entries; the daemon sizes the table before load from
 * node.flow_table_size (LB_FLOW_WAYS entries a bucket). */
#ifndef LB_FLOW_TABLE_SIZE
#define LB_FLOW_TABLE_SIZE 262144
#endif

/* Entries of a flow-table bucket (flowtable.h): a flow may sit in any of its bucket's
 * ways, and a new flow evicts the least recently used of them. Four ways of one cache
 * line each: a hit reads one to four lines, an insert into a table filled to 90 % still
 * finds a free way in nearly every bucket. A power of two. */
#define LB_FLOW_WAYS 4

/* How often an established flow's entry records that it is in use, in ns. The store
 * would dirty the entry's cache line on every packet (and bounce it between the CPUs a
 * flow's packets arrive on); once a second keeps the least-recent choice of eviction
 * honest to a second. */
#define LB_FLOW_REFRESH_NS 1000000000ULL

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

/* Outer IPv4/IPv6 TTL / hop limit of encapsulated packets (the contract says 64), and
 * of the ICMP messages the node sends itself. */
#define LB_OUTER_TTL 64

/* GUE outer UDP source ports come from the flow hash, in the dynamic range 49152-65535
 * (RFC 8086 3.2.1 asks the same of GRE-in-UDP): 14 bits of entropy for ECMP and RSS
 * downstream, and never a well-known port. */
#define LB_GUE_SPORT_BASE 49152
#define LB_GUE_SPORT_SHIFT 18 /* the hash's top 14 bits; its low bits are the flow label */

/* How much of the client's packet an ICMP "fragmentation needed" / "packet too big" of
 * the node quotes, in bytes of IP packet. A constant, so the checksum is one helper call
 * over a length the verifier knows; more than the 28 bytes RFC 792 asks, so the
 * client can match it with any IP options or TCP header. A too-big packet always
 * exceeds it (its MTU is at least 576 / 1280). */
#define LB_ICMP4_QUOTE 128
#define LB_ICMP6_QUOTE 256

/* NAT source ports: the node gives each flow to a backend a port of 1024..32767, below
 * Linux's ephemeral range (32768-60999), so that the node's own connections to the
 * backend (health checks) never share one with a NAT flow. A flow's first candidate
 * comes from its hash; LB_NAT_PROBES candidates are tried before the packet is dropped
 * (nat_ports), the step odd so that probes never repeat within the range. */
#ifndef LB_NAT_TABLE_SIZE
#define LB_NAT_TABLE_SIZE 262144 /* entries of lb_nat and of lb_nat_flows */
#endif
#define LB_NAT_PORT_MIN 1024
#define LB_NAT_PORT_COUNT 31744
#define LB_NAT_PROBES 8
#define LB_NAT_PROBE_STEP 7919

/* NAT entry lifetimes, in seconds since the flow's last packet, by state: IPVS's
 * defaults (ipvsadm --timeout: tcp 900, tcpfin 120, udp 300), a SYN that is not
 * answered lives as long as IPVS's SYN_RECV, and a reset flow a few seconds for the
 * packets still in flight. An entry is refreshed at most once a second. */
#define LB_NAT_TIMEOUT_OPENING 60
#define LB_NAT_TIMEOUT_ESTABLISHED 900
#define LB_NAT_TIMEOUT_CLOSING 120
#define LB_NAT_TIMEOUT_CLOSED 10
#define LB_NAT_TIMEOUT_UDP 300

/* Length of the window in which node.new_flow_rate is counted, in ns. */
#define LB_FLOW_RATE_WINDOW_NS 1000000000ULL

/* Slots of the SYN memory (lb_syns), a power of two, 64 bytes each (1 MiB): ten times
 * the handshakes a node has in flight at node.new_flow_rate's default and a 100 ms
 * round trip. How long a SYN's backend is kept for its ACK, in ns: a round trip and a
 * retransmitted SYN-ACK. */
#define LB_SYN_SLOTS 16384
#define LB_SYN_MEMORY_NS 5000000000ULL

/* The numbers the daemon needs as well as the program. An enum, not macros, so that
 * bpf2go exports it to Go (-type lb_shared): internal/datapath takes these from the
 * generated code and never copies one by hand. */
enum lb_shared {
	/* Services (VIP:port/proto) a node can hold. Bounds lb_vips and lb_maglev; 16k
	 * leaves room for the "10 000 services" programming benchmark. */
	LB_MAX_SERVICES = 16384,
	/* (service, backend) slots. Slot 0 is reserved to mean "no backend", so a zeroed
	 * flow entry can never point at a live backend. */
	LB_MAX_BACKENDS = 65536,
	/* Slots of each VIP address filter array (vipaddr.h), a power of two: the slot is
	 * a 16-bit fold of the address. Four times LB_MAX_VIP_ADDRS, so that few addresses
	 * share a slot; 512 KiB (IPv4) and 1.25 MiB (IPv6). */
	LB_VIP_SLOTS = 65536,
	/* Seed of the flow hash. Every node must use the same one so that a flow hashes to
	 * the same Maglev slot everywhere; the Go side (FlowHash) predicts slots with it. */
	LB_HASH_SEED = 0x6d616e69, /* "mani" */
	/* Prefix length of node.entropy_prefix4: the flow hash picks the other bits. (The
	 * IPv6 one is a /64, the two words of lb_settings.entropy6.) */
	LB_ENTROPY4_BITS = 16,
};

/* BTF holds only the types something in the object uses, and bpf2go exports only
 * types in BTF: this global puts enum lb_shared there. Nothing reads it; hidden, so that
 * bpf2go makes no Go variable of it. */
__attribute__((visibility("hidden"))) enum lb_shared lb_shared_btf;

#endif
