package tunnel

// The client's first bytes travel with the stream's header (protocol version 2):
// the connector writes them to the origin as soon as it has connected, so that a
// client that speaks first (HTTP, TLS) does not wait for the connector's answer and a
// round trip more before its request leaves the edge. The edge keeps them until the
// answer, to send them again to another connector if the first one fails.

import "net"

// firstBytes reads into a multiplexer's frame buffer: it must hold maxInitialData.
var _ [muxMaxFrame - maxInitialData]struct{}

// firstBytes returns what the client has sent already, at most maxInitialData, without
// waiting: a client that waits for the server to speak first (SSH, SMTP) has sent
// nothing, and its stream opens at once. A connection that is not TCP gives nothing.
func firstBytes(client net.Conn) []byte {
	tcp, ok := tcpConn(client)
	if !ok {
		return nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return nil
	}
	buf := muxBuffers.Get().(*[]byte) // maxInitialData bytes
	defer muxBuffers.Put(buf)
	n := 0
	_ = raw.Read(func(fd uintptr) bool {
		n, err = recvNow(fd, (*buf)[:maxInitialData])
		return true // done, whatever came: never wait in the poller
	})
	if err != nil || n <= 0 {
		return nil
	}
	return append([]byte(nil), (*buf)[:n]...)
}
