package tunnel

import (
	"time"

	"golang.org/x/sys/unix"
)

// recvNow reads what the socket holds without waiting (MSG_DONTWAIT).
func recvNow(fd uintptr, buf []byte) (int, error) {
	n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
	return n, err
}

// kernelRTT is the kernel's smoothed RTT of a TCP socket (TCP_INFO), 0 when it cannot
// be read.
func kernelRTT(fd uintptr) time.Duration {
	info, err := unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO)
	if err != nil {
		return 0
	}
	return time.Duration(info.Rtt) * time.Microsecond
}
