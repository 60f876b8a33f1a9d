package main

import (
	"bytes"
	"strings"
	"testing"
)

// A run of three tests — passed, failed, skipped — as go test -json writes it.
const stream = `{"Time":"2026-11-27T10:00:00Z","Action":"run","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"p","Test":"TestOK","Elapsed":1.5}
{"Action":"run","Package":"p","Test":"TestBad"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"    x_test.go:9: the widget is broken\n"}
{"Action":"fail","Package":"p","Test":"TestBad","Elapsed":0.2}
{"Action":"run","Package":"p","Test":"TestNoEtcd"}
{"Action":"output","Package":"p","Test":"TestNoEtcd","Output":"=== RUN   TestNoEtcd\n"}
{"Action":"output","Package":"p","Test":"TestNoEtcd","Output":"    x_test.go:20: needs etcd\n"}
{"Action":"output","Package":"p","Test":"TestNoEtcd","Output":"--- SKIP: TestNoEtcd (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestNoEtcd"}
{"Time":"2026-11-27T10:01:05Z","Action":"fail","Package":"p","Elapsed":2.1}
# p [build output passed through]
`

func TestReport(t *testing.T) {
	var out bytes.Buffer
	r := &run{out: &out, output: map[key][]string{}}
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	r.summary()
	got := out.String()
	for _, want := range []string{
		"the widget is broken",                // a failed test's output
		"FAIL p",                              // its package
		"1 tests passed, 2 failed, 1 skipped", // the test and its package failed
		"skipped p TestNoEtcd: x_test.go:20: needs etcd", // a skip with its reason
		"# p [build output passed through]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "=== RUN   TestOK") {
		t.Errorf("a passed test's output was printed:\n%s", got)
	}
	if tab := r.timesTable(); !strings.Contains(tab, "| `p` | 2.1 |") || !strings.Contains(tab, "| `p` TestOK | 1.5 |") || !strings.Contains(tab, "(first event to last): 1m5s") {
		t.Errorf("times table:\n%s", tab)
	}
}
