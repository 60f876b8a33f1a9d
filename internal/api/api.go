// Package api is the node's REST API: JSON over HTTP on node.api, described by the
// OpenAPI 3 document beside it (openapi.json, served at /api/v1/openapi.json).
//
//	request ─► auth (bearer token for writes; for reads too off loopback)
//	        ─► read:  Node snapshot ─► JSON
//	        ─► write: Node.Change(edit) ── on the node's run loop ──► store edit (validate)
//	                                        ─► Commit (file, fsync) ─► data plane ─► JSON
//
// Every error is an Error body with the field at fault; a refused write changes
// nothing. Handlers hold no state of their own but request counts.
package api

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/decode"
	"github.com/manifoldlb/manifold/internal/ratelog"
	"github.com/manifoldlb/manifold/internal/store"
)

// OpenAPI is the API's OpenAPI 3 document.
//
//go:embed openapi.json
var OpenAPI []byte

// maxBody bounds a request body (decode.JSON refuses more in any case).
const maxBody = decode.MaxBodySize

// Node is what the API needs of the daemon.
type Node interface {
	// Status, Services and Service are the node's current state.
	Status() wire.Status
	Services() []wire.ServiceStatus
	Service(name string) (wire.ServiceStatus, bool)
	// Change runs edit on the node's run loop. When edit returns a change, the node
	// commits it (persisted) and applies it to the data plane, reverting the file
	// when the kernel refuses; on any error nothing changed. It fails with the
	// context's error when the node is stopping.
	Change(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error
	// ChangeOwn is Change on the node's own config file, whatever the source of its
	// services: its bgp section lives there on a node of a fleet too.
	ChangeOwn(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error
	// Fleet is every node of the node's fleet: ErrNoFleet without a fleet section, a
	// store.Error of kind Unreachable when the store cannot be read.
	Fleet(ctx context.Context) (wire.FleetStatus, error)
}

// ErrNoFleet is Node.Fleet's error on a node whose services are in its config file.
var ErrNoFleet = errors.New("this node has no fleet section: its services are in its config file")

// ErrNoSuchService is the error of Server.Flows for a service the node does not have.
var ErrNoSuchService = errors.New("no such service")

// Server serves the API.
type Server struct {
	Node    Node
	Store   *store.Store // the config file: GET /api/v1/config
	Metrics http.Handler // GET /metrics
	// Steering is the global steering shares the node has read from its fleet's store
	// (GET /api/v1/steering); nil on a node without a fleet.
	Steering func() wire.SteeringStatus
	// Tunnels is the node's tunnel edge (GET /api/v1/tunnels); nil on a node without a
	// tunnels section.
	Tunnels func() wire.TunnelsStatus
	// Flows lists the node's flow table (GET /api/v1/flows): up to limit entries, of
	// one service or ("") of all; ErrNoSuchService for a service the node does not
	// have. nil: the answer is 404.
	Flows func(service string, limit int) (wire.FlowsView, error)
	// Token, when set, is required as "Authorization: Bearer TOKEN" by writes, and by
	// reads too unless OpenReads (the API listens on loopback only).
	Token     string
	OpenReads bool
	// Hosts are the names the API answers to besides IP literals and localhost
	// (node.api_hosts, and the names of its certificate): a request for any other Host
	// is refused, so that a web page whose name was rebound to the node's address
	// (DNS rebinding) gets nothing from it.
	Hosts []string
	Log   *slog.Logger

	mu       sync.Mutex
	requests map[RequestKey]uint64
	history  history // the status page's plots (RecordHistory)
}

// RequestKey counts requests, for manifold_api_requests_total.
type RequestKey struct {
	Method string // MethodLabel's
	Code   int
}

// Info describes the config file the node runs.
func Info(s *store.Store) wire.ConfigInfo {
	return wire.ConfigInfo{File: s.Path(), Revision: s.Revision(), InSync: s.InSync()}
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	read := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.guard(false, h)) }
	write := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.guard(true, h)) }

	read("GET /{$}", s.statusPage)
	read("GET /api/v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPI)
	})
	read("GET /api/v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Node.Status())
	})
	read("GET /api/v1/services", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Node.Services())
	})
	read("GET /api/v1/services/{name}", func(w http.ResponseWriter, r *http.Request) {
		s.writeService(w, http.StatusOK, r.PathValue("name"))
	})
	read("GET /api/v1/config", func(w http.ResponseWriter, r *http.Request) {
		y, err := s.Store.Redacted()
		if err != nil {
			writeError(w, http.StatusInternalServerError, store.Problem{Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, wire.ConfigView{ConfigInfo: Info(s.Store), YAML: string(y)})
	})
	read("GET /api/v1/fleet", func(w http.ResponseWriter, r *http.Request) {
		f, err := s.Node.Fleet(r.Context())
		var se *store.Error
		switch {
		case errors.Is(err, ErrNoFleet):
			writeError(w, http.StatusNotFound, store.Problem{Message: err.Error()})
		case errors.As(err, &se):
			s.fail(w, r, err)
		case err != nil:
			writeError(w, http.StatusInternalServerError, store.Problem{Message: err.Error()})
		default:
			writeJSON(w, http.StatusOK, f)
		}
	})
	read("GET /api/v1/steering", func(w http.ResponseWriter, r *http.Request) {
		if s.Steering == nil {
			writeError(w, http.StatusNotFound, store.Problem{Message: ErrNoFleet.Error() + ": no steering"})
			return
		}
		writeJSON(w, http.StatusOK, s.Steering())
	})
	read("GET /api/v1/tunnels", func(w http.ResponseWriter, r *http.Request) {
		if s.Tunnels == nil {
			writeError(w, http.StatusNotFound, store.Problem{Message: "this node has no tunnels section: it is no tunnel edge"})
			return
		}
		writeJSON(w, http.StatusOK, s.Tunnels())
	})
	read("GET /api/v1/flows", func(w http.ResponseWriter, r *http.Request) {
		limit := wire.DefaultFlowLimit
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > wire.MaxFlowLimit {
				writeError(w, http.StatusBadRequest, store.Problem{Field: "limit",
					Message: fmt.Sprintf("limit %q: must be a whole number 1..%d", v, wire.MaxFlowLimit)})
				return
			}
			limit = n
		}
		if s.Flows == nil {
			writeError(w, http.StatusNotFound, store.Problem{Message: "this node has no data plane to list"})
			return
		}
		service := r.URL.Query().Get("service")
		v, err := s.Flows(service, limit)
		switch {
		case errors.Is(err, ErrNoSuchService):
			writeError(w, http.StatusNotFound, store.Problem{Field: "service", Message: fmt.Sprintf("no service %q", service)})
		case err != nil:
			writeError(w, http.StatusInternalServerError, store.Problem{Message: err.Error()})
		default:
			writeJSON(w, http.StatusOK, v)
		}
	})
	if s.Metrics != nil {
		read("GET /metrics", s.Metrics.ServeHTTP)
	}

	// change is how a write of the object key reaches the node: Change for the
	// services, ChangeOwn for the node's own bgp section.
	type change func(ctx context.Context, key string, edit func(*store.Store) (*store.Change, error)) error
	// a service write edits that service alone: the fleet edits it beside the services
	// it keeps instead of composing them all (store.ForService)
	services := func(ctx context.Context, name string, edit func(*store.Store) (*store.Change, error)) error {
		return s.Node.Change(store.ForService(ctx, name), edit)
	}
	own := func(ctx context.Context, _ string, edit func(*store.Store) (*store.Change, error)) error {
		return s.Node.ChangeOwn(ctx, edit)
	}
	// put answers a PUT: 201 with respond's body when the edit created the object, else 200.
	put := func(pattern string, via change, edit func(st *store.Store, key string, body []byte) (*store.Change, error),
		respond func(w http.ResponseWriter, code int, key string)) {
		write(pattern, func(w http.ResponseWriter, r *http.Request) {
			key := r.PathValue("key")
			body, ok := readBody(w, r)
			if !ok {
				return
			}
			var created bool
			err := via(r.Context(), key, func(st *store.Store) (*store.Change, error) {
				ch, err := edit(st, key, body)
				created = err == nil && ch.Created
				return ch, err
			})
			if s.fail(w, r, err) {
				return
			}
			code := http.StatusOK
			if created {
				code = http.StatusCreated
			}
			respond(w, code, key)
		})
	}
	del := func(pattern string, via change, edit func(st *store.Store, key string) (*store.Change, error)) {
		write(pattern, func(w http.ResponseWriter, r *http.Request) {
			key := r.PathValue("key")
			err := via(r.Context(), key, func(st *store.Store) (*store.Change, error) { return edit(st, key) })
			if !s.fail(w, r, err) {
				w.WriteHeader(http.StatusNoContent)
			}
		})
	}
	put("PUT /api/v1/services/{key}", services, (*store.Store).PutService, s.writeService)
	del("DELETE /api/v1/services/{key}", services, (*store.Store).DeleteService)
	put("PUT /api/v1/bgp/peers/{key}", own, (*store.Store).PutPeer, func(w http.ResponseWriter, code int, _ string) {
		writeJSON(w, code, s.Node.Status().BGP)
	})
	del("DELETE /api/v1/bgp/peers/{key}", own, (*store.Store).DeletePeer)
	backendAction := func(action string, edit func(st *store.Store, service, backend string, body []byte) (*store.Change, error)) {
		write("POST /api/v1/services/{name}/backends/{address}/"+action, func(w http.ResponseWriter, r *http.Request) {
			name, addr := r.PathValue("name"), r.PathValue("address")
			body, ok := readBody(w, r)
			if !ok {
				return
			}
			err := services(r.Context(), name, func(st *store.Store) (*store.Change, error) { return edit(st, name, addr, body) })
			if !s.fail(w, r, err) {
				s.writeService(w, http.StatusOK, name)
			}
		})
	}
	backendAction("drain", func(st *store.Store, svc, be string, _ []byte) (*store.Change, error) { return st.Drain(svc, be) })
	backendAction("undrain", func(st *store.Store, svc, be string, _ []byte) (*store.Change, error) { return st.Undrain(svc, be) })
	backendAction("weight", func(st *store.Store, svc, be string, body []byte) (*store.Change, error) {
		return st.SetWeight(svc, be, body)
	})

	return s.observe(s.checkHost(jsonErrors(mux)))
}

