package listen

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/ratelog"
)

// Timeouts bound how long an HTTP client may hold a connection; zero fields take the
// defaults below.
type Timeouts struct {
	// ReadHeader is the time to send the request's headers: a client that never
	// finishes them (slow loris) is cut here.
	ReadHeader time.Duration
	// Read is the time to send the whole request, body included (API bodies are at
	// most 1 MiB).
	Read time.Duration
	// Write is the time from the end of the headers to the end of the response: a
	// client that does not read its answer is cut here.
	Write time.Duration
	// Idle is how long a kept-alive connection waits for its next request.
	Idle time.Duration
}

// The defaults of every HTTP listener. Write is the longest: an API write waits for the
// fleet's store, whose calls give up after 10 s, and a scrape of a large node's metrics.
var (
	DefaultTimeouts = Timeouts{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: time.Minute, Idle: time.Minute}
	// DefaultHTTPLimits hold a node's operators, its Prometheus and its scripts with
	// room to spare, and keep one address from taking every slot.
	DefaultHTTPLimits = Limits{MaxConns: 512, MaxConnsPerSource: 64}
)

// MaxHeaderBytes bounds a request's line and headers: an API request's are well under
// a KiB (a token, a path); net/http's default is 1 MiB.
const MaxHeaderBytes = 64 << 10

// HTTPOptions are a ServeHTTP's settings.
type HTTPOptions struct {
	Limits   Limits      // zero: DefaultHTTPLimits
	Timeouts Timeouts    // zero fields: DefaultTimeouts'
	TLS      *tls.Config // nil: plain HTTP
	// Log gets the server's own errors (a failed TLS handshake, a broken request) and
	// the refused connections, at a bounded rate: clients cause them.
	Log *slog.Logger
}

// HTTPServer is an HTTP server on a Listener: the one way manifold serves HTTP (the
// node's API and status page, the link's API, the steering controller's metrics), so
// that every such listener has the same timeouts and limits.
type HTTPServer struct {
	srv  *http.Server
	ln   *Listener
	done chan struct{}
}

// ServeHTTP serves h on ln, bounded by o, until Close.
func ServeHTTP(ln net.Listener, h http.Handler, o HTTPOptions) *HTTPServer {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	logs := ratelog.New(o.Log, clock.Real(), time.Second, 10)
	if o.Limits == (Limits{}) {
		o.Limits = DefaultHTTPLimits
	}
	o.Limits.Log = logs
	t := o.Timeouts
	or := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	s := &HTTPServer{ln: Limit(ln, o.Limits), done: make(chan struct{})}
	s.srv = &http.Server{Handler: h, TLSConfig: o.TLS, MaxHeaderBytes: MaxHeaderBytes,
		ReadHeaderTimeout: or(t.ReadHeader, DefaultTimeouts.ReadHeader), ReadTimeout: or(t.Read, DefaultTimeouts.Read),
		WriteTimeout: or(t.Write, DefaultTimeouts.Write), IdleTimeout: or(t.Idle, DefaultTimeouts.Idle),
		ErrorLog: log.New(serverLog{logs}, "", 0)}
	// owned by the HTTPServer: Close ends it and waits for it
	go func() {
		defer close(s.done)
		var err error
		if o.TLS != nil {
			err = s.srv.ServeTLS(s.ln, "", "")
		} else {
			err = s.srv.Serve(s.ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error("HTTP server stopped", "address", ln.Addr().String(), "err", err)
		}
	}()
	return s
}

// Addr is the address the server listens on.
func (s *HTTPServer) Addr() net.Addr { return s.ln.Addr() }

// Stats are the listener's counters.
func (s *HTTPServer) Stats() Stats { return s.ln.Stats() }

// Close stops the server: requests under way get two seconds to finish, then every
// connection is closed.
func (s *HTTPServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	<-s.done
}

// serverLog turns net/http's error lines into rate-limited warnings, clipped: they
// carry what clients sent.
type serverLog struct{ logs *ratelog.Limiter }

func (l serverLog) Write(p []byte) (int, error) {
	l.logs.Warn("HTTP server", "err", ratelog.Clip(strings.TrimSpace(string(p)), 512))
	return len(p), nil
}
