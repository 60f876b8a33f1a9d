package dptest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// PinCPU binds the calling thread to one CPU and returns what undoes it. Flow-table
// tests pin: the new-flow bound is counted per CPU.
func PinCPU(cpu int) (func(), error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_setaffinity: %w", err)
	}
	return func() { unix.SchedSetaffinity(0, &old) }, nil
}

// FloodTCP runs n TCP packets with the given flags (SYN: a SYN flood; ACK: packets
// of flows the node has never seen, which it remembers) to vip:port from random
// (spoofed) sources and ports through prog, as received on ifindex, from the calling
// thread (which must be in the bench's namespace). It returns how many were forwarded
// (XDP_TX or redirect).
func FloodTCP(prog *ebpf.Program, ifindex int, vip netip.Addr, port uint16, flags TCPFlags, n int, seed uint64) (int, error) {
	src := Client4
	if vip.Is6() {
		src = Client6
	}
	pkt := Packet{Src: src, Dst: vip, SPort: 1, DPort: port, Flags: flags}.Bytes()
	// offsets of the source address and port in the frame
	srcOff, srcLen, portOff := 14+12, 4, 14+20
	if vip.Is6() {
		srcOff, srcLen, portOff = 14+8, 16, 14+40
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	forwarded := 0
	for i := 0; i < n; i++ {
		// checksums go stale: the program checks none of them
		for j := 0; j < srcLen; j += 4 {
			binary.LittleEndian.PutUint32(pkt[srcOff+j:], rng.Uint32())
		}
		binary.BigEndian.PutUint16(pkt[portOff:], uint16(rng.Uint32()))
		v, _, err := RunXDP(prog, ifindex, pkt)
		if err != nil {
			return forwarded, err
		}
		if v == XDPTX || v == XDPRedirect {
			forwarded++
		}
	}
	return forwarded, nil
}