// checkHost refuses (421) a request whose Host is neither an IP literal, nor
// localhost, nor one of s.Hosts. A request without a Host (HTTP/1.0) names no other
// site and passes.
func (s *Server) checkHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if _, err := netip.ParseAddr(host); err == nil || host == "" || strings.EqualFold(host, "localhost") ||
			slices.ContainsFunc(s.Hosts, func(n string) bool { return strings.EqualFold(n, host) }) {
			h.ServeHTTP(w, r)
			return
		}
		writeError(w, http.StatusMisdirectedRequest, store.Problem{Field: "Host", Message: fmt.Sprintf(
			"this API does not answer to the name %q: use its IP address or localhost, or list the name in node.api_hosts", ratelog.Clip(host, maxLoggedPath))})
	})
}

// crossOrigin tells the writes a browser sends from another site (Sec-Fetch-Site, or
// an Origin other than the Host asked for) from the node's own and from programs.
var crossOrigin = http.NewCrossOriginProtection()

// guard enforces, on writes, that the request comes from no other site (403) and that
// its body is JSON (415); and the token: 401 when none is given, 403 when it is wrong.
func (s *Server) guard(write bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if write && crossOrigin.Check(r) != nil {
			writeError(w, http.StatusForbidden, store.Problem{Field: "Origin", Message: fmt.Sprintf(
				"a write from another site (Origin %q, Sec-Fetch-Site %q) is refused: the API takes writes from programs and its own page only",
				ratelog.Clip(r.Header.Get("Origin"), maxLoggedPath), ratelog.Clip(r.Header.Get("Sec-Fetch-Site"), maxLoggedMethod))})
			return
		}
		if s.Token != "" && (write || !s.OpenReads) {
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || token == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="manifold"`)
				writeError(w, http.StatusUnauthorized, store.Problem{Field: "Authorization", Message: "this request needs the API token: Authorization: Bearer TOKEN"})
				return
			}
			if subtle.ConstantTimeCompare([]byte(token), []byte(s.Token)) != 1 {
				writeError(w, http.StatusForbidden, store.Problem{Field: "Authorization", Message: "wrong API token"})
				return
			}
		}
		if write && !jsonBody(r) {
			writeError(w, http.StatusUnsupportedMediaType, store.Problem{Field: "Content-Type", Message: fmt.Sprintf(
				"a request body must be JSON, sent with Content-Type: application/json (this one is %q)", ratelog.Clip(r.Header.Get("Content-Type"), maxLoggedPath))})
			return
		}
		h(w, r)
	})
}

// jsonBody reports whether r's body is JSON or empty. A body of unknown length
// (chunked) is read one byte ahead to tell; it is refused unless empty, so the byte
// is no loss.
func jsonBody(r *http.Request) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == "application/json" {
		return true
	}
	switch {
	case r.ContentLength == 0:
		return true
	case r.ContentLength > 0:
		return false
	}
	if n, err := r.Body.Read(make([]byte, 1)); n == 0 && err == io.EOF {
		r.Body = http.NoBody
		return true
	}
	return false
}

// readBody reads a request body of at most maxBody bytes; an empty body reads as {}.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, store.Problem{Message: fmt.Sprintf("the body is larger than %d bytes", maxBody)})
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, store.Problem{Message: "cannot read the body: " + err.Error()})
		return nil, false
	case len(strings.TrimSpace(string(b))) == 0:
		return []byte("{}"), true
	}
	return b, true
}

// fail writes the response of a failed change and reports whether there was one. A
// change that was made with a warning (store.Committed) did not fail: the warning goes
// in a Warning header, as Kubernetes' API server sends its warnings, and the caller
// answers as for any success.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		return false
	}
	var se *store.Error
	var made *store.Committed
	switch {
	case errors.As(err, &made):
		w.Header().Add("Warning", wire.WarningHeader(made.Warning))
		return false
	case errors.As(err, &se):
		code := map[store.Kind]int{
			store.Invalid:     http.StatusBadRequest,
			store.NotFound:    http.StatusNotFound,
			store.Conflict:    http.StatusConflict,
			store.Unreachable: http.StatusServiceUnavailable,
		}[se.Kind]
		if code == 0 {
			code = http.StatusInternalServerError
		}
		writeError(w, code, se.Problems...)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, store.Problem{Message: "the node is stopping; nothing was changed"})
	default:
		writeError(w, http.StatusInternalServerError, store.Problem{Message: err.Error()})
	}
	if note, ok := r.Context().Value(noteKey{}).(*note); ok {
		note.err = err.Error()
	}
	return true
}

func (s *Server) writeService(w http.ResponseWriter, code int, name string) {
	svc, ok := s.Node.Service(name)
	if !ok {
		writeError(w, http.StatusNotFound, store.Problem{Field: "name", Message: fmt.Sprintf("no service %q", name)})
		return
	}
	writeJSON(w, code, svc)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, problems ...store.Problem) {
	if len(problems) == 0 {
		problems = []store.Problem{{Message: http.StatusText(code)}}
	}
	out := wire.Error{Status: code, Field: problems[0].Field, Message: problems[0].Message, Problems: make([]wire.Problem, len(problems))}
	for i, p := range problems {
		out.Problems[i] = wire.Problem(p)
	}
	writeJSON(w, code, out)
}

// jsonErrors answers requests no route takes (404, 405) with an Error body too.
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// the mux's own answer says which (404 or 405, with Allow)
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		method, path := ratelog.Clip(r.Method, maxLoggedMethod), ratelog.Clip(r.URL.Path, maxLoggedPath)
		msg := fmt.Sprintf("no such endpoint: %s %s (see /api/v1/openapi.json)", method, path)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
			msg = fmt.Sprintf("%s is not allowed on %s (allowed: %s)", method, path, allow)
		}
		writeError(w, rec.code, store.Problem{Message: msg})
	})
}

// observe counts requests and logs each one on one line: writes at info, refusals at
// warn (with why, at a bounded rate: clients cause them), reads at debug, server errors
// at error. Neither headers nor bodies are logged (they may carry the token); the
// method and path a client sent are clipped.
func (s *Server) observe(h http.Handler) http.Handler {
	refusals := ratelog.New(s.Log, clock.Real(), time.Second, 10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		n := &note{}
		h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), noteKey{}, n)))
		s.mu.Lock()
		if s.requests == nil {
			s.requests = map[RequestKey]uint64{}
		}
		s.requests[RequestKey{MethodLabel(r.Method), sw.code}]++
		s.mu.Unlock()
		attrs := []any{"method", ratelog.Clip(r.Method, maxLoggedMethod), "path", ratelog.Clip(r.URL.Path, maxLoggedPath), "status", sw.code,
			"duration", time.Since(start).Round(time.Microsecond), "remote", r.RemoteAddr}
		if n.err != "" {
			attrs = append(attrs, "err", n.err)
		}
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		switch {
		case sw.code >= 500:
			s.Log.Error("API request", attrs...)
		case refusedWho(sw.code) || (sw.code >= 400 && !read):
			refusals.Warn("API request refused", attrs...)
		case read:
			s.Log.Debug("API request", attrs...)
		default:
			s.Log.Info("API request", attrs...)
		}
	})
}

// refusedWho is whether code refuses the client itself (its token, its Host or
// Origin), whatever it asked: worth a warning on reads too.
func refusedWho(code int) bool {
	return code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusMisdirectedRequest
}

// The longest method and path a log line holds: a client may send a 500 KiB method.
const (
	maxLoggedMethod = 32
	maxLoggedPath   = 256
)

// MethodLabel is the method as requests are counted: a method of HTTP as itself,
// anything else (the client chose it) as OTHER, so that the counter's series are
// bounded however many methods clients invent.
func MethodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// Requests returns how many requests were answered, by method and status code.
func (s *Server) Requests() map[RequestKey]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[RequestKey]uint64, len(s.requests))
	for k, v := range s.requests {
		out[k] = v
	}
	return out
}

// note carries what a handler wants in the request's log line.
type note struct{ err string }

type noteKey struct{}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush lets /metrics stream through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// recorder keeps the status and headers of a response and drops its body.
type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(code int)        { r.code = code }
