package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The samples under testdata are real wrk 4.1.0 output (Debian 12), captured against
// nginx and a slow Python server on loopback; each file's name says what it shows.
func TestParseWrk(t *testing.T) {
	for _, c := range []struct {
		file   string
		want   WrkResult
		errors string
	}{
		{"wrk-ok.txt", WrkResult{Requests: 256270, RequestsPerSec: 83833.87,
			P50Ms: 0.629, P75Ms: 0.95, P90Ms: 2.32, P99Ms: 65.31}, ""},
		{"wrk-seconds.txt", WrkResult{Requests: 27, RequestsPerSec: 5.39,
			P50Ms: 1140, P75Ms: 1330, P90Ms: 1380, P99Ms: 1410}, ""},
		{"wrk-non2xx.txt", WrkResult{Requests: 141647, RequestsPerSec: 70492.82,
			P50Ms: 0.767, P75Ms: 0.96, P90Ms: 1.38, P99Ms: 6.64, Non2xx: 141647},
			"141647 responses with status ≥ 400"},
		{"wrk-mixed.txt", WrkResult{Requests: 131738, RequestsPerSec: 65178.69,
			P50Ms: 0.79, P75Ms: 1.19, P90Ms: 2.35, P99Ms: 9.35, Non2xx: 13144},
			"13144 responses with status ≥ 400"},
		{"wrk-read-errors.txt", WrkResult{ReadErrors: 35654},
			"35654 socket errors (connect 0, read 35654, write 0, timeout 0)"},
		{"wrk-server-stopped.txt", WrkResult{Requests: 87647, RequestsPerSec: 29190.19,
			P50Ms: 0.27, P75Ms: 1.01, P90Ms: 1.1, P99Ms: 4.18, ReadErrors: 65, WriteErrors: 194843},
			"194908 socket errors (connect 0, read 65, write 194843, timeout 0)"},
	} {
		t.Run(c.file, func(t *testing.T) {
			got, err := ParseWrk(readSample(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !closeEnough(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			if e := got.Errors(); e != c.errors {
				t.Errorf("Errors() = %q, want %q", e, c.errors)
			}
		})
	}
}

// A run whose timeouts leave it with latencies under the timeout still counts them.
func TestParseWrkTimeouts(t *testing.T) {
	out := strings.Replace(readSample(t, "wrk-seconds.txt"), "Requests/sec:",
		"  Socket errors: connect 0, read 0, write 0, timeout 21\nRequests/sec:", 1)
	got, err := ParseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Timeouts != 21 || got.Errors() != "21 socket errors (connect 0, read 0, write 0, timeout 21)" {
		t.Errorf("timeouts %d, errors %q", got.Timeouts, got.Errors())
	}
}

func TestParseWrkRefusesIncompleteOutput(t *testing.T) {
	ok := readSample(t, "wrk-ok.txt")
	var noLatency []string
	for line := range strings.Lines(ok) {
		if !strings.Contains(line, "%  ") && !strings.Contains(line, "Latency Distribution") {
			noLatency = append(noLatency, line)
		}
	}
	for _, c := range []struct {
		name, out, msg string
	}{
		// wrk checks that it can connect before it starts, and prints only this
		{"connect refused", readSample(t, "wrk-connect-refused.txt"), "unable to connect to 127.0.0.1:9 Connection refused"},
		{"without --latency", strings.Join(noLatency, ""), "run with --latency"},
		{"empty", "", "no request count"},
		{"bad unit", strings.Replace(ok, "629.00us", "629.00ns", 1), `unknown unit`},
	} {
		if _, err := ParseWrk(c.out); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.msg)
		}
	}
}

func TestWrkMillis(t *testing.T) {
	for in, want := range map[string]float64{
		"540.00us": 0.54, "0.95ms": 0.95, "1.14s": 1140, "2.00m": 120000, "1.00h": 3.6e6,
	} {
		if got, err := wrkMillis(in); err != nil || !near(got, want) {
			t.Errorf("wrkMillis(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func readSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// closeEnough compares two results, the floats to a relative 1e-9: unit
// conversions multiply by 1e-3.
func closeEnough(a, b WrkResult) bool {
	floats := [][2]float64{{a.RequestsPerSec, b.RequestsPerSec}, {a.P50Ms, b.P50Ms}, {a.P75Ms, b.P75Ms}, {a.P90Ms, b.P90Ms}, {a.P99Ms, b.P99Ms}}
	for _, f := range floats {
		if !near(f[0], f[1]) {
			return false
		}
	}
	a.RequestsPerSec, a.P50Ms, a.P75Ms, a.P90Ms, a.P99Ms = 0, 0, 0, 0, 0
	b.RequestsPerSec, b.P50Ms, b.P75Ms, b.P90Ms, b.P99Ms = 0, 0, 0, 0, 0
	return a == b
}

func near(a, b float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= 1e-9*max(1, a, b, -a, -b)
}
