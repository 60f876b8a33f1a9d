package bench

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// WrkResult is what one run of wrk (4.x, with --latency) reports.
type WrkResult struct {
	Requests       int64   // completed requests, whatever their status
	RequestsPerSec float64 // Requests over the run's measured duration
	// Latency percentiles in ms, from wrk's "Latency Distribution" (it prints only
	// these four).
	P50Ms, P75Ms, P90Ms, P99Ms float64
	// Socket errors; wrk prints the line only when one of them is non-zero.
	ConnectErrors, ReadErrors, WriteErrors, Timeouts int64
	// Non2xx counts the responses wrk calls "Non-2xx or 3xx": status 400 and above.
	Non2xx int64
}

// Errors describes the run's errors for a reader, or is "" when there were none.
func (r WrkResult) Errors() string {
	var parts []string
	if r.Non2xx > 0 {
		parts = append(parts, fmt.Sprintf("%d responses with status ≥ 400", r.Non2xx))
	}
	if n := r.ConnectErrors + r.ReadErrors + r.WriteErrors + r.Timeouts; n > 0 {
		parts = append(parts, fmt.Sprintf("%d socket errors (connect %d, read %d, write %d, timeout %d)",
			n, r.ConnectErrors, r.ReadErrors, r.WriteErrors, r.Timeouts))
	}
	return strings.Join(parts, ", ")
}

// ParseWrk reads wrk's report. Without the Requests/sec line or the latency
// distribution (wrk run without --latency, or wrk that could not start, which prints
// one line such as "unable to connect to …") it returns an error quoting the output.
func ParseWrk(out string) (WrkResult, error) {
	var r WrkResult
	var sawRate, sawRequests bool
	percentiles := map[string]*float64{"50%": &r.P50Ms, "75%": &r.P75Ms, "90%": &r.P90Ms, "99%": &r.P99Ms}
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		var err error
		switch {
		case len(f) == 2 && percentiles[f[0]] != nil:
			*percentiles[f[0]], err = wrkMillis(f[1])
			seen[f[0]] = true
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			r.Requests, err = strconv.ParseInt(f[0], 10, 64)
			sawRequests = true
		case strings.HasPrefix(line, "Requests/sec:"):
			r.RequestsPerSec, err = strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, "Requests/sec:")), 64)
			sawRate = true
		case strings.HasPrefix(line, "Non-2xx or 3xx responses:"):
			r.Non2xx, err = strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "Non-2xx or 3xx responses:")), 10, 64)
		case strings.HasPrefix(line, "Socket errors:"):
			_, err = fmt.Sscanf(line, "Socket errors: connect %d, read %d, write %d, timeout %d",
				&r.ConnectErrors, &r.ReadErrors, &r.WriteErrors, &r.Timeouts)
		}
		if err != nil {
			return r, fmt.Errorf("wrk output: line %q: %w", line, err)
		}
	}
	switch {
	case !sawRate || !sawRequests:
		return r, fmt.Errorf("wrk output has no request count or rate: %q", firstLines(out, 3))
	case len(seen) < len(percentiles):
		return r, fmt.Errorf("wrk output has no complete latency distribution (run with --latency): %q", firstLines(out, 3))
	}
	return r, nil
}

// wrkMillis converts a wrk time ("540.00us", "1.19ms", "1.14s", "2.00m") to ms.
func wrkMillis(s string) (float64, error) {
	perUnit := map[string]float64{"us": 1e-3, "ms": 1, "s": 1e3, "m": 60e3, "h": 3600e3}
	i := strings.IndexFunc(s, func(r rune) bool { return r >= 'a' && r <= 'z' })
	if i < 0 {
		return 0, fmt.Errorf("time %q: no unit", s)
	}
	ms, ok := perUnit[s[i:]]
	if !ok {
		return 0, fmt.Errorf("time %q: unknown unit %q", s, s[i:])
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("time %q: %w", s, err)
	}
	return v * ms, nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], " / ")
}
