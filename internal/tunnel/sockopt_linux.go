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

// Loss recovery of the TCP transport's connection (tcp.go). One connection carries
// every stream of a tunnel, so a segment lost stalls them all until it is sent again,
// and Linux waits at least 200 ms for that (its minimum RTO, and the tail-loss probe of
// a lone segment, a request's or an answer's), doubling at each loss of the retransmit:
// on a loaded host whose loopback queue overflows, one tunnel stalled for seconds at
// 4 000 requests/s, its clients opening thousands of connections meanwhile, where QUIC,
// whose probe timeout is the RTT plus the peer's ACK delay, recovered in milliseconds
// (docs/performance.md, "TLS over TCP"). Both ends are ours, so both bound their
// delayed ACKs (tcpDelackMax) below the minimum RTO (tcpRTOMin): an ACK is never
// taken for lost because the peer held it back. The RTO stays srtt + max(4·rttvar,
// tcpRTOMin) — on a WAN path the RTT's, as QUIC's.
const (
	tcpRTOMin    = 20 * time.Millisecond
	tcpDelackMax = 8 * time.Millisecond // two ticks of a 250 Hz kernel: the least it takes
)

// tuneLossRecovery sets the tunnel connection's timers (Linux 6.15 and later: an older
// kernel keeps its own, as does one that cannot delay ACKs so little, whose RTO floor
// stays its own too) and linear timeouts while few segments are in flight (every
// kernel): a thin stream's retransmits are not spaced out exponentially.
func tuneLossRecovery(fd uintptr) {
	_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_THIN_LINEAR_TIMEOUTS, 1)
	if unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DELACK_MAX_US, int(tcpDelackMax/time.Microsecond)) == nil {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US, int(tcpRTOMin/time.Microsecond))
	}
}
