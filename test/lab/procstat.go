package lab

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStats is what a process holds, read from /proc: what grows when it leaks.
type ProcStats struct {
	RSS     uint64 // bytes resident (VmRSS)
	FDs     int    // open file descriptors
	Threads int
	// Goroutines is the go_goroutines of the process's metrics, -1 when it has none.
	Goroutines int
}

// Stats reads the process's ProcStats; Goroutines is left at -1.
func (p *Process) Stats() (ProcStats, error) {
	s := ProcStats{Goroutines: -1}
	dir := "/proc/" + strconv.Itoa(p.Pid())
	f, err := os.Open(dir + "/status")
	if err != nil {
		return s, fmt.Errorf("%s: %w", p.Name, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			s.RSS = n * 1024 // kB
		case "Threads":
			s.Threads = int(n)
		}
	}
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return s, fmt.Errorf("%s: %w", p.Name, err)
	}
	s.FDs = len(fds)
	return s, sc.Err()
}

// Stats is the node's ProcStats with its goroutines, which it reports on its API's
// /metrics (go_goroutines).
func (n *Node) Stats() (ProcStats, error) {
	s, err := n.Process.Stats()
	if err != nil {
		return s, err
	}
	_, families, err := Scrape(n.Host, "127.0.0.1:9100")
	if err != nil {
		return s, err
	}
	g, ok := MetricValue(families, "go_goroutines", map[string]string{})
	if !ok {
		return s, fmt.Errorf("%s: no go_goroutines on /metrics", n.Name)
	}
	s.Goroutines = int(g)
	return s, nil
}
