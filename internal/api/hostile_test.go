package api_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/manifoldlb/manifold/internal/api"
)

// syncBuffer is a log sink the server's goroutines write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logTo makes the env's server log to a buffer, at every level.
func (e *env) logTo() *syncBuffer {
	buf := &syncBuffer{}
	e.srv.Log = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.http.Config.Handler = e.srv.Handler()
	return buf
}

func (e *env) raw(method, path string) int {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Invented methods are counted as OTHER: the request counter (manifold_api_requests_total)
// has as many series as there are methods of HTTP and status codes, however many
// methods clients send.
func TestInventedMethodsAreBounded(t *testing.T) {
	e := newEnv(t, nil, true)
	logs := e.logTo()
	for i := range 5000 {
		e.raw(fmt.Sprintf("M%04d", i), "/api/v1/status")
	}
	// (answers this small leave after the handler, its count included, returned)
	e.raw(http.MethodGet, "/api/v1/services/nope")
	reqs := e.srv.Requests()
	if len(reqs) > 4 {
		t.Fatalf("%d request series after 5 000 invented methods, want a few: %v", len(reqs), keysOf(reqs))
	}
	if n := reqs[api.RequestKey{Method: "OTHER", Code: http.StatusMethodNotAllowed}]; n != 5000 {
		t.Errorf("OTHER 405 counted %d times, want 5000: %v", n, keysOf(reqs))
	}
	if n := reqs[api.RequestKey{Method: "GET", Code: http.StatusNotFound}]; n != 1 {
		t.Errorf("GET 404 counted %d times, want 1: %v", n, reqs)
	}
	if lines := strings.Count(logs.String(), "\n"); lines >= 5000 {
		t.Errorf("%d log lines for 5 000 refused requests: not rate-limited", lines)
	}
}

// A 500 KiB method is neither kept (the counter's key) nor logged whole.
func TestHugeMethodsAreBounded(t *testing.T) {
	e := newEnv(t, nil, true)
	logs := e.logTo()
	huge := strings.Repeat("X", 500<<10)
	for range 200 {
		if code := e.raw(huge, "/api/v1/status"); code != http.StatusMethodNotAllowed {
			t.Fatalf("a 500 KiB method: %d, want 405", code)
		}
	}
	kept := 0
	for k := range e.srv.Requests() {
		kept += len(k.Method)
	}
	if kept > 64 {
		t.Errorf("the request counter keeps %d bytes of method names after 200 requests of 500 KiB methods", kept)
	}
	out := logs.String()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if len(line) > 1024 {
			t.Fatalf("a log line of %d bytes: the method is not clipped: %.200s…", len(line), line)
		}
	}
	if lines := strings.Count(out, "\n"); lines >= 200 {
		t.Errorf("%d log lines for 200 refused requests: not rate-limited", lines)
	}
}

func keysOf(m map[api.RequestKey]uint64) []api.RequestKey {
	var out []api.RequestKey
	for k := range m {
		out = append(out, k)
		if len(out) == 10 {
			break
		}
	}
	return out
}
