/* csum.h: Internet checksum of headers the program writes itself. */
#ifndef LB_CSUM_H
#define LB_CSUM_H

#include <linux/types.h>

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Checksum of a 20-byte IPv4 header whose check field is zero. Unrolled because the
 * header was just written by us: no option bytes, no bounds to prove. */
static __always_inline __u16 ipv4_header_csum(const void *hdr)
{
	const __u16 *w = hdr;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	return csum_fold(sum);
}

/* Folds a 64-bit sum of 16-bit words (or of bpf_csum_diff results) into a checksum. */
static __always_inline __u16 csum_fold64(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return csum_fold((__u32)sum);
}

/* Checksum after one 16-bit word of the covered data changed from old to new (RFC 1624
 * eqn. 3): no need to read the rest. */
static __always_inline __u16 csum_replace2(__u16 check, __u16 old, __u16 new)
{
	return csum_fold((__u16)~check + (__u16)~old + (__u32) new);
}

#endif
