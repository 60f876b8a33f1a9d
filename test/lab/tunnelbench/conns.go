package main

// New connections per second through a tunnel, and what idle client connections and
// idle tunnels cost in memory.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifoldlb/manifold/test/lab"
)

const (
	metricConns         = "new conns/s"
	metricIdleConnKiB   = "KiB per idle client conn"
	metricTunnelEdgeKiB = "KiB per idle tunnel, server"
	metricTunnelConnKiB = "KiB per idle tunnel, client"

	// connWorkers open connections back to back (a closed loop: the figure is the
	// rate the tunnel sustains, not an offered one)
	connWorkers = 16
	idleConns   = 1000
	idleTunnels = 10
)

// request is one HTTP/1.1 GET; the origin answers "hello, world\n" (13 bytes).
const request = "GET / HTTP/1.1\r\nHost: bench\r\n\r\n"

// connsPerSecond opens connections to port for d, each carrying one request and its
// answer, then closed; it returns the rate of completed ones and how many failed.
func connsPerSecond(ctx context.Context, port int, d time.Duration) (float64, int64) {
	var done, failed atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range connWorkers {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := oneRequest(port, nil); err != nil {
					failed.Add(1)
					continue
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds(), failed.Load()
}

// oneRequest opens a connection to port and does one request on it; keep, when not
// nil, gets the connection open (idle) instead of its close.
func oneRequest(port int, keep func(net.Conn)) error {
	c, err := net.DialTimeout("tcp", loop(port), clientTimeout)
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(clientTimeout))
	if _, err := c.Write([]byte(request)); err != nil {
		c.Close()
		return err
	}
	r := bufio.NewReader(c)
	length := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			c.Close()
			return err
		}
		if line == "\r\n" {
			break
		}
		if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length:"); ok {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if length < 0 {
		c.Close()
		return fmt.Errorf("an answer without its length")
	}
	if _, err := io.CopyN(io.Discard, r, int64(length)); err != nil {
		c.Close()
		return err
	}
	if keep == nil {
		return c.Close()
	}
	_ = c.SetDeadline(time.Time{})
	keep(c)
	return nil
}

// idleConnMemory opens n connections through the tool, one request each, and leaves
// them idle: the growth of its processes' resident memory per connection, in KiB.
func idleConnMemory(t *tool, n int) (float64, error) {
	before, err := rssKiB(t.processes...)
	if err != nil {
		return 0, err
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		if err := oneRequest(t.http, func(c net.Conn) { conns = append(conns, c) }); err != nil {
			return 0, err
		}
	}
	after, err := rssKiB(t.processes...)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

// idleTunnelMemory starts n more clients of the tool (each its own idle tunnel) and
// waits for each to say its tunnel is up: the growth of the server's resident memory
// per tunnel, and a client process's own, in KiB.
func idleTunnelMemory(dir string, t *tool, n int) (server, client float64, err error) {
	before, err := rssKiB(t.processes[0])
	if err != nil {
		return 0, 0, err
	}
	var clients []*exec.Cmd
	defer func() {
		for _, c := range clients {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	var logs []string
	for i := range n {
		c, log, err := t.idleTunnel(dir, i)
		if err != nil {
			return 0, 0, err
		}
		clients = append(clients, c)
		logs = append(logs, log)
	}
	for _, log := range logs {
		err := lab.Eventually(30*time.Second, 50*time.Millisecond, func() error {
			b, _ := os.ReadFile(log)
			if !strings.Contains(string(b), t.tunnelUp) {
				return fmt.Errorf("%s: no %q yet", log, t.tunnelUp)
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
	}
	after, err := rssKiB(t.processes[0])
	if err != nil {
		return 0, 0, err
	}
	clientsKiB, err := rssKiB(clients...)
	if err != nil {
		return 0, 0, err
	}
	return float64(after-before) / float64(n), float64(clientsKiB) / float64(n), nil
}

// rssKiB is the resident memory of the processes, added up (VmRSS).
func rssKiB(processes ...*exec.Cmd) (int64, error) {
	var total int64
	for _, p := range processes {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Process.Pid))
		if err != nil {
			return 0, err
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return 0, err
				}
				total += kib
			}
		}
	}
	return total, nil
}
