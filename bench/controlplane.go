package bench

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/maglev"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// The control plane's own costs: building Maglev tables and programming services
// into the kernel. (Convergence in a BGP lab is test/lab/cpbench.)

// ControlplaneMethod says how the control-plane figures are measured.
const ControlplaneMethod = "Maglev: wall time of maglev.Build for one service's table of 65537 " +
	"slots (the default table_size), averaged over repeated builds within a run. Programming: wall " +
	"time of reconcile.Apply from an empty, freshly loaded data plane to N services (4 backends " +
	"each, one VIP address each, its own Maglev ring map of the default 65537 slots), through " +
	"the same code the node runs on start and reload; then the time to apply a change of one " +
	"backend of one service with all N in place. The kernel objects are real (BPF maps of the " +
	"loaded XDP program); nothing is attached to an interface."

// Maglev table sizes and service counts measured.
var (
	MaglevBackendCounts = []int{10, 100, 1000}
	ServiceCounts       = []int{1000, 10000}
)

// Controlplane measures `runs` runs of each figure and prints a table to w.
func Controlplane(w io.Writer, runs int) (Part, error) {
	part := Part{Name: "controlplane", Method: ControlplaneMethod}
	for _, n := range MaglevBackendCounts {
		var times []float64
		for range runs {
			d, err := maglevBuildTime(n)
			if err != nil {
				return part, err
			}
			times = append(times, ms(d))
		}
		part.Figures = append(part.Figures, NewFigure("control_plane", fmt.Sprintf("Maglev table, %d backends", n), "ms", times))
	}
	for _, n := range ServiceCounts {
		var all, one []float64
		for range runs {
			full, change, err := programTime(n)
			if err != nil {
				return part, err
			}
			all, one = append(all, ms(full)), append(one, ms(change))
		}
		part.Figures = append(part.Figures,
			NewFigure("control_plane", fmt.Sprintf("program %d services", n), "ms", all),
			NewFigure("control_plane", fmt.Sprintf("change 1 backend among %d services", n), "ms", one))
	}
	WriteFigureTable(w, part.Figures)
	return part, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// maglevBuildTime is the mean time of one table build for n backends, over enough
// builds to take at least 200 ms.
func maglevBuildTime(n int) (time.Duration, error) {
	backends := make([]maglev.Backend, n)
	for i := range backends {
		backends[i] = maglev.Backend{Key: fmt.Sprintf("10.%d.%d.%d:80", i>>16, (i>>8)&255, i&255), Weight: 1}
	}
	var builds int
	start := time.Now()
	for time.Since(start) < 200*time.Millisecond {
		if _, err := maglev.Build(fmt.Sprintf("svc%d", builds), backends, config.DefaultTableSize); err != nil {
			return 0, err
		}
		builds++
	}
	return time.Since(start) / time.Duration(builds), nil
}

// manyServices is n TCP services on port 80 of VIPs 100.64.0.0/10 (one each), with 4
// backends each taken from 10.128.0.0/9.
func manyServices(n int) *config.Config {
	cfg := &config.Config{Node: config.Node{FlowTableSize: config.DefaultFlowTableSize}}
	for i := range n {
		s := config.Service{Name: fmt.Sprintf("svc%05d", i), VIP: addr4(100<<24|64<<16, i), Port: 80,
			Protocol: config.TCP, Forwarding: config.IPIP, GUEPort: config.DefaultGUEPort,
			Scheduler: config.Maglev, TableSize: config.DefaultTableSize}
		for j := range 4 {
			s.Backends = append(s.Backends, config.Backend{Address: addr4(10<<24|128<<16, 4*i+j), Weight: 1})
		}
		cfg.Services = append(cfg.Services, s)
	}
	return cfg
}

func addr4(base uint32, i int) netip.Addr {
	v := base + uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// programTime loads a fresh data plane, times programming n services into it, then
// times a change of one backend in one of them.
func programTime(n int) (full, change time.Duration, err error) {
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: netip.MustParseAddr("10.0.0.1")})
	if err != nil {
		return 0, 0, fmt.Errorf("load data plane (needs root): %w", err)
	}
	defer lb.Close()
	cfg := manyServices(n)
	r := reconcile.New(lb)
	start := time.Now()
	if err := r.Apply(cfg, reconcile.AlwaysUp); err != nil {
		return 0, 0, fmt.Errorf("program %d services: %w", n, err)
	}
	full = time.Since(start)
	svc := &cfg.Services[n/2]
	svc.Backends[0].Address = addr4(10<<24|129<<16, 0) // not used by any other service
	start = time.Now()
	if err := r.Apply(cfg, reconcile.AlwaysUp); err != nil {
		return 0, 0, fmt.Errorf("change one backend among %d services: %w", n, err)
	}
	return full, time.Since(start), nil
}

// WriteFigureTable prints figures as a table: value min/median/max, and each
// comparison's median ratio (min–max) and target.
func WriteFigureTable(w io.Writer, figures []Figure) {
	fmt.Fprintf(w, "%-44s %-10s %10s %10s %10s  %s\n", "figure", "metric", "min", "median", "max", "compared")
	for _, f := range figures {
		fmt.Fprintf(w, "%-44s %-10s %10s %10s %10s  %s\n", f.Name, f.Metric,
			Number(f.Value.Min), Number(f.Value.Median), Number(f.Value.Max), compareText(f))
	}
}

// compareText is "1.52× nftables DNAT (1.40–1.60) ≥ 1.5× met; …" and any bound.
func compareText(f Figure) string {
	out := ""
	for i, c := range f.Compared {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%.2f× %s (%.2f–%.2f)", c.Ratio.Median, c.Reference, c.Ratio.Min, c.Ratio.Max)
		if t := c.TargetText(); t != "" {
			out += " " + t
		}
	}
	if b := f.BoundText(); b != "" {
		if out != "" {
			out += "; "
		}
		out += "bound " + b
	}
	return out
}

// Number prints a measured value with the precision that is meaningful for its size:
// 1234, 123, 12.3, 1.23, 0.123.
func Number(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a == 0:
		return "0"
	}
	return fmt.Sprintf("%.3f", v)
}
