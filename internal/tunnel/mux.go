package tunnel

// The stream multiplexer of the TCP transport (tcp.go): many streams over one
// reliable, ordered connection (TLS 1.3 over TCP), each with its own flow control, so
// that a stream whose reader stalls stops its own sender and no other.
//
//	Write (the caller's goroutine) ── waits for the stream's send window, then
//	                                   writes the frame itself under the connection's
//	                                   write lock: no writer goroutine, no copy but the
//	                                   frame's first record; a small frame is queued
//	                                   and written with the others queued by whichever
//	                                   writer holds the lock (writeFrame)
//	readLoop (one goroutine per connection) ── reads a frame, appends its data to the
//	                                   stream's buffer (at most its window), wakes its
//	                                   reader; never writes, so it never waits on the
//	                                   peer: both ends' readers always drain TCP
//	Read (the caller's goroutine) ── takes buffered data, grants the window back once
//	                                   half of it is consumed
//
// A frame is a 10-byte header and its payload:
//
//	type (1) flags (1) stream id (4, big-endian) length (4, big-endian)
//
//	muxData    length bytes of the stream's data (at most muxMaxFrame); flags: open
//	           (the stream's first frame), fin (its last data: the sender writes no
//	           more), rst (the sender aborts: it will neither read nor write more; the
//	           data before a fin the peer had sent stays readable)
//	muxWindow  the receiver grants length more bytes of the stream (no payload)
//	muxClose   stream 0: the connection ends; payload: an 8-byte code and the reason
//
// Stream ids are odd when the dialling side opens them, even for the listening side.
// Frames of a stream that has ended are dropped: the peer may have sent them before
// it learnt of the end.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

const (
	muxHeaderLen = 10
	// muxMaxFrame bounds a data frame's payload: the largest read the reader makes
	// at once, in a buffer it takes from a pool. As large as the proxy's large copy
	// buffer, so that a bulk stream's write is one frame, and its reader is woken once
	// per 256 KiB (the wake-ups between threads are the larger cost of a stream).
	muxMaxFrame = 256 << 10
	// muxStreamWindow is each stream's receive window: what the peer may send ahead
	// of the reader, so the most a stalled stream buffers. 1 MiB keeps one stream at
	// wire speed on a path of a few milliseconds (and on loopback under load).
	muxStreamWindow = 1 << 20
	// muxMaxCloseReason bounds the reason of a close frame.
	muxMaxCloseReason = 1024
	// muxMaxPendingResets bounds the resets of refused streams being sent at once; a
	// peer that opens past the limit faster than it reads is broken, and closed.
	muxMaxPendingResets = 64
	// muxQueuedFrame: frames with at most this much payload are queued and written
	// together (writeFrame); muxMaxQueue bounds the queue.
	muxQueuedFrame = 4 << 10
	muxMaxQueue    = 256 << 10
	// tlsRecord is TLS's largest record: a frame's header is sent with the first
	// record of its payload, so that it costs no record (and no syscall) of its own.
	tlsRecord = 16 << 10
)

const (
	muxData   byte = 0
	muxWindow byte = 1
	muxClose  byte = 2

	flagOpen byte = 1
	flagFin  byte = 2
	flagRst  byte = 4
)

var (
	errStreamReset  = errors.New("stream reset by the peer")
	errStreamClosed = errors.New("stream closed")
	errMuxClosed    = errors.New("tunnel connection closed")
)

// muxBuffers hold the data frames the reader reads whole: a bulk stream's; the small
// ones pack the small frames (a request, an answer) of the many streams that carry
// little, so that each holds 16 KiB while its reader is behind, not a frame's buffer.
var (
	muxBuffers      = sync.Pool{New: func() any { b := make([]byte, muxMaxFrame); return &b }}
	muxSmallBuffers = sync.Pool{New: func() any { b := make([]byte, muxSmallBuffer); return &b }}
)

const muxSmallBuffer = 16 << 10

