package bench

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// FloodResult is the share of established flows that kept their backend through a
// flood of spoofed TCP packets: SYNs, or packets without SYN of flows never seen (which
// the node remembers, up to the bound).
type FloodResult struct {
	Name        string  `json:"name"`
	NewFlowRate uint32  `json:"new_flow_rate"` // 0: unbounded
	TableSize   uint32  `json:"flow_table_size"`
	Flows       int     `json:"established_flows"`
	Kind        string  `json:"kind"` // SYN or ACK
	Packets     int     `json:"packets"`
	Seconds     float64 `json:"flood_seconds"` // how long the flood took here
	Kept        float64 `json:"kept_share"`
	NotInserted uint64  `json:"flows_not_inserted"`
}

// Flood measures, with the node's default flow table and new-flow rate, a looser rate,
// and no bound, how many of `flows` established flows keep their backend while `packets`
// spoofed SYNs, then as many spoofed ACKs, go through the program. Before the flood every backend the flows are on is
// drained and as many new ones take the ring, so a flow that loses its flow-table entry
// moves; the established flows send nothing during the flood (the worst case: an
// active flow refreshes its entry's last use). Everything runs on one CPU, whose share of
// the new-flow bound the flood meets.
func Flood(w io.Writer, flows, packets int) ([]FloodResult, error) {
	var out []FloodResult
	for _, kind := range []string{"SYN", "ACK"} {
		for _, rate := range []uint32{config.DefaultNewFlowRate, 4 * config.DefaultNewFlowRate, 0} {
			name := fmt.Sprintf("bound %d/s", rate)
			if rate == 0 {
				name = "unbounded"
			}
			r, err := flood(name, kind, flows, packets, rate)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	fmt.Fprintf(w, "%-16s %8s %7s %5s %8s %8s %8s %14s\n", "new flows", "table", "flows", "flood", "packets", "flood s", "kept", "not inserted")
	for _, r := range out {
		fmt.Fprintf(w, "%-16s %8d %7d %5s %8d %8.1f %7.1f%% %14d\n", r.Name, r.TableSize, r.Flows, r.Kind, r.Packets, r.Seconds, 100*r.Kept, r.NotInserted)
	}
	return out, nil
}

// FloodFigures turns flood results into figures (section "flood", one run each): the
// share of established flows kept, for each new-flow bound.
func FloodFigures(results []FloodResult) []Figure {
	var out []Figure
	for _, r := range results {
		f := NewFigure("flood", fmt.Sprintf("%s, %d spoofed %ss into a %d-entry table", r.Name, r.Packets, r.Kind, r.TableSize),
			"% established flows kept", []float64{100 * r.Kept})
		f.Note = fmt.Sprintf("%d idle flows, %d new flows not inserted, flood took %.1f s", r.Flows, r.NotInserted, r.Seconds)
		out = append(out, f)
	}
	return out
}

func flood(name, kind string, flows, packets int, rate uint32) (FloodResult, error) {
	res := FloodResult{Name: name, NewFlowRate: rate, TableSize: config.DefaultFlowTableSize, Flows: flows, Kind: kind, Packets: packets}
	flags := dptest.SYN
	if kind == "ACK" {
		flags = dptest.ACK
	}
	n, err := dptest.NewNet()
	if err != nil {
		return res, fmt.Errorf("bench namespace (needs root): %w", err)
	}
	defer n.Close()
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, NodeAddr6: dptest.NodeAddr6, FlowTableSize: res.TableSize})
	if err != nil {
		return res, err
	}
	defer lb.Close()
	svc := config.Service{Name: "web", VIP: benchVIP4, Port: 80, Protocol: config.TCP, Forwarding: config.IPIP,
		Scheduler: config.Maglev, TableSize: 65537}
	for i := 1; i <= 10; i++ {
		svc.Backends = append(svc.Backends, config.Backend{Address: dptest.Backend4(i), Weight: 1})
	}
	cfg := &config.Config{Services: []config.Service{svc}} // no bound while flows are established
	rec := reconcile.New(lb)
	if err := rec.Apply(cfg, reconcile.AlwaysUp); err != nil {
		return res, err
	}
	est := make([][]byte, flows)
	first := make([]netip.Addr, flows)
	err = n.Do(func() error {
		restore, err := dptest.PinCPU(0)
		if err != nil {
			return err
		}
		defer restore()
		send := func(pkt []byte) (netip.Addr, error) {
			v, out, err := dptest.RunXDP(lb.Program(), n.Port0.Index, pkt)
			if err != nil {
				return netip.Addr{}, err
			}
			if v != dptest.XDPTX || len(out) < 34 {
				return netip.Addr{}, fmt.Errorf("verdict %d for an established flow", v)
			}
			return netip.AddrFrom4([4]byte(out[30:34])), nil // outer destination
		}
		for i := range est {
			p := dptest.Packet{Src: netip.AddrFrom4([4]byte{192, 0, byte(2 + i>>16), byte(i >> 8)}), Dst: benchVIP4,
				SPort: uint16(1024 + i%60000), DPort: 80, Flags: dptest.ACK}
			// opened by a packet without SYN: only the flow table knows the flow, not the
			// SYN memory, as for any flow older than a few seconds
			est[i] = p.Bytes()
			if first[i], err = send(est[i]); err != nil {
				return err
			}
		}
		// drain every backend, ten new ones take the ring; then the bound applies
		next := svc
		next.Backends = nil
		for i := 1; i <= 20; i++ {
			b := config.Backend{Address: dptest.Backend4(i), Weight: 1}
			if i <= 10 {
				b.Weight = 0
			}
			next.Backends = append(next.Backends, b)
		}
		cfg := &config.Config{Node: config.Node{NewFlowRate: rate}, Services: []config.Service{next}}
		if err := rec.Apply(cfg, reconcile.AlwaysUp); err != nil {
			return err
		}
		start := time.Now()
		if _, err := dptest.FloodTCP(lb.Program(), n.Port0.Index, benchVIP4, 80, flags, packets, 7); err != nil {
			return err
		}
		res.Seconds = time.Since(start).Seconds()
		kept := 0
		for i, pkt := range est {
			got, err := send(pkt)
			if err != nil {
				return err
			}
			if got == first[i] {
				kept++
			}
		}
		res.Kept = float64(kept) / float64(flows)
		return nil
	})
	if err != nil {
		return res, err
	}
	ev, err := lb.Events()
	if err != nil {
		return res, err
	}
	res.NotInserted = ev["flow_not_inserted"]
	return res, nil
}
