// Command report reads `go test -json` and prints what a person needs from a whole run:
// a line per package, the output of each failed test, and at the end the skipped
// tests with their reasons, so that a skip is seen (under CI it is a failure already,
// see testenv). With -times it also writes where the run spent its time, the table
// docs/testing.md keeps. It exits 1 when a test or a package failed.
//
//	go test -json ./... | go run ./internal/testenv/report -times bin/test-times.md
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

type result struct {
	key
	elapsed float64
	reason  string // a skip's
}

type run struct {
	out      io.Writer
	output   map[key][]string
	packages []result
	tests    []result // top-level tests that passed or failed
	skipped  []result
	failed   int
	passed   int
	// first and last are the times of the first and the last event: the run's wall time
	first, last time.Time
}

func main() {
	times := flag.String("times", "", "write the packages' and the slowest tests' times to this Markdown file")
	flag.Parse()
	r := &run{out: os.Stdout, output: map[key][]string{}}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	r.summary()
	if *times != "" {
		if err := os.WriteFile(*times, []byte(r.timesTable()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(2)
		}
	}
	if r.failed > 0 {
		os.Exit(1)
	}
}

func (r *run) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not an event: what go test prints itself (a build error), passed on.
			fmt.Fprintln(r.out, sc.Text())
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *run) event(e event) {
	if !e.Time.IsZero() {
		if r.first.IsZero() || e.Time.Before(r.first) {
			r.first = e.Time
		}
		if e.Time.After(r.last) {
			r.last = e.Time
		}
	}
	k := key{e.Package, e.Test}
	switch e.Action {
	case "output":
		r.output[k] = append(r.output[k], e.Output)
	case "pass", "fail":
		res := result{key: k, elapsed: e.Elapsed}
		switch {
		case e.Test == "":
			r.packages = append(r.packages, res)
			status := "ok  "
			if e.Action == "fail" {
				status = "FAIL"
				r.failed++
				r.print(k) // a build error, a panic outside a test
			}
			fmt.Fprintf(r.out, "%s %-60s %7.1fs\n", status, e.Package, e.Elapsed)
		case e.Action == "fail":
			r.failed++
			r.print(k)
		default:
			r.passed++
		}
		if e.Test != "" && !strings.Contains(e.Test, "/") {
			r.tests = append(r.tests, res)
		}
	case "skip":
		if e.Test != "" {
			r.skipped = append(r.skipped, result{key: k, reason: skipReason(r.output[k])})
		}
	}
	if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
		delete(r.output, k)
	}
}

func (r *run) print(k key) {
	for _, line := range r.output[k] {
		fmt.Fprint(r.out, line)
	}
}

// skipReason is what the test logged before its "--- SKIP" line.
func skipReason(lines []string) string {
	var reason []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		reason = append(reason, t)
	}
	return strings.Join(reason, " / ")
}

func (r *run) summary() {
	fmt.Fprintf(r.out, "\n%d tests passed, %d failed, %d skipped\n", r.passed, r.failed, len(r.skipped))
	for _, s := range r.skipped {
		fmt.Fprintf(r.out, "  skipped %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}

// timesTable lists the packages by time, and the twenty slowest top-level tests.
func (r *run) timesTable() string {
	var b strings.Builder
	total := 0.0
	pkgs := slices.Clone(r.packages)
	slices.SortFunc(pkgs, func(a, b result) int { return int(b.elapsed*1000) - int(a.elapsed*1000) })
	fmt.Fprintf(&b, "| package | seconds |\n|---|---:|\n")
	for _, p := range pkgs {
		total += p.elapsed
		fmt.Fprintf(&b, "| `%s` | %.1f |\n", strings.TrimPrefix(p.pkg, "github.com/manifoldlb/manifold/"), p.elapsed)
	}
	fmt.Fprintf(&b, "| all packages (their sum; they run two at a time) | %.1f |\n", total)
	tests := slices.Clone(r.tests)
	slices.SortFunc(tests, func(a, b result) int { return int(b.elapsed*1000) - int(a.elapsed*1000) })
	fmt.Fprintf(&b, "\n| slowest tests | seconds |\n|---|---:|\n")
	for _, t := range tests[:min(20, len(tests))] {
		fmt.Fprintf(&b, "| `%s` %s | %.1f |\n", strings.TrimPrefix(t.pkg, "github.com/manifoldlb/manifold/"), t.test, t.elapsed)
	}
	fmt.Fprintf(&b, "\nWall time of the tests (first event to last): %s. Written %s.\n",
		r.last.Sub(r.first).Round(time.Second), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	return b.String()
}
