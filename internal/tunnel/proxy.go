package tunnel

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// A copy starts with a small buffer and moves to a large one once a read fills the
// small one: a bulk stream then hands the stream (or the socket) a quarter of the
// writes, each a wake-up of quic-go's connection loop (one TCP stream through a tunnel
// on loopback: 2.2–2.7 → 2.4–3.0 Gbit/s, docs/performance.md, "Tunnels' throughput and latency"),
// while the many connections that carry a request now and then, and block in Read
// holding their buffer for their whole life, keep 32 KiB each.
var (
	smallCopyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	largeCopyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
)

// proxy joins a TCP connection to a stream until both directions have ended, each
// closed on its own (a client's half-close reaches the origin). When either direction
// fails, both are torn down, so that neither end waits for bytes that will not come.
// toStream and fromStream count the bytes each way; seen, when not nil, is stamped at
// every read either way (idle.go).
func proxy(conn net.Conn, s tunnelStream, toStream, fromStream byteCounters, seen *activity) error {
	errs := make(chan error, 2)
	go func() {
		err := copyCounting(s, conn, toStream, seen)
		if err == nil {
			err = s.Close()
		}
		errs <- err
	}()
	go func() {
		err := copyCounting(conn, s, fromStream, seen)
		if err == nil {
			err = closeWrite(conn)
		}
		errs <- err
	}()
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
			s.CancelRead(streamAborted)
			s.CancelWrite(streamAborted)
			if tcp, ok := tcpConn(conn); ok {
				_ = tcp.SetLinger(0) // a reset tells the client its request did not complete
			}
			conn.Close()
		}
	}
	conn.Close()
	return first
}

func copyCounting(dst io.Writer, src io.Reader, n byteCounters, seen *activity) error {
	pool := &smallCopyBuffers
	buf := pool.Get().(*[]byte)
	defer func() { pool.Put(buf) }()
	for {
		r, rerr := src.Read(*buf)
		if r > 0 {
			seen.touch()
			w, werr := dst.Write((*buf)[:r])
			n.add(w)
			if werr != nil {
				return werr
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		if r == len(*buf) && pool == &smallCopyBuffers {
			pool.Put(buf)
			pool = &largeCopyBuffers
			buf = pool.Get().(*[]byte)
		}
	}
}

// tcpConn is the TCP connection under conn: conn itself, or the one a listener's
// wrapper (listen's, crypto/tls's) holds.
func tcpConn(conn net.Conn) (*net.TCPConn, bool) {
	for {
		switch c := conn.(type) {
		case *net.TCPConn:
			return c, true
		case interface{ NetConn() net.Conn }:
			conn = c.NetConn()
		default:
			return nil, false
		}
	}
}

func closeWrite(conn net.Conn) error {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// byteCounters are the counters a copy adds its bytes to (a tunnel's and the total).
type byteCounters []*atomic.Int64

func (c byteCounters) add(n int) {
	for _, counter := range c {
		counter.Add(int64(n))
	}
}
