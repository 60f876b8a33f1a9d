package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMarkdownReport(t *testing.T) {
	nft := NewFigure("packet_rate", "nftables DNAT, 1 flow", "ns/packet", []float64{1600, 1500, 1700})
	lb := NewFigure("packet_rate", "manifold, 1 flow", "ns/packet", []float64{320, 300, 510})
	lb.Compare(nft, "<=", 0.25)
	ref := NewFigure("per_packet", "xdp_tx reference", "ns/packet", []float64{80, 80})
	est := NewFigure("per_packet", "TCP established", "ns/packet", []float64{170, 180})
	est.Compare(ref, "<=", 2.3)
	conv := NewFigure("control_plane", "backend removal", "ms", []float64{900, 1000})
	conv.SetBound("<=", 1500)
	r := Report{Generated: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), Machine: Machine{CPU: "Test CPU", Cores: 2, MemGiB: 24, Kernel: "6.18", Go: "go1.26"},
		Parts: []Part{
			{Name: "pktrate", Method: "generator → node → sink", Figures: []Figure{nft, lb}},
			{Name: "dataplane", Method: "BPF_PROG_TEST_RUN", Figures: []Figure{ref, est, conv}},
		}}
	var buf bytes.Buffer
	WriteMarkdown(&buf, r)
	md := buf.String()
	for _, want := range []string{
		"Test CPU (2 cores, 24 GiB), Linux 6.18",
		"| manifold, 1 flow (ns/packet) | nftables DNAT, 1 flow | 0.20× (0.20–0.30) | 3 | ≤ 0.25× met |",
		"| TCP established (ns/packet) | xdp_tx reference | 2.19× (2.12–2.25) | 2 | ≤ 2.3× met |",
		"| backend removal | its own value | 950 ms (max 1000) | 2 | ≤ 1500 ms met |",
		"Method: generator → node → sink",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// sections in the fixed order, whatever the order of the parts
	if i, j := strings.Index(md, "## Per-packet cost"), strings.Index(md, "## Packet rate"); i < 0 || j < 0 || i > j {
		t.Errorf("sections out of order:\n%s", md)
	}
	lb.Compare(nft, "<=", 0.1)
	buf.Reset()
	WriteMarkdown(&buf, Report{Parts: []Part{{Figures: []Figure{lb}}}})
	if !strings.Contains(buf.String(), "≤ 0.1× **NOT met**") {
		t.Errorf("a missed target is not set off:\n%s", buf.String())
	}
}

func TestWriteReportFiles(t *testing.T) {
	dir := t.TempDir()
	r := Report{Machine: ThisMachine("abc"), Parts: []Part{{Name: "x", Figures: []Figure{NewFigure("http", "direct", "req/s", []float64{1, 2})}}}}
	if r.Machine.Cores < 1 || r.Machine.Kernel == "" || r.Machine.CPU == "" {
		t.Errorf("machine not described: %+v", r.Machine)
	}
	if err := WriteReport(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Parts) != 1 || back.Machine.Commit != "abc" {
		t.Errorf("latest.json: %v %+v", err, back)
	}
	if md, err := os.ReadFile(filepath.Join(dir, "latest.md")); err != nil || !strings.Contains(string(md), "| direct | req/s | 1.50 |") {
		t.Errorf("latest.md: %v\n%s", err, md)
	}
}