// putBuffer gives a stream's buffer back to its pool.
func putBuffer(b []byte) {
	b = b[:0]
	switch cap(b) {
	case muxMaxFrame:
		muxBuffers.Put(&b)
	case muxSmallBuffer:
		muxSmallBuffers.Put(&b)
	}
}

// muxConn is one multiplexed connection.
type muxConn struct {
	conn     net.Conn // TLS over TCP
	client   bool     // the dialling side: opens odd stream ids
	protocol string   // ALPN
	ctx      context.Context
	cancel   context.CancelFunc

	wmu      sync.Mutex // the socket: one write at a time; held across it
	wbuf     []byte     // a large frame's header and first record, under wmu
	flushing []byte     // the queue being written, under wmu
	qmu      sync.Mutex
	queue    []byte // small frames to write, in order (writeFrame)

	mu          sync.Mutex
	streams     map[uint32]*muxStream
	nextID      uint32
	incoming    int // streams the peer opened, not yet ended
	maxIncoming int
	err         error // why the connection ended; set once

	accept        chan *muxStream
	pendingResets atomic.Int32
	heard         atomic.Int64 // when the last frame arrived, in Unix nanoseconds
}

// lastHeard is when the last frame arrived from the peer.
func (m *muxConn) lastHeard() time.Time { return time.Unix(0, m.heard.Load()) }

// newMux runs the multiplexer over conn, the peer allowed to open at most
// maxIncoming streams at once (more are reset). ctx's values are the connection's
// Context's.
func newMux(ctx context.Context, conn net.Conn, client bool, protocol string, maxIncoming int) *muxConn {
	m := &muxConn{
		conn: conn, client: client, protocol: protocol,
		wbuf:    make([]byte, 0, muxHeaderLen+tlsRecord),
		streams: map[uint32]*muxStream{}, maxIncoming: maxIncoming,
		// the accept queue holds what the peer may open; past 4096, the peer waits
		// (its streams are reset) until the side accepts
		accept: make(chan *muxStream, min(max(maxIncoming, 1), 4096)),
	}
	m.nextID = 2
	if client {
		m.nextID = 1
	}
	m.ctx, m.cancel = context.WithCancel(ctx)
	if tcp, ok := tcpConn(conn); ok {
		if raw, err := tcp.SyscallConn(); err == nil {
			_ = raw.Control(tuneLossRecovery)
		}
	}
	go m.readLoop()
	return m
}

// muxStream is one stream; its fields are guarded by mu but for the immutable ones.
type muxStream struct {
	m  *muxConn
	id uint32

	sendMu sync.Mutex // the stream's frames in order (open first, nothing after fin or rst)

	mu sync.Mutex
	// receive side
	bufs       [][]byte // buffered data, bufs[0][off:] first
	off        int
	buffered   int
	recvWindow int // what the peer may still send
	consumed   int // read since the last grant
	finRecv    bool
	rstRecv    bool
	deadline   time.Time
	// send side
	writeDeadline time.Time
	sendWindow    int
	opened        bool // the open flag is sent (or the peer opened it)
	finSent       bool
	rstSent       bool
	removed       bool
	aborting      bool // an abort waits to send its reset: a Write waiting for window gives up

	readable chan struct{} // capacity 1: data, fin, rst, deadline or the connection's end
	writable chan struct{} // capacity 1: window, rst or the connection's end
}

