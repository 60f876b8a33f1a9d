// Package ratelog logs what clients cause — a refused connection, a bad token, a
// request past a limit — at a bounded rate, so that a client cannot fill the disk or
// drown the other lines by repeating itself, and clips the strings a client chose
// before they reach a line.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
)

// A Limiter passes Burst lines at once and then one line per Every; the lines it
// holds back are counted, and the next line it passes says how many ("suppressed").
type Limiter struct {
	log   *slog.Logger
	clk   clock.Clock
	every time.Duration
	burst float64

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// New returns a Limiter of log; the defaults of the project's listeners are
// New(log, clock.Real(), time.Second, 10).
func New(log *slog.Logger, clk clock.Clock, every time.Duration, burst int) *Limiter {
	return &Limiter{log: log, clk: clk, every: every, burst: float64(burst), tokens: float64(burst), last: clk.Now()}
}

// Warn logs at WARN when the rate allows and counts the line otherwise.
func (l *Limiter) Warn(msg string, args ...any) { l.emit(slog.LevelWarn, msg, args) }

// Info logs at INFO when the rate allows and counts the line otherwise.
func (l *Limiter) Info(msg string, args ...any) { l.emit(slog.LevelInfo, msg, args) }

func (l *Limiter) emit(level slog.Level, msg string, args []any) {
	l.mu.Lock()
	now := l.clk.Now()
	l.tokens = min(l.burst, l.tokens+float64(now.Sub(l.last))/float64(l.every))
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// Suppressed is the number of lines held back since the last one passed.
func (l *Limiter) Suppressed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.suppressed
}

// Clip returns s cut to at most n bytes (on a UTF-8 boundary) with "…" when cut: a
// value a client chose (an HTTP method, an ALPN name, a service name) fits in a line.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
