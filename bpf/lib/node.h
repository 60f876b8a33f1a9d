/* node.h: this node's identity, written by the daemon into .rodata before load (it
 * never changes while the program runs; a new node address means a new program), and
 * its settings, which the reconciler writes after load. */
#ifndef LB_NODE_H
#define LB_NODE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

/* Outer source of IPv4 / IPv6 encapsulation: node.address / node.address6. */
volatile const __be32 node_addr4 = 0;
volatile const __be32 node_addr6[4] = {};

/* Copies node_addr6 word by word: a memcpy would cast the volatile away and let the
 * compiler fold the all-zero initializer into the program. */
static __always_inline void copy_node_addr6(__u32 *dst)
{
#pragma unroll
	for (int i = 0; i < 4; i++)
		dst[i] = node_addr6[i];
}

/* Jiffies per second of the running kernel (CONFIG_HZ), read by the daemon from the
 * kernel's config before load; 0 when it could not tell. */
volatile const __u32 kernel_hz = 0;

/* The program's clock for its timeouts (FIB cache, new-flow window), in the unit of
 * lb_ticks(). Jiffies when HZ is known: bpf_jiffies64() is inlined by the verifier into
 * one load, where bpf_ktime_get_coarse_ns() is a helper call that measured 25 ns of a
 * 220 ns established-flow packet. Both tick at the kernel's timer tick, so neither is
 * coarser. kernel_hz is in .rodata: the verifier drops the branch not taken. */
static __always_inline __u64 lb_now(void)
{
	if (kernel_hz)
		return bpf_jiffies64();
	return bpf_ktime_get_coarse_ns();
}

/* A duration in ns in the unit of lb_now() (rounded down, so timeouts never grow). */
static __always_inline __u64 lb_ticks(__u64 ns)
{
	if (kernel_hz)
		return ns * kernel_hz / 1000000000ULL;
	return ns;
}

/* Entropy prefixes and the new-flow bound (node.entropy_*, node.new_flow_rate). A global
 * in .bss: read in place on every packet, no map lookup; written by the reconciler
 * from Go through the mmapped map. Zero: no entropy, no bound. */
struct lb_settings node_settings = {};

#endif