func (m *muxConn) newStream(id uint32, opened bool) *muxStream {
	return &muxStream{m: m, id: id, recvWindow: muxStreamWindow, sendWindow: muxStreamWindow, opened: opened,
		readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// OpenStreamSync opens a stream; the peer learns of it with its first frame.
func (m *muxConn) OpenStreamSync(ctx context.Context) (tunnelStream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	if m.nextID >= 1<<32-2 {
		return nil, errors.New("tunnel connection: stream ids exhausted")
	}
	s := m.newStream(m.nextID, false)
	m.nextID += 2
	m.streams[s.id] = s
	return s, nil
}

// AcceptStream returns the next stream the peer opened.
func (m *muxConn) AcceptStream(ctx context.Context) (tunnelStream, error) {
	select {
	case s := <-m.accept:
		return s, nil
	case <-m.ctx.Done():
		return nil, m.closeErr()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *muxConn) closeErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		return errMuxClosed
	}
	return m.err
}

// Context is done once the connection has ended.
func (m *muxConn) Context() context.Context { return m.ctx }
func (m *muxConn) LocalAddr() net.Addr      { return m.conn.LocalAddr() }
func (m *muxConn) RemoteAddr() net.Addr     { return m.conn.RemoteAddr() }
func (m *muxConn) Protocol() string         { return m.protocol }
func (m *muxConn) Transport() string        { return TransportTCP }

// RTT is the kernel's smoothed RTT of the TCP connection (0 where not Linux).
func (m *muxConn) RTT() time.Duration {
	tcp, ok := tcpConn(m.conn)
	if !ok {
		return 0
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return 0
	}
	var rtt time.Duration
	_ = raw.Control(func(fd uintptr) { rtt = kernelRTT(fd) })
	return rtt
}

// CloseWithError ends the connection, telling the peer code and reason (which it
// sees as a remote quic.ApplicationError, as over QUIC). It does not wait for a
// writer stuck on a peer that does not read.
func (m *muxConn) CloseWithError(code quic.ApplicationErrorCode, reason string) error {
	if !m.end(&quic.ApplicationError{ErrorCode: code, ErrorMessage: reason}) {
		return nil
	}
	if len(reason) > muxMaxCloseReason {
		reason = reason[:muxMaxCloseReason]
	}
	payload := binary.BigEndian.AppendUint64(nil, uint64(code))
	payload = append(payload, reason...)
	if m.wmu.TryLock() {
		_ = m.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = m.writeFrameLocked(muxClose, 0, 0, uint32(len(payload)), payload)
		m.wmu.Unlock()
	}
	// the peer reads the close frame before the end of the stream; the reader here
	// drains what the peer still sends for a second, then closes the socket
	if tcp, ok := tcpConn(m.conn); ok {
		_ = tcp.CloseWrite()
	}
	_ = m.conn.SetReadDeadline(time.Now().Add(time.Second))
	return nil
}

// end records why the connection ended and wakes everyone; false when it had ended.
func (m *muxConn) end(err error) bool {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return false
	}
	m.err = err
	streams := m.streams
	m.streams = map[uint32]*muxStream{}
	m.mu.Unlock()
	m.cancel()
	for _, s := range streams {
		wake(s.readable)
		wake(s.writable)
	}
	return true
}

// fail ends the connection on a broken transport or peer.
func (m *muxConn) fail(err error) {
	m.end(err)
	_ = m.conn.Close()
}

// writeFrame sends one frame; length is the payload's but for a window frame's.
//
// A small frame (a request, an answer, a window, a fin) is queued, and written by
// whichever writer holds the socket, with every other frame queued meanwhile, in one
// write (group commit): a writer that finds the socket taken does not wait for it, and
// many streams' small frames cost one TLS write, as QUIC packs them into one packet,
// instead of a convoy of writers each waiting for the lock (its holder descheduled on a
// loaded machine holds them all). A large frame takes the socket, after the queue.
func (m *muxConn) writeFrame(typ, flags byte, id, length uint32, payload []byte) error {
	if err := m.ctx.Err(); err != nil {
		return m.closeErr()
	}
	if len(payload) <= muxQueuedFrame {
		m.qmu.Lock()
		m.queue = appendFrameHeader(m.queue, typ, flags, id, length)
		m.queue = append(m.queue, payload...)
		full := len(m.queue) >= muxMaxQueue
		m.qmu.Unlock()
		if full {
			m.wmu.Lock() // the queue is bounded: past it, a writer waits its turn
		} else if !m.wmu.TryLock() {
			return nil // the socket's holder writes the frame before it lets go
		}
		return m.flushUnlock()
	}
	m.wmu.Lock()
	err := m.flushLocked() // the frames queued before this one go first
	if err == nil {
		err = m.writeFrameLocked(typ, flags, id, length, payload)
	}
	if err != nil {
		m.wmu.Unlock()
		m.fail(err)
		return err
	}
	return m.flushUnlock()
}

