package bench

import "time"

// ProcessCPU is the CPU time process pid has used, user and system (0 if it cannot be
// read): what a benchmark charges a process beside it (etcd, a node) for its work.
// The lab's benchmarks (test/lab/fleet100) read it through here; steerscale's
// processCPUOf is the one reading.
func ProcessCPU(pid int) time.Duration { return processCPUOf(pid) }
