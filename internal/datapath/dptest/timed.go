package dptest

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// testRunAttr is the BPF_PROG_TEST_RUN part of union bpf_attr (linux/bpf.h). cilium/ebpf
// runs programs with a context but keeps the measured duration to itself, so timing
// with an ingress ifindex needs the raw command.
type testRunAttr struct {
	progFD      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      uint64
	dataOut     uint64
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       uint64
	ctxOut      uint64
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

const bpfProgTestRun = 10 // BPF_PROG_TEST_RUN

// timed holds the syscall's arguments in global memory, which never moves: the kernel
// reads them through raw addresses, which a growing goroutine stack could invalidate.
var timed struct {
	sync.Mutex
	attr testRunAttr
	ctx  xdpMD
}

// TimedXDP runs pkt through prog `repeat` times in the kernel as if received on
// ifindex and returns the verdict and the kernel's mean time per run in ns. With
// repeat = 1 the program sees the packet as given every call; with repeat > 1 it sees
// its own output from the second run on (the kernel does not restore the packet).
func TimedXDP(prog *ebpf.Program, ifindex int, pkt []byte, repeat uint32) (uint32, uint32, error) {
	timed.Lock()
	defer timed.Unlock()
	data := pinned(pkt)
	timed.ctx = xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(ifindex)}
	timed.attr = testRunAttr{
		progFD:     uint32(prog.FD()),
		dataSizeIn: uint32(len(pkt)),
		dataIn:     uint64(uintptr(unsafe.Pointer(&data[0]))),
		repeat:     repeat,
		ctxSizeIn:  uint32(unsafe.Sizeof(timed.ctx)),
		ctxIn:      uint64(uintptr(unsafe.Pointer(&timed.ctx))),
	}
	attr := &timed.attr
	for {
		_, _, errno := unix.Syscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, 0, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
		}
		return attr.retval, attr.duration, nil
	}
}

// pinnedBuf is global memory for the packet, for the same reason as timed.
var pinnedBuf [4096]byte

func pinned(pkt []byte) []byte {
	return pinnedBuf[:copy(pinnedBuf[:], pkt)]
}