// flushLocked writes the queued frames; the caller holds wmu.
func (m *muxConn) flushLocked() error {
	for {
		m.qmu.Lock()
		if len(m.queue) == 0 {
			m.qmu.Unlock()
			return nil
		}
		m.queue, m.flushing = m.flushing[:0], m.queue
		m.qmu.Unlock()
		if _, err := m.conn.Write(m.flushing); err != nil {
			return err
		}
	}
}

// flushUnlock writes the queue and lets the socket go; a frame queued between the
// last write and the unlock found the socket taken, so it takes the socket again for
// it (unless another writer did).
func (m *muxConn) flushUnlock() error {
	for {
		err := m.flushLocked()
		m.wmu.Unlock()
		if err != nil {
			m.fail(err)
			return err
		}
		m.qmu.Lock()
		pending := len(m.queue) > 0
		m.qmu.Unlock()
		if !pending || !m.wmu.TryLock() {
			return nil
		}
	}
}

func appendFrameHeader(b []byte, typ, flags byte, id, length uint32) []byte {
	b = append(b, typ, flags)
	b = binary.BigEndian.AppendUint32(b, id)
	return binary.BigEndian.AppendUint32(b, length)
}

// writeFrameLocked writes the header with the payload's first record in one write,
// the rest straight from the caller's buffer: one copy of at most a record.
func (m *muxConn) writeFrameLocked(typ, flags byte, id, length uint32, payload []byte) error {
	b := appendFrameHeader(m.wbuf[:0], typ, flags, id, length)
	first := min(len(payload), tlsRecord-muxHeaderLen)
	b = append(b, payload[:first]...)
	if _, err := m.conn.Write(b); err != nil {
		return err
	}
	if first < len(payload) {
		if _, err := m.conn.Write(payload[first:]); err != nil {
			return err
		}
	}
	return nil
}

// readLoop reads the frames until the connection ends.
func (m *muxConn) readLoop() {
	err := m.read()
	if m.ctx.Err() != nil { // closed here: what follows the close frame is dropped
		_ = m.conn.Close()
		return
	}
	m.fail(err)
}

func (m *muxConn) read() error {
	var hdr [muxHeaderLen]byte
	small := make([]byte, 4<<10)
	for {
		if _, err := io.ReadFull(m.conn, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return errMuxClosed
			}
			return err
		}
		m.heard.Store(time.Now().UnixNano())
		f := muxFrame{typ: hdr[0], flags: hdr[1], id: binary.BigEndian.Uint32(hdr[2:]), length: binary.BigEndian.Uint32(hdr[6:])}
		if err := f.check(); err != nil {
			return m.broken(err)
		}
		switch f.typ {
		case muxData:
			if err := m.data(f, small); err != nil {
				return err
			}
		case muxWindow:
			if err := m.window(f); err != nil {
				return m.broken(err)
			}
		case muxClose:
			payload := make([]byte, f.length)
			if _, err := io.ReadFull(m.conn, payload); err != nil {
				return err
			}
			return &quic.ApplicationError{Remote: true, ErrorCode: quic.ApplicationErrorCode(binary.BigEndian.Uint64(payload)),
				ErrorMessage: string(payload[8:])}
		}
	}
}

// muxFrame is a frame's header.
type muxFrame struct {
	typ, flags byte
	id, length uint32
}

