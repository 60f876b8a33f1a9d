package main

import (
	"context"
	"io"
	"net/http"
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

// openLoop sends GET url at a fixed rate for d, whatever the answers: request i is due
// at start + i/rate, and its latency is counted from then, not from when it could be
// sent (wrk's closed loop waits for an answer before the next request, and so hides
// the queueing a slow proxy causes: coordinated omission). Keep-alive connections are
// reused; a new one is opened whenever all are busy.
func openLoop(ctx context.Context, url string, rate int, d time.Duration) openLoopResult {
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: clientTimeout}
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	latencies := make([]time.Duration, n)
	failed := make([]bool, n)
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
			resp, err := client.Get(url)
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

// clientTimeout bounds one request.
const clientTimeout = 5 * time.Second

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
