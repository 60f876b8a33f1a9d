//go:build !linux

package tunnel

import (
	"errors"
	"time"
)

// The edge runs on Linux; the connector also on macOS and Windows, where a tunnel over
// TCP reports no RTT, keeps the system's loss-recovery timers, and an edge would send no
// first bytes with the stream's header.

func recvNow(uintptr, []byte) (int, error) {
	return 0, errors.New("reading without waiting: Linux only")
}

func kernelRTT(uintptr) time.Duration { return 0 }

func tuneLossRecovery(uintptr) {}
