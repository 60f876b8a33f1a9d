/* node.h: this node's identity, written by the daemon into .rodata before load (it
 * never changes while the program runs; a new node address means a new program), and
 * its settings, which the reconciler writes after load. */
#ifndef LB_NODE_H
#define LB_NODE_H

#include <linux/types.h>
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

/* Entropy prefixes and the new-flow bound (node.entropy_*, node.new_flow_rate). A global
 * in .bss: read in place on every packet, no map lookup; written by the reconciler
 * from Go through the mmapped map. Zero: no entropy, no bound. */
struct lb_settings node_settings = {};

#endif
