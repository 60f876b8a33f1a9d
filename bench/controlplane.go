package bench

import (
	"fmt"
	"io"
	"net/netip"
	"syscall"
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
	"slots, averaged over repeated builds within a run. Programming: wall time of " +
	"reconcile.Apply from an empty, freshly loaded data plane to N services (4 backends each, one " +
	"VIP address each, a Maglev ring of the default table size for 4 backends, 509 slots, packed " +
	"with others into ring blocks of 65536 slots; one row with table_size 65537, the default " +
	"before), through the same code the node runs on start and reload, and the CPU time (user + " +
	"system) the process spent in it, which a loaded machine does not inflate as much as the wall " +
	"time; then the time to apply a change of one backend of one service with all N in place: the " +
	"whole Apply (the reconciler's walk through the N services' config, then the writes) and the " +
	"data plane's part of it (the time spent in the data plane's map writes). Memory: the kernel's " +
	"memlock figure of every map of the program (what " +
	"`bpftool map show` prints) with the N services in, the rings and the flow table (262144 " +
	"entries, empty or full alike) named apart. The data plane is loaded with room for N services " +
	"and 4N backends (node.max_services, node.max_backends). The kernel objects are real (BPF " +
	"maps of the loaded XDP program); nothing is attached to an interface."

// Maglev table sizes and service counts measured.
var (
	MaglevBackendCounts = []int{10, 100, 1000}
	ServiceCounts       = []int{1000, 10000, 100000}
)

// Bounds of issue 18 on 10 000 services and of issue 28 on 100 000: programmed in 2 s,
// their maps in 1 GiB; and, among 100 000, one changed backend through the data
// plane's part in 10 ms.
const (
	programBound    = 2000 // ms
	memoryBound     = 1024 // MiB
	changeBound100k = 10   // ms
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
	cases := []struct {
		services  int
		tableSize uint32 // 0: the default
	}{{1000, 65537}}
	for _, n := range ServiceCounts {
		cases = append(cases, struct {
			services  int
			tableSize uint32
		}{n, 0})
	}
	for _, c := range cases {
		var all, cpu, one, oneDP, rings, total []float64
		for range runs {
			m, err := programTime(c.services, c.tableSize)
			if err != nil {
				return part, err
			}
			all, cpu, one, oneDP = append(all, ms(m.full)), append(cpu, ms(m.fullCPU)), append(one, ms(m.change)), append(oneDP, ms(m.changeDP))
			rings, total = append(rings, mib(m.mem.Rings)), append(total, mib(m.mem.Rings+m.mem.Flows+m.mem.Other))
		}
		name := fmt.Sprintf("%d services", c.services)
		if c.tableSize != 0 {
			name = fmt.Sprintf("%d services, table_size %d", c.services, c.tableSize)
		}
		program := NewFigure("control_plane", "program "+name, "ms", all)
		memory := NewFigure("control_plane", "BPF map memory, "+name, "MiB", total)
		changeDP := NewFigure("control_plane", "change 1 backend among "+name+", data plane's part", "ms", oneDP)
		if (c.services == 10000 || c.services == 100000) && c.tableSize == 0 {
			program.SetBound("<=", programBound)
			memory.SetBound("<=", memoryBound)
		}
		if c.services == 100000 && c.tableSize == 0 {
			changeDP.SetBound("<=", changeBound100k)
		}
		part.Figures = append(part.Figures, program,
			NewFigure("control_plane", "program "+name+", CPU time", "ms", cpu),
			NewFigure("control_plane", "change 1 backend among "+name, "ms", one), changeDP,
			NewFigure("control_plane", "Maglev ring memory, "+name, "MiB", rings), memory)
	}
	WriteFigureTable(w, part.Figures)
	return part, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

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
		if _, err := maglev.Build(fmt.Sprintf("svc%d", builds), backends, 65537); err != nil {
			return 0, err
		}
		builds++
	}
	return time.Since(start) / time.Duration(builds), nil
}

