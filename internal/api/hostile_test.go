package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/api/wire"
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

// The write that changed a weight at de322de — a text/plain body (a browser sends
// one to any site without asking), from another site, for a name rebound to the node
// (DNS rebinding) — is refused on a node without a token, and so is each of its
// parts alone; the file stays as it was.
func TestCrossSiteWritesAreRefused(t *testing.T) {
	e := newEnv(t, nil, true)
	e.srv.Token = ""
	weight := "/api/v1/services/web/backends/10.0.1.2/weight"
	send := func(h map[string]string, body string, chunked bool) (int, wire.Error) {
		t.Helper()
		var r io.Reader = strings.NewReader(body)
		if chunked {
			r = struct{ io.Reader }{r} // of unknown length: sent chunked
		}
		req, err := http.NewRequest("POST", e.http.URL+weight, r)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb wire.Error
		json.NewDecoder(resp.Body).Decode(&eb)
		return resp.StatusCode, eb
	}
	before := e.file()
	for _, c := range []struct {
		name  string
		h     map[string]string
		code  int
		field string
	}{
		{"the attack of the finding", map[string]string{"Content-Type": "text/plain", "Origin": "evil", "Host": "rebind.evil"}, 421, "Host"},
		{"another Host", map[string]string{"Content-Type": "application/json", "Host": "rebind.evil"}, 421, "Host"},
		{"another Host with the API's port", map[string]string{"Content-Type": "application/json", "Host": "rebind.evil:" + e.port()}, 421, "Host"},
		{"another Origin", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403, "Origin"},
		{"an Origin of the API's name on another port", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"}, 403, "Origin"},
		{"a cross-site fetch", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403, "Origin"},
		{"a text/plain body", map[string]string{"Content-Type": "text/plain"}, 415, "Content-Type"},
		{"a form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "Content-Type"},
		{"no content type", map[string]string{}, 415, "Content-Type"},
	} {
		code, eb := send(c.h, `{"weight": 9}`, false)
		if code != c.code || eb.Status != c.code || eb.Field != c.field || eb.Message == "" {
			t.Errorf("%s: %d %+v, want %d on field %s", c.name, code, eb, c.code, c.field)
		}
	}
	if code, _ := send(map[string]string{"Content-Type": "text/plain"}, `{"weight": 9}`, true); code != 415 {
		t.Errorf("a chunked text/plain body: %d, want 415", code)
	}
	if e.file() != before {
		t.Fatalf("refused writes changed the file:\n%s", e.file())
	}

	// what is the API's own passes: JSON from a program, from the API's own page
	// (its Origin), for a name of node.api_hosts; an empty body needs no type
	e.srv.Hosts = []string{"lb1.example"}
	e.http.Config.Handler = e.srv.Handler()
	for _, h := range []map[string]string{
		{"Content-Type": "application/json"},
		{"Content-Type": "application/json; charset=utf-8", "Origin": e.http.URL, "Sec-Fetch-Site": "same-origin"},
		{"Content-Type": "application/json", "Host": "LB1.example:" + e.port()},
		{"Content-Type": "application/json", "Host": "localhost:" + e.port(), "Origin": "http://localhost:" + e.port()},
		{"Content-Type": "application/json", "Host": "[::1]:" + e.port()},
	} {
		if code, eb := send(h, `{"weight": 9}`, false); code != 200 {
			t.Errorf("%v: %d %+v, want 200", h, code, eb)
		}
	}
	drain := func(chunked bool) int {
		req, _ := http.NewRequest("POST", e.http.URL+"/api/v1/services/web/backends/10.0.1.2/drain", nil)
		if chunked {
			req.Body, req.ContentLength = io.NopCloser(strings.NewReader("")), -1
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := drain(false); code != 200 {
		t.Errorf("a drain without a body: %d, want 200", code)
	}
	if code := drain(true); code != 200 {
		t.Errorf("a drain with an empty chunked body: %d, want 200", code)
	}
}

func (e *env) port() string {
	_, port, _ := net.SplitHostPort(e.http.Listener.Addr().String())
	return port
}