// check is what a header must be whatever the connection's state: a known type, a
// bounded length, known flags.
func (f muxFrame) check() error {
	switch f.typ {
	case muxData:
		if f.length > muxMaxFrame {
			return fmt.Errorf("a data frame of %d bytes, more than %d", f.length, muxMaxFrame)
		}
		if f.flags&^(flagOpen|flagFin|flagRst) != 0 || f.id == 0 {
			return fmt.Errorf("a data frame with flags %#x on stream %d", f.flags, f.id)
		}
		if f.flags&flagRst != 0 && f.length > 0 {
			return errors.New("a reset with data")
		}
	case muxWindow:
		if f.flags != 0 || f.id == 0 || f.length == 0 || f.length > muxStreamWindow {
			return fmt.Errorf("a window frame of %d bytes with flags %#x on stream %d", f.length, f.flags, f.id)
		}
	case muxClose:
		if f.flags != 0 || f.id != 0 || f.length < 8 || f.length > 8+muxMaxCloseReason {
			return fmt.Errorf("a close frame of %d bytes with flags %#x on stream %d", f.length, f.flags, f.id)
		}
	default:
		return fmt.Errorf("a frame of unknown type %d", f.typ)
	}
	return nil
}

// errBroken is a peer that broke the framing.
type errBroken struct{ error }

func (m *muxConn) broken(err error) error {
	_ = m.CloseWithError(codeBroken, err.Error())
	return errBroken{err}
}

// data takes a data frame: its bytes go to the stream's buffer, within its window.
func (m *muxConn) data(f muxFrame, small []byte) error {
	s, err := m.route(f)
	if err != nil {
		return m.broken(err)
	}
	var chunk *[]byte
	var payload []byte
	switch {
	case f.length == 0:
	case f.length <= uint32(len(small)):
		payload = small[:f.length]
	default:
		chunk = muxBuffers.Get().(*[]byte)
		payload = (*chunk)[:f.length]
	}
	if len(payload) > 0 {
		if _, err := io.ReadFull(m.conn, payload); err != nil {
			return err
		}
	}
	if s == nil { // an ended (or refused) stream's
		if chunk != nil {
			muxBuffers.Put(chunk)
		}
		return nil
	}
	kept, err := s.receive(payload, chunk, f.flags)
	if chunk != nil && !kept {
		muxBuffers.Put(chunk)
	}
	if err != nil {
		return m.broken(err)
	}
	return nil
}

// route finds a data frame's stream, making it when the frame opens one; nil for a
// stream that has ended or was refused.
func (m *muxConn) route(f muxFrame) (*muxStream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.flags&flagOpen == 0 {
		return m.streams[f.id], nil
	}
	// ids are never reused, but streams may open out of order: a side allocates them
	// as its callers open streams and sends each with the stream's first write
	if peerOdd := !m.client; (f.id%2 == 1) != peerOdd || m.streams[f.id] != nil {
		return nil, fmt.Errorf("stream %d opened twice or with the other side's parity", f.id)
	}
	if m.err != nil {
		return nil, nil
	}
	if m.incoming >= m.maxIncoming || len(m.accept) == cap(m.accept) {
		if f.flags&(flagFin|flagRst) == 0 {
			m.refuse(f.id)
		}
		return nil, nil
	}
	s := m.newStream(f.id, true)
	m.streams[f.id] = s
	m.incoming++
	m.accept <- s // room checked above, under m.mu: the only sender
	return s, nil
}

// refuse resets a stream the peer opened past the limit. The reader never writes
// (it would wait on the peer), so the reset goes from a goroutine of its own; the
// caller holds m.mu.
func (m *muxConn) refuse(id uint32) {
	if m.pendingResets.Add(1) > muxMaxPendingResets {
		m.pendingResets.Add(-1)
		go m.CloseWithError(codeBroken, "streams opened past the limit faster than resets could be sent")
		return
	}
	go func() {
		defer m.pendingResets.Add(-1)
		_ = m.writeFrame(muxData, flagRst, id, 0, nil)
	}()
}

// window takes a window frame.
func (m *muxConn) window(f muxFrame) error {
	m.mu.Lock()
	s := m.streams[f.id]
	m.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.sendWindow += int(f.length)
	over := s.sendWindow > muxStreamWindow
	s.mu.Unlock()
	if over {
		return fmt.Errorf("stream %d granted more than its window", f.id)
	}
	wake(s.writable)
	return nil
}