// manyServices is n TCP services on port 80 of VIPs 100.64.0.0/10 (one each), with 4
// backends each taken from 10.128.0.0/9, and the given table size (0: the default).
func manyServices(n int, tableSize uint32) *config.Config {
	cfg := &config.Config{Node: config.Node{FlowTableSize: config.DefaultFlowTableSize}}
	for i := range n {
		s := config.Service{Name: fmt.Sprintf("svc%06d", i), VIP: addr4(100<<24|64<<16, i), Port: 80,
			Protocol: config.TCP, Forwarding: config.IPIP, GUEPort: config.DefaultGUEPort,
			Scheduler: config.Maglev, TableSize: tableSize}
		for j := range 4 {
			s.Backends = append(s.Backends, config.Backend{Address: addr4(10<<24|128<<16, 4*i+j), Weight: 1})
		}
		if tableSize == 0 {
			s.TableSize = config.DefaultTableSize(len(s.Backends))
		}
		cfg.Services = append(cfg.Services, s)
	}
	return cfg
}

func addr4(base uint32, i int) netip.Addr {
	v := base + uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// programmed is what programTime measures.
type programmed struct {
	full, fullCPU, change, changeDP time.Duration
	mem                             datapath.Memory
}

// programTime loads a fresh data plane, times programming n services into it, reads
// what its maps cost, then times a change of one backend in one of them.
func programTime(n int, tableSize uint32) (programmed, error) {
	var p programmed
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: netip.MustParseAddr("10.0.0.1"),
		MaxServices: max(uint32(n+1), datapath.MaxServices), MaxBackends: max(uint32(4*n+2), datapath.MaxBackends)})
	if err != nil {
		return p, fmt.Errorf("load data plane (needs root): %w", err)
	}
	defer lb.Close()
	cfg := manyServices(n, tableSize)
	dp := &timedDataplane{LB: lb}
	r := reconcile.New(dp)
	cpu, err := processCPU()
	if err != nil {
		return p, err
	}
	start := time.Now()
	if err := r.Apply(cfg, reconcile.AlwaysUp); err != nil {
		return p, fmt.Errorf("program %d services: %w", n, err)
	}
	p.full = time.Since(start)
	if p.fullCPU, err = processCPU(); err != nil {
		return p, err
	}
	p.fullCPU -= cpu
	if p.mem, err = lb.Memory(); err != nil {
		return p, err
	}
	svc := &cfg.Services[n/2]
	svc.Backends[0].Address = addr4(10<<24|129<<16, 0) // not used by any other service
	dp.spent = 0
	start = time.Now()
	if err := r.Apply(cfg, reconcile.AlwaysUp); err != nil {
		return p, fmt.Errorf("change one backend among %d services: %w", n, err)
	}
	p.change, p.changeDP = time.Since(start), dp.spent
	return p, nil
}

// processCPU is the CPU time, user and system, the process has spent so far.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// timedDataplane is the data plane with a clock on its writes: the data plane's part
// of an Apply, apart from the reconciler's walk through the config.
type timedDataplane struct {
	*datapath.LB
	spent time.Duration
}

func (t *timedDataplane) clock(start time.Time) { t.spent += time.Since(start) }

func (t *timedDataplane) PutServices(keys []datapath.ServiceKey, s []datapath.Service) (int, error) {
	defer t.clock(time.Now())
	return t.LB.PutServices(keys, s)
}

func (t *timedDataplane) DeleteService(k datapath.ServiceKey) error {
	defer t.clock(time.Now())
	return t.LB.DeleteService(k)
}

func (t *timedDataplane) PutVIPAddrs(addrs []netip.Addr, services []uint32) error {
	defer t.clock(time.Now())
	return t.LB.PutVIPAddrs(addrs, services)
}

func (t *timedDataplane) DeleteVIPAddr(a netip.Addr) error {
	defer t.clock(time.Now())
	return t.LB.DeleteVIPAddr(a)
}

func (t *timedDataplane) PutRings(rings map[uint32][]uint32) error {
	defer t.clock(time.Now())
	return t.LB.PutRings(rings)
}

func (t *timedDataplane) DeleteRing(id uint32) error {
	defer t.clock(time.Now())
	return t.LB.DeleteRing(id)
}

func (t *timedDataplane) PutBackends(ids []uint32, b []datapath.Backend) (int, error) {
	defer t.clock(time.Now())
	return t.LB.PutBackends(ids, b)
}

func (t *timedDataplane) DeleteBackend(id uint32) error {
	defer t.clock(time.Now())
	return t.LB.DeleteBackend(id)
}

func (t *timedDataplane) ResetServiceCounters(id uint32) error {
	defer t.clock(time.Now())
	return t.LB.ResetServiceCounters(id)
}

func (t *timedDataplane) PutSettings(s datapath.Settings) error {
	defer t.clock(time.Now())
	return t.LB.PutSettings(s)
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
