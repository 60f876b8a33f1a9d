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

/* Writes a 20-byte IPv4 header (no options, id 0) in three stores, its checksum summed
 * from the values in registers. A header written field by field (byte, 16- and 32-bit
 * stores) and then read back for its checksum is loaded in words no single store
 * covers, which the CPU cannot forward from its store buffer: it waits for the stores to
 * retire, and did on every encapsulated packet. Values are as the program holds them
 * (network-order fields loaded on a little-endian host), so each 16-bit word of the sum
 * is the one the header's bytes make. */
static __always_inline void ipv4_header_write(void *hdr, __u8 tos, __be16 tot_len, __be16 frag_off,
					      __u8 ttl, __u8 proto, __be32 saddr, __be32 daddr)
{
	__u32 w0 = 0x45 | (__u32)tos << 8, w4 = ttl | (__u32)proto << 8;
	__u32 sum = w0 + tot_len + frag_off + w4 + (saddr & 0xffff) + (saddr >> 16) + (daddr & 0xffff) +
		    (daddr >> 16);
	__u64 *w = hdr;

	w[0] = w0 | (__u64)tot_len << 16 | (__u64)frag_off << 48; /* id 0 in bits 32-47 */
	w[1] = w4 | (__u64)csum_fold(sum) << 16 | (__u64)saddr << 32;
	((__u32 *)hdr)[4] = daddr;
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

/* Adds to sum what changes in checksummed data when the 32-bit word `from` becomes `to`
 * (RFC 1624 eqn. 3, both 16-bit halves): words are taken as stored, in any byte order. */
static __always_inline __u32 csum_diff32(__u32 sum, __u32 from, __u32 to)
{
	return sum + (~from & 0xffff) + (~from >> 16) + (to & 0xffff) + (to >> 16);
}

/* The checksum `check` after the changes whose csum_diff32 sums are `diff`. */
static __always_inline __u16 csum_apply(__u16 check, __u32 diff)
{
	return csum_fold((__u16)~check + diff);
}

#endif
