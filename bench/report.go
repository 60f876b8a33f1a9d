package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The report: every part of one `make bench` in one file (latest.json), and the
// same as tables a person reads (latest.md). The plots are drawn from latest.json
// (bench/plot.py).

// Machine says where the figures came from.
type Machine struct {
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	MemGiB   int    `json:"memory_gib"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Commit   string `json:"commit,omitempty"`
	Hostname string `json:"hostname,omitempty"`
}

// Report is latest.json.
type Report struct {
	Generated time.Time `json:"generated"`
	Machine   Machine   `json:"machine"`
	Parts     []Part    `json:"parts"`
}

// ThisMachine describes the machine the benchmark runs on.
func ThisMachine(commit string) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Commit: commit}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	m.CPU = procField("/proc/cpuinfo", "model name", ":")
	if kb := procField("/proc/meminfo", "MemTotal", ":"); kb != "" {
		var n int
		fmt.Sscanf(kb, "%d", &n)
		m.MemGiB = (n + 1<<19) >> 20
	}
	return m
}

// procField is the value of the first line of a /proc file that starts with key.
func procField(path, key, sep string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), sep); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// WriteReport writes latest.json and latest.md into dir.
func WriteReport(dir string, r Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "latest.md"))
	if err != nil {
		return err
	}
	WriteMarkdown(f, r)
	return f.Close()
}

// sectionTitles orders and names the sections of the report.
var sectionTitles = []struct{ key, title string }{
	{"per_packet", "Per-packet cost (BPF_PROG_TEST_RUN)"},
	{"flow_scale", "Established flows against the flow table's size"},
	{"decap", "The backend's decapsulation (tc and XDP)"},
	{"flood", "New-flow flood"},
	{"packet_rate", "Packet rate through one node"},
	{"transit", "Transit forwarding (router mode)"},
	{"http", "HTTP requests/s and latency"},
	{"control_plane", "Control plane"},
	{"fleet", "Fleet: propagation through etcd"},
	{"steering", "Steering at scale: a round of 1 000 sites × 100 origins × 10 services"},
	{"link", "Site-to-site link: throughput over WireGuard tunnels"},
	{"linkpaths", "Site-to-site link on four capped paths (layer-3+4 multipath): tunnels against paths"},
	{"tunnel", "Tunnels: throughput and open-loop HTTP latency, against rathole and bore"},
	{"binary_size", "Binary sizes, as shipped (stripped), per binary and target"},
}

// WriteMarkdown writes the report as Markdown: the machine, every target with
// met / not met, then one table per section and the method of each part.
func WriteMarkdown(w io.Writer, r Report) {
	m := r.Machine
	fmt.Fprintf(w, "# manifold benchmark results\n\n")
	fmt.Fprintf(w, "Generated %s on %s (%d cores, %d GiB), Linux %s, %s", r.Generated.UTC().Format("2006-01-02 15:04 MST"), m.CPU, m.Cores, m.MemGiB, m.Kernel, m.Go)
	if m.Commit != "" {
		fmt.Fprintf(w, ", commit %s", m.Commit)
	}
	fmt.Fprintf(w, ".\nEvery figure is min / median / max over repeated runs; a ratio is taken run by run against its reference measured in the same round. Produced by `make bench`.\n\n")

	fmt.Fprintf(w, "## Targets\n\n| figure | compared with | ratio (median) | runs | target |\n|---|---|---:|---:|---|\n")
	for _, p := range r.Parts {
		for _, f := range p.Figures {
			for _, c := range f.Compared {
				if c.Target != nil {
					fmt.Fprintf(w, "| %s (%s) | %s | %.2f× (%.2f–%.2f) | %d | %s |\n", f.Name, f.Metric, c.Reference, c.Ratio.Median, c.Ratio.Min, c.Ratio.Max, len(f.Runs), mdTarget(c.TargetText()))
				}
			}
			if f.Bound != nil {
				fmt.Fprintf(w, "| %s | its own value | %s %s (max %s) | %d | %s |\n", f.Name, Number(f.Value.Median), f.Metric, Number(f.Value.Max), len(f.Runs), mdTarget(f.BoundText()))
			}
		}
	}
	described := map[string]bool{}
	for _, sec := range sectionTitles {
		var figs []Figure
		var methods []string
		for _, p := range r.Parts {
			used := false
			for _, f := range p.Figures {
				if f.Section == sec.key {
					figs = append(figs, f)
					used = true
				}
			}
			if used && p.Method != "" && !described[p.Name] {
				methods = append(methods, p.Method)
				described[p.Name] = true // once, in the part's first section
			}
		}
		if len(figs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n## %s\n\n", sec.title)
		fmt.Fprintf(w, "| figure | metric | median | min – max | compared with (ratio median, min–max) | note |\n|---|---|---:|---:|---|---|\n")
		for _, f := range figs {
			fmt.Fprintf(w, "| %s | %s | %s | %s – %s | %s | %s |\n", f.Name, f.Metric, Number(f.Value.Median), Number(f.Value.Min), Number(f.Value.Max),
				strings.ReplaceAll(compareText(f), "|", "/"), strings.ReplaceAll(f.Note, "|", "/"))
		}
		for _, m := range methods {
			fmt.Fprintf(w, "\nMethod: %s\n", m)
		}
	}
}

// mdTarget puts "NOT met" in bold so that it stands out in a table.
func mdTarget(s string) string { return strings.Replace(s, "NOT met", "**NOT met**", 1) }
