package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/testenv"
)

// muxPair is the two ends of a multiplexed TCP connection on loopback: the dialling
// side and the listening side, which accepts at most maxIncoming streams at once.
func muxPair(t testing.TB, maxIncoming int) (client, server *muxConn) {
	t.Helper()
	a, b := tcpPair(t)
	client = newMux(context.Background(), a, true, alpnV2, maxIncoming)
	server = newMux(context.Background(), b, false, alpnV2, maxIncoming)
	t.Cleanup(func() {
		client.CloseWithError(codeDone, "")
		server.CloseWithError(codeDone, "")
	})
	return client, server
}

func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func accept(t testing.TB, m *muxConn) tunnelStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := m.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Many streams at once, both ways, each with its own data, all of it arriving whole;
// once they have ended, neither side holds any of them.
func TestMuxManyStreams(t *testing.T) {
	const streams, size = 200, 300 << 10
	client, server := muxPair(t, streams)
	go func() { // the server echoes every stream
		for {
			s, err := server.AcceptStream(context.Background())
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(s, s)
				_ = s.Close()
			}()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for range streams {
		wg.Go(func() {
			data := random(t, size)
			s, err := client.OpenStreamSync(context.Background())
			if err != nil {
				errs <- err
				return
			}
			go func() {
				_, _ = s.Write(data)
				_ = s.Close()
			}()
			got, err := io.ReadAll(s)
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("echoed data differs")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*muxConn{client, server} {
		m.mu.Lock()
		open := len(m.streams)
		m.mu.Unlock()
		if open != 0 || m.incoming != 0 {
			t.Errorf("%d streams still held (%d incoming) after all ended", open, m.incoming)
		}
	}
}

// A stream whose reader stalls holds at most its window at the receiver, and another
// stream of the same connection carries its data meanwhile; once read, the stalled
// stream's data arrives whole.
func TestMuxAStalledStreamDoesNotBlockAnother(t *testing.T) {
	client, server := muxPair(t, 10)
	stalledData := random(t, 8*muxStreamWindow)
	stalled, _ := client.OpenStreamSync(context.Background())
	written := make(chan error, 1)
	go func() { // in small writes: frames the receiver packs
		for p := stalledData; len(p) > 0; p = p[min(len(p), 5000):] {
			if _, err := stalled.Write(p[:min(len(p), 5000)]); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	stalledIn := accept(t, server).(*muxStream) // not read until the other stream is done

	data := random(t, 16*muxStreamWindow)
	other, _ := client.OpenStreamSync(context.Background())
	go func() {
		_, _ = other.Write(data)
		_ = other.Close()
	}()
	got, err := io.ReadAll(accept(t, server))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the other stream: %d bytes (error %v), want its %d", len(got), err, len(data))
	}
	stalledIn.mu.Lock()
	buffered, held := stalledIn.buffered, 0
	for _, b := range stalledIn.bufs {
		held += cap(b)
	}
	stalledIn.mu.Unlock()
	if buffered > muxStreamWindow || held > 2*muxStreamWindow+muxMaxFrame {
		t.Errorf("the stalled stream buffers %d bytes in buffers of %d, more than its window of %d (and twice it)", buffered, held, muxStreamWindow)
	}
	select {
	case err := <-written:
		t.Fatalf("the stalled stream's write of %d bytes returned (%v) before its reader read", len(stalledData), err)
	default:
	}
	got, err = io.ReadAll(io.LimitReader(stalledIn, int64(len(stalledData))))
	if err != nil || !bytes.Equal(got, stalledData) {
		t.Fatalf("the stalled stream: %d bytes (error %v), want its %d", len(got), err, len(stalledData))
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
}

// A reset ends the stream both ways: the peer reads what came before it, then an
// error, and its writes fail; both sides forget the stream.
func TestMuxReset(t *testing.T) {
	client, server := muxPair(t, 10)
	s, _ := client.OpenStreamSync(context.Background())
	if _, err := s.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	in := accept(t, server)
	s.CancelRead(streamAborted)
	s.CancelWrite(streamAborted)
	got, err := io.ReadAll(in)
	if string(got) != "before" || !errors.Is(err, errStreamReset) {
		t.Fatalf("read %q, %v; want the bytes before the reset, then the reset", got, err)
	}
	if _, err := in.Write([]byte("after")); !errors.Is(err, errStreamReset) {
		t.Errorf("write after the peer's reset: %v, want the reset", err)
	}
	if _, err := s.Write([]byte("after")); !errors.Is(err, errStreamClosed) {
		t.Errorf("write after a reset: %v, want closed", err)
	}
	for _, m := range []*muxConn{client, server} {
		m.mu.Lock()
		open := len(m.streams)
		m.mu.Unlock()
		if open != 0 {
			t.Errorf("%d streams held after a reset", open)
		}
	}
}

// An abort from another goroutine is not held back by a Write waiting for the peer's
// window (a proxy tearing down both directions while one of them is stuck): the Write
// fails, and the peer reads the data it had, then the reset.
func TestMuxAbortDuringAWriteWaitingForWindow(t *testing.T) {
	client, server := muxPair(t, 10)
	s, _ := client.OpenStreamSync(context.Background())
	written := make(chan error, 1)
	go func() {
		_, err := s.Write(make([]byte, 2*muxStreamWindow)) // the peer reads none of it
		written <- err
	}()
	in := accept(t, server).(*muxStream)
	for { // a whole window arrived: the writer waits for more
		in.mu.Lock()
		full := in.buffered == muxStreamWindow
		in.mu.Unlock()
		if full {
			break
		}
		<-in.readable
	}
	aborted := make(chan struct{})
	go func() {
		s.CancelWrite(streamAborted)
		close(aborted)
	}()
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the abort waited for the peer's window")
	}
	if err := <-written; !errors.Is(err, errStreamClosed) {
		t.Errorf("the waiting write: %v, want closed", err)
	}
	got, err := io.ReadAll(in)
	if len(got) != muxStreamWindow || !errors.Is(err, errStreamReset) {
		t.Errorf("the peer read %d bytes, %v; want its window, then the reset", len(got), err)
	}
}

// A fin ends one direction only: the other still carries data (a half-close).
func TestMuxHalfClose(t *testing.T) {
	client, server := muxPair(t, 10)
	s, _ := client.OpenStreamSync(context.Background())
	_, _ = s.Write([]byte("request"))
	_ = s.Close()
	in := accept(t, server)
	got, err := io.ReadAll(in)
	if string(got) != "request" || err != nil {
		t.Fatalf("read %q, %v", got, err)
	}
	_, _ = in.Write([]byte("response"))
	_ = in.Close()
	got, err = io.ReadAll(s)
	if string(got) != "response" || err != nil {
		t.Fatalf("read %q, %v after the half-close", got, err)
	}
}

// A side that has sent its fin may still abort the stream (its reader gave up, as a
// connector refusing a stream does): the peer reads the data before the fin, and the
// connection goes on.
func TestMuxResetAfterFin(t *testing.T) {
	client, server := muxPair(t, 10)
	s, _ := client.OpenStreamSync(context.Background())
	_, _ = s.Write([]byte("refused"))
	_ = s.Close()
	s.CancelRead(streamAborted)
	in := accept(t, server)
	if got, err := io.ReadAll(in); string(got) != "refused" || err != nil {
		t.Fatalf("read %q, %v; want the data up to the fin", got, err)
	}
	again, _ := client.OpenStreamSync(context.Background())
	_, _ = again.Write([]byte("x"))
	_ = accept(t, server)
	if err := client.Context().Err(); err != nil {
		t.Fatalf("the connection ended: %v", context.Cause(client.Context()))
	}
}

// Past its limit of streams the peer opened, a side resets the new ones; an ended
// stream gives its place back.
func TestMuxStreamLimit(t *testing.T) {
	client, server := muxPair(t, 2)
	var held []tunnelStream
	for range 2 {
		s, _ := client.OpenStreamSync(context.Background())
		_, _ = s.Write([]byte("x"))
		held = append(held, s, accept(t, server))
	}
	over, _ := client.OpenStreamSync(context.Background())
	_, _ = over.Write([]byte("x"))
	if _, err := io.ReadAll(over); !errors.Is(err, errStreamReset) {
		t.Fatalf("a stream past the limit: %v, want a reset", err)
	}
	held[0].CancelWrite(streamAborted) // one ends: its place is free again
	if _, err := io.ReadAll(held[1]); !errors.Is(err, errStreamReset) {
		t.Fatal(err)
	}
	again, _ := client.OpenStreamSync(context.Background())
	_, _ = again.Write([]byte("y"))
	in := accept(t, server)
	b := make([]byte, 1)
	if _, err := io.ReadFull(in, b); err != nil || b[0] != 'y' {
		t.Fatalf("a stream within the limit again: %q, %v", b, err)
	}
}

// A connection closed with a code and a reason ends every stream; the peer sees them
// as QUIC's remote application error.
func TestMuxCloseWithError(t *testing.T) {
	client, server := muxPair(t, 10)
	s, _ := client.OpenStreamSync(context.Background())
	_, _ = s.Write([]byte("x"))
	in := accept(t, server)
	_, _ = in.Read(make([]byte, 1))
	server.CloseWithError(codeRefused, "unknown token")
	var ae *quic.ApplicationError
	if _, err := io.ReadAll(s); !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != codeRefused || ae.ErrorMessage != "unknown token" {
		t.Fatalf("read on the peer of a closed connection: %v, want its code and reason", err)
	}
	if _, err := client.AcceptStream(context.Background()); !errors.As(err, &ae) {
		t.Errorf("accept on the peer of a closed connection: %v", err)
	}
	<-client.Context().Done()
	if _, err := in.Read(make([]byte, 1)); !errors.As(err, &ae) || ae.Remote {
		t.Errorf("read on the closed side: %v, want the local close", err)
	}
}

// A read deadline ends a Read that waits, as a timeout (the control stream's pings).
func TestMuxReadDeadline(t *testing.T) {
	client, server := muxPair(t, 10)
	s, _ := client.OpenStreamSync(context.Background())
	_, _ = s.Write([]byte("x"))
	in := accept(t, server)
	_, _ = in.Read(make([]byte, 1))
	_ = in.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	_, err := in.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
}

// A peer that breaks the framing (data past the window, a reused id, an unknown
// frame) has its connection closed as broken, with the reason.
func TestMuxBrokenPeers(t *testing.T) {
	frame := func(typ, flags byte, id, length uint32, payload []byte) []byte {
		b := []byte{typ, flags}
		b = binary.BigEndian.AppendUint32(b, id)
		b = binary.BigEndian.AppendUint32(b, length)
		return append(b, payload...)
	}
	var pastWindow []byte
	pastWindow = append(pastWindow, frame(muxData, flagOpen, 1, 1, []byte("x"))...)
	for range muxStreamWindow / muxMaxFrame {
		pastWindow = append(pastWindow, frame(muxData, 0, 1, muxMaxFrame, make([]byte, muxMaxFrame))...)
	}
	for name, bad := range map[string][]byte{
		"past the window": pastWindow,
		"a reused id":     append(frame(muxData, flagOpen, 3, 1, []byte("x")), frame(muxData, flagOpen, 3, 0, nil)...),
		"wrong parity":    frame(muxData, flagOpen, 2, 0, nil),
		"unknown type":    frame(9, 0, 1, 0, nil),
		"a huge frame":    frame(muxData, flagOpen, 1, 1<<30, nil),
		"data after fin":  append(frame(muxData, flagOpen|flagFin, 1, 0, nil), frame(muxData, 0, 1, 1, []byte("x"))...),
		"window overflow": append(frame(muxData, flagOpen, 1, 0, nil), frame(muxWindow, 0, 1, muxStreamWindow, nil)...),
	} {
		t.Run(name, func(t *testing.T) {
			raw, conn := tcpPair(t)
			m := newMux(context.Background(), conn, false, alpnV2, 10)
			go func() { _, _ = io.Copy(io.Discard, raw) }()
			go func() { _, _ = raw.Write(bad) }()
			<-m.Context().Done()
			var ae *quic.ApplicationError
			if err := m.closeErr(); !errors.As(err, &ae) || ae.ErrorCode != codeBroken {
				t.Errorf("closed with %v, want broken", err)
			}
		})
	}
}

// FuzzMuxFrames feeds a multiplexer any bytes as its peer's: it must end cleanly or
// keep going, never panic, and buffer no stream past its window.
func FuzzMuxFrames(f *testing.F) {
	hdr := func(typ, flags byte, id, length uint32) []byte {
		b := []byte{typ, flags}
		b = binary.BigEndian.AppendUint32(b, id)
		return binary.BigEndian.AppendUint32(b, length)
	}
	f.Add(append(hdr(muxData, flagOpen, 1, 3), "abc"...))
	f.Add(append(append(hdr(muxData, flagOpen, 1, 0), hdr(muxWindow, 0, 1, 100)...), hdr(muxData, flagRst, 1, 0)...))
	f.Add(append(hdr(muxClose, 0, 0, 10), "\x00\x00\x00\x00\x00\x00\x00\x01hi"...))
	f.Add(append(hdr(muxData, flagOpen|flagFin, 3, 2), "ok"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		m := newMux(context.Background(), b, false, alpnV2, 4)
		go func() { _, _ = io.Copy(io.Discard, a) }()
		go func() {
			for {
				s, err := m.AcceptStream(context.Background())
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(io.Discard, s) }()
			}
		}()
		_, _ = a.Write(data)
		m.mu.Lock()
		for _, s := range m.streams {
			s.mu.Lock()
			if s.buffered > muxStreamWindow {
				t.Errorf("stream %d buffers %d bytes", s.id, s.buffered)
			}
			s.mu.Unlock()
		}
		m.mu.Unlock()
		a.Close()
		<-m.Context().Done()
	})
}

// BenchmarkMuxOneStream is one stream's throughput over loopback TCP (no TLS).
func BenchmarkMuxOneStream(b *testing.B) {
	client, server := muxPair(b, 10)
	buf := make([]byte, 256<<10)
	s, _ := client.OpenStreamSync(context.Background())
	_, _ = s.Write(buf[:1])
	in := accept(b, server)
	_, _ = in.Read(buf[:1])
	done := make(chan struct{})
	go func() {
		defer close(done)
		total := int64(b.N) * int64(len(buf))
		_, _ = io.CopyN(io.Discard, in, total)
	}()
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if _, err := s.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

// firstBytes takes what a client has sent, and returns at once when it has sent
// nothing (a protocol where the server speaks first).
func TestFirstBytes(t *testing.T) {
	client, server := tcpPair(t)
	if got := firstBytes(server); got != nil {
		t.Fatalf("first bytes of a silent client: %q, want none", got)
	}
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	raw, _ := server.(*net.TCPConn).SyscallConn()
	_ = raw.Read(func(fd uintptr) bool { // wait for the bytes to be there
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10000)
		return err == nil
	})
	if got := firstBytes(server); string(got) != "hello" {
		t.Fatalf("first bytes %q, want hello", got)
	}
}

// BenchmarkMuxOneStreamTLS is BenchmarkMuxOneStream over TLS 1.3, as the tunnel runs it.
func BenchmarkMuxOneStreamTLS(b *testing.B) {
	p := newPKI(b)
	cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		b.Fatal(err)
	}
	a, c := tcpPair(b)
	server := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, DynamicRecordSizingDisabled: true})
	client := tls.Client(a, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, DynamicRecordSizingDisabled: true})
	go server.Handshake()
	if err := client.Handshake(); err != nil {
		b.Fatal(err)
	}
	cm := newMux(context.Background(), client, true, alpnV2, 10)
	sm := newMux(context.Background(), server, false, alpnV2, 10)
	defer cm.CloseWithError(codeDone, "")
	defer sm.CloseWithError(codeDone, "")
	buf := make([]byte, 256<<10)
	s, _ := cm.OpenStreamSync(context.Background())
	_, _ = s.Write(buf[:1])
	in := accept(b, sm)
	_, _ = in.Read(buf[:1])
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.CopyN(io.Discard, in, int64(b.N)*int64(len(buf)))
	}()
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if _, err := s.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

