package tunnel

import (
	"errors"
	"net"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
)

// watchdog is the failure detector of a tunnel's control stream, at both ends: the
// peer is gone after deadAfter without a word from it — deadAfter of this process's
// own running time. A process stopped for a second (a VM paused, SIGSTOP then SIGCONT,
// a machine starved of CPU) could not hear its peer meanwhile: on resuming, the pings
// or pongs that arrived wait in its socket, and a detector whose timer fires first
// would drop every tunnel with its streams. So the time the process did not run, as
// its stall meter saw it (clock.StallMeter), is not counted against the peer, and a
// dead peer is still gone deadAfter after its last word, while the process runs.
//
// Over TCP, any frame of the tunnel counts as a word: a ping or pong queues behind the
// streams' data in one byte stream, and a busy tunnel is not a vanished peer. QUIC
// schedules its control stream's frames apart from the others: only the messages count.
type watchdog struct {
	clk    clock.Clock
	stalls *clock.StallMeter
	conn   tunnelConn
	since  time.Time // the peer's last word
}

func newWatchdog(clk clock.Clock, stalls *clock.StallMeter, conn tunnelConn) *watchdog {
	return &watchdog{clk: clk, stalls: stalls, conn: conn, since: clk.Now()}
}

// heard takes a message from the peer.
func (w *watchdog) heard() { w.since = w.clk.Now() }

// silence is how long the peer has said nothing while this process ran.
func (w *watchdog) silence(now time.Time) time.Duration {
	if m, ok := w.conn.(*muxConn); ok {
		if at := m.lastHeard(); at.After(w.since) {
			w.since = at
		}
	}
	return now.Sub(w.since) - w.stalls.Stalled(w.since, now)
}

// deadline is when the peer is gone if it stays silent and this process runs.
func (w *watchdog) deadline() time.Time {
	now := w.clk.Now()
	return now.Add(deadAfter - w.silence(now))
}

// gone says whether a read that failed with err means the peer is gone: a timeout
// after deadAfter of silence. On a timeout before that (the process stalled, or
// frames arrived), the caller reads again until deadline.
func (w *watchdog) gone(err error) bool {
	return timedOut(err) && w.silence(w.clk.Now()) >= deadAfter
}

// timedOut says err is a read's timeout.
func timedOut(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
