package api

import (
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// The status page (GET /): one HTML page of the node — its BGP peers, services and
// backends with their state, health, weight and rates, a small plot of each backend's
// packets/s over the last minutes, the drops, and the fleet and steering shares when
// the node has them. It is rendered here as tables, so it reads without JavaScript; a
// few lines of embedded script fetch the page again every two seconds and swap it in.
// Nothing is fetched from anywhere else.

//go:embed statuspage.html
var statusPageHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"rate":  formatRate,
	"bytes": formatBytes,
	"pct":   func(f float64) string { return fmt.Sprintf("%.1f %%", 100*f) },
}).Parse(statusPageHTML))

// Plot history: one sample every HistoryInterval, for HistoryLength.
const (
	HistoryInterval = 5 * time.Second
	HistoryLength   = 10 * time.Minute
)

// history is the recent packets/s of every backend, for the page's plots.
type history struct {
	mu      sync.Mutex
	at      []time.Time
	samples []map[string]float64 // backend key → packets/s, oldest first
}

func backendKey(service, address string) string { return service + "\x00" + address }

// record appends one sample of st, dropping those older than HistoryLength.
func (h *history) record(now time.Time, st wire.Status) {
	// the backends with traffic only (series reads 0 for the others): a sample of
	// every backend of 100 000 services, kept for HistoryLength, held the node's
	// memory and its collector busy
	sample := map[string]float64{}
	for _, s := range st.Services {
		for _, b := range s.Backends {
			if b.PacketsPerSecond != 0 {
				sample[backendKey(s.Name, b.Address)] = b.PacketsPerSecond
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.at = append(h.at, now)
	h.samples = append(h.samples, sample)
	drop := 0
	for drop < len(h.at) && now.Sub(h.at[drop]) > HistoryLength {
		drop++
	}
	h.at, h.samples = h.at[drop:], h.samples[drop:]
}

// series is one backend's samples, oldest first (0 where it did not exist).
func (h *history) series(key string) []float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]float64, len(h.samples))
	for i, s := range h.samples {
		out[i] = s[key]
	}
	return out
}

// RecordHistory samples the node's status every HistoryInterval for the status
// page's plots until ctx ends. The caller waits for it to return before it closes what
// Status reads.
func (s *Server) RecordHistory(ctx context.Context) {
	t := time.NewTicker(HistoryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.history.record(now, s.Node.Status())
		}
	}
}

// plotSVG draws a series as an inline SVG polyline scaled to its own maximum, with
// the maximum in its title (what a hover shows).
func plotSVG(series []float64) template.HTML {
	const w, h = 160.0, 28.0
	if len(series) < 2 {
		return `<span class="muted">collecting samples</span>`
	}
	peak := 0.0
	for _, v := range series {
		peak = max(peak, v)
	}
	var pts strings.Builder
	for i, v := range series {
		y := h - 2
		if peak > 0 {
			y = h - 2 - (h-4)*v/peak
		}
		fmt.Fprintf(&pts, "%.1f,%.1f ", w*float64(i)/float64(len(series)-1), y)
	}
	return template.HTML(fmt.Sprintf(`<svg class="plot" width="%g" height="%g" viewBox="0 0 %g %g" role="img"><title>packets/s over the last %s, peak %s</title><polyline points="%s"/></svg>`,
		w, h, w, h, time.Duration(len(series)-1)*HistoryInterval, formatRate(peak), strings.TrimSpace(pts.String())))
}

// pageData is what the template renders.
type pageData struct {
	wire.Status
	Generated string
	Plots     map[string]template.HTML // backend key → plot
	FleetView *wire.FleetStatus
	FleetErr  string
	Steering  *wire.SteeringStatus
}

func (p pageData) Plot(service, address string) template.HTML {
	return p.Plots[backendKey(service, address)]
}

func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	st := s.Node.Status()
	data := pageData{Status: st, Generated: time.Now().UTC().Format(time.RFC3339), Plots: map[string]template.HTML{}}
	for _, svc := range st.Services {
		for _, b := range svc.Backends {
			key := backendKey(svc.Name, b.Address)
			data.Plots[key] = plotSVG(s.history.series(key))
		}
	}
	if st.Fleet != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		f, err := s.Node.Fleet(ctx)
		cancel()
		if err != nil {
			data.FleetErr = err.Error()
		} else {
			data.FleetView = &f
		}
	}
	if s.Steering != nil {
		steering := s.Steering()
		data.Steering = &steering
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The page names no other origin: say so to the browser too.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'; img-src 'self' data:")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusPage.Execute(w, data); err != nil {
		s.Log.Error("status page", "err", err)
	}
}

func formatRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f k/s", v/1e3)
	default:
		return fmt.Sprintf("%.0f/s", v)
	}
}

func formatBytes(v float64) string {
	bits := 8 * v
	switch {
	case bits >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", bits/1e9)
	case bits >= 1e6:
		return fmt.Sprintf("%.1f Mbit/s", bits/1e6)
	case bits >= 1e3:
		return fmt.Sprintf("%.1f kbit/s", bits/1e3)
	default:
		return fmt.Sprintf("%.0f bit/s", bits)
	}
}
