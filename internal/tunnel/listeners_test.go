package tunnel

// The bounds of the edge's listeners against clients that do not play along: out of
// descriptors, idle connections, many connections from one address, silent QUIC peers.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

const emfileChildEnv = "TUNNEL_TEST_EMFILE_CHILD"

// A service goes on accepting after its process ran out of file descriptors: the
// accept error (EMFILE) is waited out, not the end of the service. The descriptors
// run out for real, in a child process (this test in the test binary again) whose
// limit the test lowers, so that the other tests keep theirs.
func TestAServiceOutlivesRunningOutOfDescriptors(t *testing.T) {
	if os.Getenv(emfileChildEnv) == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := hostprog.CommandContext(ctx, hostprog.Built(os.Args[0]), "-test.run=^"+t.Name()+"$", "-test.v")
		cmd.Env = append(os.Environ(), emfileChildEnv+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("in the child process: %v\n%s", err, out)
		}
		return
	}
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	o := startOrigin(t, "a")
	startConnector(t, e.connectorFile(t, "a", tokenWeb, web(o)))
	waitFor(t, &e.notifier, 5*time.Second, "connector a attached", func() bool { _, ok := e.tunnelOf("a"); return ok })
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &acceptErrors{Listener: raw, errs: make(chan error, 1)}

	// The client's connection waits in the backlog, nothing accepts it yet; then no
	// descriptor is left for the accept.
	client, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	release := exhaustDescriptors(t)
	ctx, cancel := context.WithCancel(context.Background())
	var serveErr error
	stopped := make(chan struct{})
	go func() { serveErr = e.Serve(ctx, "web", ln); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	select {
	case err := <-ln.errs:
		if !errors.Is(err, syscall.EMFILE) {
			release()
			t.Fatalf("accept failed with %v, want EMFILE", err)
		}
	case <-stopped:
		release()
		t.Fatalf("Serve returned before an accept failed: %v", serveErr)
	}
	release()

	answer := make(chan string, 1)
	go func() {
		_ = client.SetDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.WriteString(client, "GET / HTTP/1.0\r\n\r\n")
		body, err := io.ReadAll(bufio.NewReader(client))
		if err != nil {
			answer <- "error: " + err.Error()
			return
		}
		answer <- string(body)
	}()
	select {
	case <-stopped:
		t.Fatalf("the service stopped at EMFILE: %v", serveErr)
	case got := <-answer:
		if !strings.Contains(got, "hello from a") {
			t.Fatalf("the connection waiting through EMFILE got %q, want the origin's answer", got)
		}
	}
}

// acceptErrors passes on its listener's accepts, and the first error one returns.
type acceptErrors struct {
	net.Listener
	errs chan error
}

func (l *acceptErrors) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		select {
		case l.errs <- err:
		default:
		}
	}
	return c, err
}

// exhaustDescriptors lowers the process's limit of open files a little above the
// descriptors it has and opens files until none is left; release closes them.
func exhaustDescriptors(t *testing.T) (release func()) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	highest := 0
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			highest = max(highest, fd)
		}
	}
	lowered := limit
	lowered.Cur = uint64(highest + 64)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return func() {
		for _, f := range files {
			f.Close()
		}
		files = nil
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit)
	}
}
