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

#endif
