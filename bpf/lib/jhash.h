/* jhash.h: Bob Jenkins' lookup3 hash over 32-bit words, the flow hash. The datapath
 * tests carry a Go copy (internal/datapath/flowhash_test.go) that must stay bit-identical:
 * with it they predict the backend the program picks. */
#ifndef LB_JHASH_H
#define LB_JHASH_H

#include <linux/types.h>

static __always_inline __u32 rol32(__u32 word, unsigned int shift)
{
	return (word << shift) | (word >> ((-shift) & 31));
}

#define __jhash_mix(a, b, c)                 \
	{                                    \
		a -= c; a ^= rol32(c, 4);  c += b; \
		b -= a; b ^= rol32(a, 6);  a += c; \
		c -= b; c ^= rol32(b, 8);  b += a; \
		a -= c; a ^= rol32(c, 16); c += b; \
		b -= a; b ^= rol32(a, 19); a += c; \
		c -= b; c ^= rol32(b, 4);  b += a; \
	}

#define __jhash_final(a, b, c)          \
	{                               \
		c ^= b; c -= rol32(b, 14); \
		a ^= c; a -= rol32(c, 11); \
		b ^= a; b -= rol32(a, 25); \
		c ^= b; c -= rol32(b, 16); \
		a ^= c; a -= rol32(c, 4);  \
		b ^= a; b -= rol32(a, 14); \
		c ^= b; c -= rol32(b, 24); \
	}

#define JHASH_INITVAL 0xdeadbeef

/* jhash2 over `n` words; n is a compile-time constant so the loop unrolls. Same
 * result as the kernel's jhash2(). */
static __always_inline __u32 jhash2(const __u32 *k, const int n, __u32 initval)
{
	__u32 a, b, c;
	int i = 0;

	a = b = c = JHASH_INITVAL + ((__u32)n << 2) + initval;
#pragma unroll
	for (; i + 3 < n; i += 3) {
		a += k[i];
		b += k[i + 1];
		c += k[i + 2];
		__jhash_mix(a, b, c);
	}
	switch (n - i) {
	case 3: c += k[i + 2]; /* fallthrough */
	case 2: b += k[i + 1]; /* fallthrough */
	case 1: a += k[i];
		__jhash_final(a, b, c);
		break;
	}
	return c;
}

#endif
