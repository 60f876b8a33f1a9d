package dptest

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// xdpMD mirrors struct xdp_md for BPF_PROG_TEST_RUN's ctx_in: the kernel wants data = 0
// and data_end = the packet length, and takes ingress_ifindex from it.
type xdpMD struct {
	Data, DataEnd, DataMeta      uint32
	IngressIfindex, RxQueueIndex uint32
	EgressIfindex                uint32
}

// Verdicts.
const (
	XDPAborted  = 0
	XDPDrop     = 1
	XDPPass     = 2
	XDPTX       = 3
	XDPRedirect = 4
	TCActOK     = 0
)

// RunXDP runs pkt once through prog as if received on ifindex; it returns the verdict
// and the packet as the program left it.
func RunXDP(prog *ebpf.Program, ifindex int, pkt []byte) (uint32, []byte, error) {
	out := make([]byte, len(pkt)+256) // room for what the program prepends
	ctx := xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(ifindex)}
	opts := &ebpf.RunOptions{Data: pkt, DataOut: out, Context: ctx}
	ret, err := prog.Run(opts)
	if err != nil {
		return 0, nil, fmt.Errorf("BPF_PROG_TEST_RUN: %w", err)
	}
	return ret, opts.DataOut, nil
}

// RunTC runs pkt once through a tc program; it returns the verdict and the packet.
func RunTC(prog *ebpf.Program, pkt []byte) (uint32, []byte, error) {
	out := make([]byte, len(pkt)+256)
	opts := &ebpf.RunOptions{Data: pkt, DataOut: out}
	ret, err := prog.Run(opts)
	if err != nil {
		return 0, nil, fmt.Errorf("BPF_PROG_TEST_RUN: %w", err)
	}
	return ret, opts.DataOut, nil
}