// A segment lost on the tunnel's connection stalls every stream of the tunnel until it
// is sent again. The kernel's own floor, 200 ms before a retransmit and doubling with
// each loss of it, stalled a whole tunnel for seconds at 4 000 requests/s on a loaded
// host (tuneLossRecovery). Both ends take a lost segment for lost tcpRTOMin past the
// RTT, and hold an ACK back less than that, so that a late ACK is not taken for a loss.
func TestMuxLossRecoveryTimers(t *testing.T) {
	client, server := muxPair(t, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// round trips, each an RTT sample of both ends: the RTO, at the kernel's floor
	// when the connection opened, comes down to the new one by a quarter per round trip
	var peer tunnelStream
	buf := make([]byte, 4)
	for i := range 40 {
		if _, err := s.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			peer = accept(t, server)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write([]byte("pong")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
	}
	for _, end := range []struct {
		name string
		m    *muxConn
	}{{"dialling end", client}, {"listening end", server}} {
		tcp, _ := tcpConn(end.m.conn)
		raw, err := tcp.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var rto time.Duration
		var rtoMin, delackMax int
		var infoErr, minErr, delackErr error
		_ = raw.Control(func(fd uintptr) {
			var info *unix.TCPInfo
			if info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO); infoErr == nil {
				rto = time.Duration(info.Rto) * time.Microsecond
			}
			rtoMin, minErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US)
			delackMax, delackErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DELACK_MAX_US)
		})
		if errors.Is(minErr, unix.ENOPROTOOPT) || errors.Is(delackErr, unix.ENOPROTOOPT) {
			testenv.Missing(t, "a kernel with TCP_RTO_MIN_US and TCP_DELACK_MAX_US (Linux 6.15)")
		}
		if infoErr != nil || minErr != nil || delackErr != nil {
			t.Fatal(infoErr, minErr, delackErr)
		}
		if rto >= 200*time.Millisecond {
			t.Errorf("%s: RTO %v after 40 round trips on loopback: the kernel's floor of 200 ms", end.name, rto)
		}
		if delackMax >= rtoMin {
			t.Errorf("%s: an ACK held back up to %d µs, the RTO's floor %d µs: a late ACK would be taken for a loss", end.name, delackMax, rtoMin)
		}
	}
}
