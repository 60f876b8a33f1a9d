package bench

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// ProcessCPU is the CPU time process pid has used, user and system (0 if it cannot be
// read): what a benchmark charges a process beside it (etcd, a node) for its work.
func ProcessCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// the fields after the command's closing parenthesis; utime and stime are the 14th
	// and 15th of the line, in clock ticks (100 a second)
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
