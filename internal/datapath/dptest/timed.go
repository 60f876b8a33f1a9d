package dptest

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestRunAttr is the BPF_PROG_TEST_RUN part of union bpf_attr (linux/bpf.h). cilium/ebpf
// runs programs with a context but keeps the measured duration to itself, and restarts
// a run a signal interrupts; timing with an ingress ifindex, and a packet generator
// stopped by a signal, need the raw command (ProgTestRun).
type TestRunAttr struct {
	ProgFD      uint32
	Retval      uint32
	DataSizeIn  uint32
	DataSizeOut uint32
	DataIn      uint64
	DataOut     uint64
	Repeat      uint32
	Duration    uint32
	CtxSizeIn   uint32
	CtxSizeOut  uint32
	CtxIn       uint64
	CtxOut      uint64
	Flags       uint32
	CPU         uint32
	BatchSize   uint32
	_           uint32
}

// ProgTestRun runs BPF_PROG_TEST_RUN once. attr, and the memory it points to, must not
// move during the call: keep them in global or heap memory, never on a goroutine stack.
func ProgTestRun(attr *TestRunAttr) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	return errno
}

const bpfProgTestRun = 10 // BPF_PROG_TEST_RUN

// timed holds the syscall's arguments in global memory, which never moves: the kernel
// reads them through raw addresses, which a growing goroutine stack could invalidate.
var timed struct {
	sync.Mutex
	attr TestRunAttr
	ctx  xdpMD
}

// TimedXDP runs pkt through prog `repeat` times in the kernel as if received on
// ifindex and returns the verdict and the kernel's mean time per run in ns. With
// repeat = 1 the program sees the packet as given every call; with repeat > 1 it sees
// its own output from the second run on (the kernel does not restore the packet).
func TimedXDP(prog *ebpf.Program, ifindex int, pkt []byte, repeat uint32) (uint32, uint32, error) {
	timed.Lock()
	defer timed.Unlock()
	timed.ctx = xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(ifindex)}
	timed.attr = TestRunAttr{
		CtxSizeIn: uint32(unsafe.Sizeof(timed.ctx)),
		CtxIn:     uint64(uintptr(unsafe.Pointer(&timed.ctx))),
	}
	return timedRun(prog, pkt, repeat)
}

// TimedTC runs pkt once through a tc program (as an skb, without a context) and
// returns the verdict and the kernel's time for the run in ns.
func TimedTC(prog *ebpf.Program, pkt []byte) (uint32, uint32, error) {
	timed.Lock()
	defer timed.Unlock()
	timed.attr = TestRunAttr{}
	return timedRun(prog, pkt, 1)
}

// timedRun completes timed.attr (held locked by the caller) with the program and the
// packet, and runs it.
func timedRun(prog *ebpf.Program, pkt []byte, repeat uint32) (uint32, uint32, error) {
	data := pinned(pkt)
	attr := &timed.attr
	attr.ProgFD = uint32(prog.FD())
	attr.DataSizeIn = uint32(len(pkt))
	attr.DataIn = uint64(uintptr(unsafe.Pointer(&data[0])))
	attr.Repeat = repeat
	for {
		errno := ProgTestRun(attr)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, 0, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
		}
		return attr.Retval, attr.Duration, nil
	}
}

// pinnedBuf is global memory for the packet, for the same reason as timed.
var pinnedBuf [4096]byte

func pinned(pkt []byte) []byte {
	return pinnedBuf[:copy(pinnedBuf[:], pkt)]
}
