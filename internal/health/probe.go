package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/manifoldlb/manifold/internal/config"
)

// maxBody is how much of an http check's response body is read (then the connection is
// closed: keep-alives are disabled, so there is nothing to drain it for).
const maxBody = 4 << 10

// userAgent is sent by http checks, so that backends can tell them from clients.
const userAgent = "manifold-health-check/1"

// probe runs one check of t, bounded by ctx. It returns nil when the target is healthy.
func probe(ctx context.Context, client *http.Client, t Target) error {
	if !t.Addr.IsValid() {
		return errors.New("invalid backend address")
	}
	switch t.Check.Kind {
	case config.HealthTCP:
		return probeTCP(ctx, t)
	case config.HealthHTTP:
		return probeHTTP(ctx, client, t)
	default:
		return fmt.Errorf("unsupported health check kind %q", t.Check.Kind)
	}
}

// hostPort is t's address and check port as host:port ([v6]:port for IPv6, with the
// zone if any).
func hostPort(t Target) string {
	return net.JoinHostPort(t.Addr.String(), strconv.Itoa(int(t.Check.Port)))
}

// httpPath is the request path of an http check: "/" when empty, and always rooted.
func httpPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}

func probeTCP(ctx context.Context, t Target) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostPort(t))
	if err != nil {
		return err
	}
	return conn.Close()
}

func newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // never through HTTP(S)_PROXY: the backend itself is checked
			DialContext:            (&net.Dialer{}).DialContext,
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: 64 << 10,
		},
		// Redirects are not followed: a 3xx is itself a healthy answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func probeHTTP(ctx context.Context, client *http.Client, t Target) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort(t)+httpPath(t.Check.Path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return fmt.Errorf("HTTP status %s", resp.Status)
	}
	if err != nil && ctx.Err() != nil {
		// The answer was healthy but the body did not arrive within the timeout.
		return fmt.Errorf("reading response body: %w", err)
	}
	return nil
}
