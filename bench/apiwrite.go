package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/health"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/store"
)

// APIWriteMethod says how the API write figures are measured (issue 26).
const APIWriteMethod = "One backend's weight set through the config file source, as an API " +
	"write makes it (store.Source.Change of store.SetWeight: the service's lines decoded, edited, " +
	"validated alone and spliced into the file, or, before issue 26's splice, the whole file's " +
	"YAML edited, rendered and parsed again; then the atomic write and fsync of the file), and the update " +
	"that follows applied by the node's controller (reconcile.Controller.Submit) to a real, " +
	"freshly loaded data plane (BPF maps of the XDP program, attached to no interface; " +
	"node.max_services raised to hold N), with N services of 4 backends each in the file. " +
	"Wall time and CPU time (user + system of the process) of the whole write, and the " +
	"controller's part of it (Submit, the file's commit included). \"delta\": the update names " +
	"the one service changed (Update.Delta, this code); \"every service\": the sink hands the " +
	"controller every service instead, as the file source did before (the label of the " +
	"before-figures, measured in the same run). No health checker (every backend up), no BGP."

// APIWriteCounts are the numbers of services in the file.
var APIWriteCounts = []int{1000, 10000, 100000}

// APIWrite measures runs weight changes among each count of services, with the
// controller given the change alone and every service.
func APIWrite(w io.Writer, runs int, counts []int) (Part, error) {
	part := Part{Name: "apiwrite", Method: APIWriteMethod}
	for _, n := range counts {
		for _, whole := range []bool{false, true} {
			m, err := apiWrites(n, runs, whole)
			if err != nil {
				return part, err
			}
			mode := "delta"
			if whole {
				mode = "every service"
			}
			name := fmt.Sprintf("API weight change among %d services (%s)", n, mode)
			write := NewFigure("control_plane", name+", answered and programmed", "ms", m.wall)
			if n == 100000 && !whole {
				write.SetBound("<=", 50)
			}
			part.Figures = append(part.Figures, write,
				NewFigure("control_plane", name+", CPU time", "ms", m.cpu),
				NewFigure("control_plane", name+", the controller's part", "ms", m.submit))
		}
	}
	WriteFigureTable(w, part.Figures)
	return part, nil
}

type apiWriteTimes struct{ wall, cpu, submit []float64 }

// apiWrites writes a config file of n services, starts the file source and a
// controller on a fresh data plane from it, then times runs weight changes.
func apiWrites(n, runs int, whole bool) (apiWriteTimes, error) {
	var m apiWriteTimes
	dir, err := os.MkdirTemp("", "manifold-apiwrite-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(path, serviceFile(n), 0o600); err != nil {
		return m, err
	}
	st, err := store.Open(path)
	if err != nil {
		return m, fmt.Errorf("open %d services: %w", n, err)
	}
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: netip.MustParseAddr("10.0.0.1"),
		MaxServices: max(uint32(n+1), datapath.MaxServices), MaxBackends: max(uint32(4*n+2), datapath.MaxBackends)})
	if err != nil {
		return m, fmt.Errorf("load data plane (needs root): %w", err)
	}
	defer lb.Close()
	c := reconcile.NewController(reconcile.Options{Dataplane: lb, Health: allUp{}, Neighbours: noNeighbours{}, Log: slog.New(slog.DiscardHandler)})
	sk := &controllerSink{c: c, whole: whole}
	src := store.NewSource(st, sk, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	if err := sk.Submit(ctx, src.Initial()); err != nil {
		return m, fmt.Errorf("program %d services: %w", n, err)
	}
	c.Attached()
	for i := range runs {
		name, backend := fmt.Sprintf("svc%06d", (i*7919)%n), addr4(10<<24|128<<16, 4*((i*7919)%n)+1)
		body := []byte(fmt.Sprintf(`{"weight": %d}`, 2+i%50))
		cpu, err := processCPU()
		if err != nil {
			return m, err
		}
		sk.spent = 0
		start := time.Now()
		if err := src.Change(ctx, func(st *store.Store) (*store.Change, error) { return st.SetWeight(name, backend.String(), body) }); err != nil {
			return m, fmt.Errorf("weight change among %d services: %w", n, err)
		}
		wall := time.Since(start)
		after, err := processCPU()
		if err != nil {
			return m, err
		}
		m.wall, m.cpu, m.submit = append(m.wall, ms(wall)), append(m.cpu, ms(after-cpu)), append(m.submit, ms(sk.spent))
	}
	return m, nil
}

// serviceFile is a config file of n services as manyServices makes them.
func serviceFile(n int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.1\n  max_services: %d\n  max_backends: %d\nservices:\n",
		max(uint32(n+1), datapath.MaxServices), max(uint32(4*n+2), datapath.MaxBackends))
	for _, s := range manyServices(n, 0).Services {
		fmt.Fprintf(&b, "  - name: %s\n    vip: %s\n    port: 80\n    health: {kind: none}\n    backends:\n", s.Name, s.VIP)
		for _, be := range s.Backends {
			fmt.Fprintf(&b, "      - address: %s\n", be.Address)
		}
	}
	return []byte(b.String())
}

// controllerSink is the node's run loop for the bench: it hands each update to the
// controller, timing it; with whole, a Delta update becomes one of every service, as
// the file source sent before issue 26.
type controllerSink struct {
	c     *reconcile.Controller
	whole bool
	all   []config.Service // with whole: the services as last submitted
	spent time.Duration
}

func (s *controllerSink) Submit(_ context.Context, u reconcile.Update) error {
	start := time.Now()
	defer func() { s.spent += time.Since(start) }()
	if s.whole {
		if u.Delta {
			all := slices.Clone(s.all)
			for _, c := range u.Services {
				if i := slices.IndexFunc(all, func(o config.Service) bool { return o.Name == c.Name }); i >= 0 {
					all[i] = c
				} else {
					all = append(all, c)
				}
			}
			all = slices.DeleteFunc(all, func(o config.Service) bool { return slices.Contains(u.Gone, o.Name) })
			u.Services, u.Delta, u.Gone = all, false, nil
		}
		s.all = u.Services
	}
	return s.c.Submit(u)
}

type allUp struct{}

func (allUp) Set([]health.Target)      {}
func (allUp) Up(health.Target) bool    { return true }
func (allUp) Known(health.Target) bool { return true }

type noNeighbours struct{}

func (noNeighbours) Ensure([]netip.Addr) {}