// receive buffers a data frame's payload; kept says it holds on to chunk.
func (s *muxStream) receive(payload []byte, chunk *[]byte, flags byte) (kept bool, err error) {
	s.mu.Lock()
	defer func() {
		s.mu.Unlock()
		wake(s.readable)
		if flags&flagRst != 0 {
			wake(s.writable)
		}
	}()
	// after its fin, a peer may still abort (its reader gave up): nothing else
	if s.rstRecv || (s.finRecv && (flags != flagRst || len(payload) > 0)) {
		return false, fmt.Errorf("stream %d: a frame after its end", s.id)
	}
	if len(payload) > s.recvWindow {
		return false, fmt.Errorf("stream %d: %d bytes past its window of %d", s.id, len(payload), s.recvWindow)
	}
	s.recvWindow -= len(payload)
	if len(payload) > 0 && !s.rstSent {
		// a frame that fills half a buffer keeps it; smaller ones are packed, so
		// that the buffers held are at most twice the data (and the window) bounds
		if chunk != nil && len(payload) >= muxMaxFrame/2 {
			s.bufs = append(s.bufs, payload)
			kept = true
		} else if n := len(s.bufs); n > 0 && cap(s.bufs[n-1])-len(s.bufs[n-1]) >= len(payload) {
			s.bufs[n-1] = append(s.bufs[n-1], payload...)
		} else {
			pool := &muxSmallBuffers
			if len(payload) > muxSmallBuffer {
				pool = &muxBuffers
			}
			b := pool.Get().(*[]byte)
			s.bufs = append(s.bufs, append((*b)[:0], payload...))
		}
		s.buffered += len(payload)
	}
	s.finRecv = s.finRecv || flags&flagFin != 0
	s.rstRecv = flags&flagRst != 0
	s.maybeRemoveLocked()
	return kept, nil
}

// maybeRemoveLocked forgets the stream once neither side will send on it; the
// caller holds s.mu.
func (s *muxStream) maybeRemoveLocked() {
	sendDone := s.finSent || s.rstSent || s.rstRecv
	recvDone := s.finRecv || s.rstRecv || s.rstSent
	if !sendDone || !recvDone || s.removed {
		return
	}
	s.removed = true
	m := s.m
	m.mu.Lock()
	if m.streams[s.id] == s {
		delete(m.streams, s.id)
		if (s.id%2 == 1) != m.client {
			m.incoming--
		}
	}
	m.mu.Unlock()
}

// Read reads the stream's data: what was buffered, even after the peer's reset, then
// io.EOF after its fin.
func (s *muxStream) Read(p []byte) (int, error) {
	for {
		s.mu.Lock()
		if s.buffered > 0 {
			n := s.take(p)
			grant := 0
			if s.consumed >= muxStreamWindow/2 && !s.finRecv && !s.rstRecv && !s.rstSent {
				grant, s.consumed = s.consumed, 0
				s.recvWindow += grant
			}
			s.mu.Unlock()
			if grant > 0 {
				_ = s.m.writeFrame(muxWindow, 0, s.id, uint32(grant), nil)
			}
			return n, nil
		}
		var err error
		switch {
		case s.finRecv:
			err = io.EOF
		case s.rstSent:
			err = errStreamClosed
		case s.rstRecv:
			err = errStreamReset
		}
		deadline := s.deadline
		s.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if s.m.ctx.Err() != nil {
			return 0, s.m.closeErr()
		}
		if err := waitUntil(deadline, s.readable, s.m.ctx.Done()); err != nil {
			return 0, err
		}
	}
}

// waitUntil waits for wake or done, or fails at deadline (the zero time: none).
func waitUntil(deadline time.Time, wake <-chan struct{}, done <-chan struct{}) error {
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d) // only the control stream's reads have deadlines
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-wake:
	case <-done:
	case <-timeout:
		return os.ErrDeadlineExceeded
	}
	return nil
}

