package tunnel

// Idle client connections: a connection that carries no byte either way for the idle
// timeout is closed, so that clients that connect and say nothing cannot hold a
// connector's whole capacity. The copies only stamp a coarse clock; a ticker does the
// rest, so the bulk path pays two atomic loads per read and no timer.
//
//	proxy's copies ── every read: stamp ← the cutter's tick (no syscall, no timer)
//	run (one goroutine per Serve, owned by it) ── every tick: close the connections
//	                                              stamped more than the timeout ago

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
)

// idleTicksPerTimeout: the ticker wakes ten times per timeout (at most once a
// second), so that a connection is closed at most two ticks (a fifth of the timeout,
// two seconds at most) after it has been idle for the timeout.
const (
	idleTicksPerTimeout = 10
	maxIdleTick         = time.Second
)

// idleCutter closes the idle connections of one Serve.
type idleCutter struct {
	clk     clock.Clock
	start   time.Time
	tick    time.Duration
	timeout int64        // in ticks
	now     atomic.Int64 // ticks since start: the clock the copies stamp
	onCut   func()       // counts a connection closed

	mu    sync.Mutex
	conns map[*activity]struct{}

	stopped chan struct{}
	done    chan struct{}
}

// activity is one client connection's last sign of life.
type activity struct {
	cutter *idleCutter
	conn   net.Conn
	last   atomic.Int64 // the cutter's tick at the connection's last byte
}

// newIdleCutter closes connections idle for timeout until stop; nil (which does
// nothing) when timeout is 0.
func newIdleCutter(clk clock.Clock, timeout time.Duration, onCut func()) *idleCutter {
	if timeout <= 0 {
		return nil
	}
	tick := min(timeout/idleTicksPerTimeout, maxIdleTick)
	c := &idleCutter{
		clk: clk, start: clk.Now(), tick: tick, timeout: int64((timeout + tick - 1) / tick), onCut: onCut,
		conns: map[*activity]struct{}{}, stopped: make(chan struct{}), done: make(chan struct{}),
	}
	ticker := clk.NewTicker(tick)
	go c.run(ticker)
	return c
}

func (c *idleCutter) run(ticker clock.Ticker) {
	defer close(c.done)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C():
			// from the clock, not a count of ticks: a tick missed (a busy process) is
			// not time that stood still
			c.now.Store(int64(c.clk.Now().Sub(c.start) / c.tick))
			c.cut()
		case <-c.stopped:
			return
		}
	}
}

// cut closes the connections whose last byte is more than the timeout ago: a stamp
// of tick L was made before tick L+1, so the connection has been idle for at least
// now-L-1 ticks.
func (c *idleCutter) cut() {
	now := c.now.Load()
	var idle []*activity
	c.mu.Lock()
	for a := range c.conns {
		if now-a.last.Load()-1 >= c.timeout {
			idle = append(idle, a)
			delete(c.conns, a)
		}
	}
	c.mu.Unlock()
	for _, a := range idle {
		a.conn.Close() // the proxy's copies fail, and it ends the stream
		c.onCut()
	}
}

// add watches conn until remove; nil on a nil cutter.
func (c *idleCutter) add(conn net.Conn) *activity {
	if c == nil {
		return nil
	}
	a := &activity{cutter: c, conn: conn}
	a.last.Store(c.now.Load())
	c.mu.Lock()
	c.conns[a] = struct{}{}
	c.mu.Unlock()
	return a
}

func (c *idleCutter) remove(a *activity) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.conns, a)
	c.mu.Unlock()
}

// stop ends the ticker's goroutine and waits for it.
func (c *idleCutter) stop() {
	if c == nil {
		return
	}
	close(c.stopped)
	<-c.done
}

// touch stamps the connection alive; a nil activity (no idle timeout, or the
// connector's side) is left alone. The store happens once per tick at most, so the
// copies of a busy connection do not keep writing one cache line.
func (a *activity) touch() {
	if a == nil {
		return
	}
	if now := a.cutter.now.Load(); a.last.Load() != now {
		a.last.Store(now)
	}
}
