package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// BenchmarkMuxRoundTripLossy is a request and its answer (100 bytes each way) over one
// multiplexed connection on a loopback that drops 1 % of TCP packets at random (a
// namespace's nftables): with the kernel's loss-recovery timers (a 200 ms floor), and
// with the tunnel's (tuneLossRecovery) — every stream of a tunnel waits for a lost
// segment, so its retransmit timer is the tunnel's latency under loss. Read the two
// ns/op and p99s as a ratio, taken in the same run.
func BenchmarkMuxRoundTripLossy(b *testing.B) {
	testenv.NeedRoot(b, "a network namespace whose nftables drops packets")
	testenv.Need(b, hostprog.Check(hostprog.IP, hostprog.Nft))
	name := fmt.Sprintf("muxloss%d", os.Getpid())
	if out, err := hostprog.Command(hostprog.IP, "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v: %s", err, out)
	}
	b.Cleanup(func() { _ = hostprog.Command(hostprog.IP, "netns", "del", name).Run() })
	ctx := context.Background()
	if out, err := hostprog.InNetns(ctx, name, hostprog.IP, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		b.Fatalf("lo up: %v: %s", err, out)
	}
	nft := hostprog.InNetns(ctx, name, hostprog.Nft, "-f", "-")
	nft.Stdin = strings.NewReader("table inet loss {\n chain out {\n  type filter hook output priority 0;\n" +
		"  meta l4proto tcp numgen random mod 100 < 1 drop\n }\n}\n")
	if out, err := nft.CombinedOutput(); err != nil {
		b.Fatalf("nft: %v: %s", err, out)
	}
	ns, err := netns.GetFromName(name)
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	for _, tuned := range []bool{false, true} {
		label := "kernel"
		if tuned {
			label = "tunnel"
		}
		b.Run(label, func(b *testing.B) {
			a, c := tcpPairIn(b, ns)
			client := newMux(ctx, a, true, alpnV2, 16)
			server := newMux(ctx, c, false, alpnV2, 16)
			defer client.CloseWithError(codeDone, "")
			defer server.CloseWithError(codeDone, "")
			if !tuned { // as the kernel has them
				for _, m := range []*muxConn{client, server} {
					tcp, _ := tcpConn(m.conn)
					raw, _ := tcp.SyscallConn()
					_ = raw.Control(func(fd uintptr) {
						_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US, 200_000)
						_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DELACK_MAX_US, 200_000)
						_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_THIN_LINEAR_TIMEOUTS, 0)
					})
				}
			}
			s, err := client.OpenStreamSync(ctx)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 100)
			roundTrip := func(peer tunnelStream) tunnelStream {
				if _, err := s.Write(buf); err != nil {
					b.Fatal(err)
				}
				if peer == nil {
					peer = accept(b, server)
				}
				if _, err := io.ReadFull(peer, buf); err != nil {
					b.Fatal(err)
				}
				if _, err := peer.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(s, buf); err != nil {
					b.Fatal(err)
				}
				return peer
			}
			peer := roundTrip(nil)
			latencies := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				roundTrip(peer)
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)*99/100])/float64(time.Millisecond), "p99-ms")
		})
	}
}

// tcpPairIn is tcpPair on the loopback of the namespace ns.
func tcpPairIn(b *testing.B, ns netns.NsHandle) (net.Conn, net.Conn) {
	type pair struct {
		a, c net.Conn
		err  error
	}
	done := make(chan pair, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(ns); err != nil {
			done <- pair{err: err}
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			done <- pair{err: err}
			return
		}
		defer ln.Close()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			done <- pair{err: err}
			return
		}
		c, err := ln.Accept()
		done <- pair{a, c, err}
	}()
	p := <-done
	if p.err != nil {
		b.Fatal(p.err)
	}
	b.Cleanup(func() { p.a.Close(); p.c.Close() })
	return p.a, p.c
}
