package datapath

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The program's flow hash in Go, bit for bit: with it the tests know which backend the
// program must pick for a flow, and can pin flows as the program would.

const hashSeed = uint32(lbLbSharedLB_HASH_SEED)

// Flow is a 5-tuple as the data plane sees it.
type Flow struct {
	Src, Dst     netip.Addr
	SPort, DPort uint16
	Proto        uint8
}

func (f Flow) key() lbLbFlowKey {
	return lbLbFlowKey{
		Src:   addrWords(f.Src),
		Dst:   addrWords(f.Dst),
		Sport: be16(f.SPort),
		Dport: be16(f.DPort),
		Proto: f.Proto,
	}
}

// FlowHash is the data plane's flow hash (bpf/lib/maglev.h flow_hash): the Maglev slot
// of a flow is FlowHash % table_size. sourceOnly is the maglev-source scheduler. Like
// the program, it hashes the key's memory as host-order words.
func FlowHash(f Flow, sourceOnly bool) uint32 {
	k := f.key()
	var mem [40]byte
	if _, err := binary.Encode(mem[:], binary.NativeEndian, k); err != nil {
		panic(err) // a fixed-size struct into a buffer of its size cannot fail
	}
	var w [10]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(mem[4*i:])
	}
	if sourceOnly {
		return jhash2(w[:4], hashSeed)
	}
	return jhash2(w[:], hashSeed)
}

// jhash2 is the kernel's jhash2 (lookup3), bit for bit.
func jhash2(k []uint32, initval uint32) uint32 {
	a := 0xdeadbeef + uint32(len(k))<<2 + initval
	b, c := a, a
	i := 0
	for ; len(k)-i > 3; i += 3 {
		a += k[i]
		b += k[i+1]
		c += k[i+2]
		a, b, c = jhashMix(a, b, c)
	}
	switch len(k) - i {
	case 3:
		c += k[i+2]
		fallthrough
	case 2:
		b += k[i+1]
		fallthrough
	case 1:
		a += k[i]
		c = jhashFinal(a, b, c)
	}
	return c
}

func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jhashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}
