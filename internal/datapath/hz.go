package datapath

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// kernelHZ is the running kernel's CONFIG_HZ, 0 when its config cannot be found. The
// program keeps its timeouts in jiffies when it knows HZ (a clock it reads for free) and
// falls back to a helper call otherwise (kernel_hz in bpf/lib/node.h). A variable so
// that tests can load the program as on a host without a kernel config.
var kernelHZ = readKernelHZ

// readKernelHZ looks where libbpf and cilium/ebpf look for the kernel's config.
func readKernelHZ() uint32 {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		if f, err := os.Open("/boot/config-" + unix.ByteSliceToString(uts.Release[:])); err == nil {
			defer f.Close()
			return configHZ(f)
		}
	}
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return 0
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return 0
	}
	return configHZ(z)
}

// configHZ returns CONFIG_HZ of a kernel config, 0 when absent or unreadable.
func configHZ(r io.Reader) uint32 {
	s := bufio.NewScanner(r)
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte("CONFIG_HZ=")); ok {
			hz, err := strconv.ParseUint(string(v), 10, 32)
			if err != nil {
				return 0
			}
			return uint32(hz)
		}
	}
	return 0
}
