package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"sync"
	"time"
)

// openLoopResult is one open-loop run: latency percentiles over every request, a
// failed one counted as clientTimeout (it did not complete, and a percentile that left
// it out would flatter the tool that fails most), and how many failed.
type openLoopResult struct {
	P50Ms, P99Ms float64
	Sent, Failed int
}

// newOpenLoopClient is the client of a warm-up and the run after it: the run starts
// with the connections the warm-up opened.
func newOpenLoopClient() *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}
	return &http.Client{Transport: tr, Timeout: clientTimeout}
}

// timelineEnv names a file each run appends its requests to, one a line (index, due
// time in ms from the start, latency in ms, failed, on a reused connection, its dial in
// ms): where a tool's latency went, a new connection's dial or a stall of all.
const timelineEnv = "TUNNELBENCH_TIMELINE"

// openLoop sends GET url at a fixed rate for d, whatever the answers: request i is due
// at start + i/rate, and its latency is counted from then, not from when it could be
// sent (wrk's closed loop waits for an answer before the next request, and so hides
// the queueing a slow proxy causes: coordinated omission). Keep-alive connections are
// reused; a new one is opened whenever all are busy.
func openLoop(ctx context.Context, client *http.Client, url string, rate int, d time.Duration) openLoopResult {
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	latencies := make([]time.Duration, n)
	failed := make([]bool, n)
	timeline := os.Getenv(timelineEnv)
	reused := make([]bool, n)
	dials := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait): // the generator's schedule
			case <-ctx.Done():
				return openLoopResult{}
			}
		}
		wg.Go(func() {
			rctx := ctx
			if timeline != "" {
				var dial time.Time
				rctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
					GotConn:      func(c httptrace.GotConnInfo) { reused[i] = c.Reused },
					ConnectStart: func(string, string) { dial = time.Now() },
					ConnectDone:  func(string, string, error) { dials[i] = time.Since(dial) },
				})
			}
			req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
			var resp *http.Response
			if err == nil {
				resp, err = client.Do(req)
			}
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = io.ErrUnexpectedEOF
				}
			}
			latencies[i], failed[i] = time.Since(due), err != nil
		})
	}
	wg.Wait()
	if timeline != "" {
		writeTimeline(timeline, url, rate, interval, latencies, failed, reused, dials)
	}
	r := openLoopResult{Sent: n}
	for i := range latencies {
		if failed[i] {
			r.Failed++
			latencies[i] = clientTimeout
		}
	}
	slices.Sort(latencies)
	r.P50Ms = ms(latencies[n*50/100])
	r.P99Ms = ms(latencies[min(n-1, n*99/100)])
	return r
}

func writeTimeline(path, url string, rate int, interval time.Duration, latencies []time.Duration, failed, reused []bool, dials []time.Duration) {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer out.Close()
	fmt.Fprintf(out, "# %s at %d req/s\n", url, rate)
	for i := range latencies {
		fmt.Fprintf(out, "%d %.3f %.3f %v %v %.3f\n", i, ms(time.Duration(i)*interval), ms(latencies[i]), failed[i], reused[i], ms(dials[i]))
	}
}

// clientTimeout bounds one request.
const clientTimeout = 5 * time.Second

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