// take copies buffered data into p; the caller holds s.mu.
func (s *muxStream) take(p []byte) int {
	n := 0
	for n < len(p) && len(s.bufs) > 0 {
		k := copy(p[n:], s.bufs[0][s.off:])
		n += k
		s.off += k
		if s.off == len(s.bufs[0]) {
			putBuffer(s.bufs[0])
			s.bufs[0] = nil
			s.bufs = s.bufs[1:]
			s.off = 0
		}
	}
	if len(s.bufs) == 0 {
		s.bufs = nil
	}
	s.buffered -= n
	s.consumed += n
	return n
}

// Write sends p in frames as the stream's window allows; it waits while the peer's
// reader is behind by a window, and only this stream waits.
func (s *muxStream) Write(p []byte) (int, error) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	written := 0
	for len(p) > 0 {
		s.mu.Lock()
		for s.sendWindow == 0 && !s.rstRecv && !s.rstSent && !s.aborting && !s.finSent && s.m.ctx.Err() == nil {
			deadline := s.writeDeadline
			s.mu.Unlock()
			if err := waitUntil(deadline, s.writable, s.m.ctx.Done()); err != nil {
				return written, err
			}
			s.mu.Lock()
		}
		var err error
		switch {
		case s.m.ctx.Err() != nil:
			err = s.m.closeErr()
		case s.rstRecv:
			err = errStreamReset
		case s.rstSent, s.aborting, s.finSent:
			err = errStreamClosed
		}
		if err != nil {
			s.mu.Unlock()
			return written, err
		}
		n := min(len(p), s.sendWindow, muxMaxFrame)
		s.sendWindow -= n
		flags := s.openFlagLocked()
		s.mu.Unlock()
		if err := s.m.writeFrame(muxData, flags, s.id, uint32(n), p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// openFlagLocked is the flag of the stream's next frame: open for its first.
func (s *muxStream) openFlagLocked() byte {
	if s.opened {
		return 0
	}
	s.opened = true
	return flagOpen
}

// Close ends the stream's sending side (a fin); reading goes on.
func (s *muxStream) Close() error {
	return s.finish(flagFin)
}

// CancelRead and CancelWrite abort the stream both ways (a reset): the multiplexer
// has no half-aborted stream, and every caller aborts both.
func (s *muxStream) CancelRead(quic.StreamErrorCode)  { _ = s.finish(flagRst) }
func (s *muxStream) CancelWrite(quic.StreamErrorCode) { _ = s.finish(flagRst) }

func (s *muxStream) finish(flag byte) error {
	if flag == flagRst { // a Write waiting for the peer's window must not hold the reset back
		s.mu.Lock()
		s.aborting = true
		s.mu.Unlock()
		wake(s.writable)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if s.rstSent || (flag == flagFin && s.finSent) || (flag == flagRst && s.finSent && (s.finRecv || s.rstRecv)) {
		s.mu.Unlock()
		return nil
	}
	if flag == flagRst {
		s.rstSent = true
		for _, b := range s.bufs {
			putBuffer(b)
		}
		s.bufs, s.off, s.buffered = nil, 0, 0
	} else {
		s.finSent = true
	}
	// nothing to tell a peer that reset the stream, or that never heard of it
	send := !s.rstRecv && (s.opened || flag == flagFin)
	flags := flag | s.openFlagLocked()
	s.maybeRemoveLocked()
	s.mu.Unlock()
	wake(s.readable)
	wake(s.writable)
	if !send {
		return nil
	}
	return s.m.writeFrame(muxData, flags, s.id, 0, nil)
}

// SetReadDeadline bounds the wait of Read (the zero time: none).
func (s *muxStream) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
	wake(s.readable)
	return nil
}

// SetWriteDeadline bounds a Write's wait for the stream's window (not a write the
// connection itself is stuck in: that ends with the connection).
func (s *muxStream) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	s.writeDeadline = t
	s.mu.Unlock()
	wake(s.writable)
	return nil
}

func (s *muxStream) SetDeadline(t time.Time) error {
	_ = s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}
