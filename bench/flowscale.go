package bench

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// Established flows against the size of the flow table: the same packet path, but the
// flow entry looked up is one of many in a well-filled table, so the lookup misses the caches
// the more often the larger the table.

// FlowScaleMethod says how the flow-scale figures are measured.
const FlowScaleMethod = "Flow scale: for each flow-table size, a fresh data plane with node.flow_table_size " +
	"set to it and the services above; the table is filled to three quarters (flows for 75 % of its entries) by running one ACK per flow " +
	"(its entry-opening packet) through the program, the CPUs in turn; the share of those flows the table then holds is reported. " +
	"Then ACKs of `calls` flows drawn at random from the filled ones are timed as above, interleaved with the trivial XDP_TX " +
	"program; at most 1 % of them may miss their flow (the services' new-flow counters count the misses), else the run fails. " +
	"Memory per entry is the kernel's memlock figure of lb_flows over its entries."

// FlowScaleSizes are the flow-table sizes measured.
var FlowScaleSizes = []uint32{1 << 18, 1 << 20, 1 << 22}

// FlowScale measures, for each size, an established packet of a random flow in a full
// table and the table's memory per entry; it prints a table to w and returns the
// figures (section "flow_scale").
func FlowScale(w io.Writer, calls, runs int) ([]Figure, error) {
	n, err := dptest.NewNet()
	if err != nil {
		return nil, fmt.Errorf("bench namespace (needs root): %w", err)
	}
	defer n.Close()
	var ref referenceObjects
	if err := loadReferenceObjects(&ref, nil); err != nil {
		return nil, err
	}
	defer ref.Close()
	var figures []Figure
	for _, size := range FlowScaleSizes {
		figs, err := flowScale(n, ref.ReferenceTx, size, calls, runs)
		if err != nil {
			return nil, fmt.Errorf("flow table of %d entries: %w", size, err)
		}
		figures = append(figures, figs...)
	}
	WriteDataplaneTable(w, Part{Figures: figures}, "flow_scale", "× xdp_tx")
	fmt.Fprintln(w)
	WriteFigureTable(w, append(figuresOfMetric(figures, "bytes/entry"), figuresOfMetric(figures, "%")...))
	return figures, nil
}

func figuresOfMetric(figures []Figure, metric string) []Figure {
	var out []Figure
	for _, f := range figures {
		if f.Metric == metric {
			out = append(out, f)
		}
	}
	return out
}

// flowSource is flow i's client address and port: 50 000 ports per address.
func flowSource(i int) (netip.Addr, uint16) {
	a := 100<<24 | 64<<16 + uint32(i/50000)
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), uint16(1024 + i%50000)
}

func flowScale(n *dptest.Net, ref *ebpf.Program, size uint32, calls, runs int) ([]Figure, error) {
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, NodeAddr6: dptest.NodeAddr6, FlowTableSize: size})
	if err != nil {
		return nil, err
	}
	defer lb.Close()
	if err := reconcile.New(lb).Apply(benchConfig(), reconcile.AlwaysUp); err != nil {
		return nil, err
	}
	mem, err := lb.Memory()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("TCP established, %s table", entriesText(size))
	filled := int(size) / 4 * 3
	rng := rand.New(rand.NewPCG(uint64(size), 3))
	acks := make([][]byte, calls)
	for i := range acks {
		src, port := flowSource(rng.IntN(filled))
		acks[i] = dptest.Packet{Src: src, Dst: benchVIP4, SPort: port, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	}
	var (
		figures []Figure
		held    int
	)
	err = n.Do(func() error {
		if err := fillFlowTable(lb.Program(), n.Port0.Index, filled); err != nil {
			return err
		}
		if held, err = lb.FlowCount(); err != nil {
			return err
		}
		unpin, err := dptest.PinCPU(0)
		if err != nil {
			return err
		}
		defer unpin()
		before, err := newFlows(lb)
		if err != nil {
			return err
		}
		cases := []dpCase{
			{name: "xdp_tx reference, " + entriesText(size), prog: ref, packets: acks[:1]},
			{name: name, prog: lb.Program(), packets: acks},
		}
		if figures, err = measureCases("flow_scale", cases, n.Port0.Index, calls, runs); err != nil {
			return err
		}
		after, err := newFlows(lb)
		if err != nil {
			return err
		}
		if missed := after - before; missed > uint64(len(acks)*runs/100) {
			return fmt.Errorf("%d of %d timed ACKs found no flow entry (the table held %d of %d flows)", missed, len(acks)*runs, held, filled)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	perEntry := NewFigure("flow_scale", fmt.Sprintf("flow table memory, %s entries", entriesText(size)), "bytes/entry",
		[]float64{float64(mem.Flows) / float64(size)})
	perEntry.Note = fmt.Sprintf("%.0f MiB in all", mib(mem.Flows))
	heldFig := NewFigure("flow_scale", fmt.Sprintf("flows held of a fill to 75 %%, %s entries", entriesText(size)), "%",
		[]float64{100 * float64(held) / float64(filled)})
	heldFig.Note = fmt.Sprintf("%d of %d", held, filled)
	return append(figures, perEntry, heldFig), nil
}

// fillFlowTable opens flows 0..size-1 by one ACK each (a TCP flow is remembered from
// its first packet without SYN), each CPU its share, as a node's CPUs share its flows.
func fillFlowTable(prog *ebpf.Program, ifindex, size int) error {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	src, _ := flowSource(0)
	ack := dptest.Packet{Src: src, Dst: benchVIP4, SPort: 1, DPort: 80, Flags: dptest.ACK}.Bytes()
	const srcOff, portOff = 14 + 12, 14 + 20 // checksums go stale: the program checks none
	per := size / cpus
	for cpu := range cpus {
		unpin, err := dptest.PinCPU(cpu)
		if err != nil {
			return err
		}
		for i := cpu * per; i < (cpu+1)*per; i++ {
			a, port := flowSource(i)
			copy(ack[srcOff:], a.AsSlice())
			binary.BigEndian.PutUint16(ack[portOff:], port)
			if v, _, err := dptest.TimedXDP(prog, ifindex, ack, 1); err != nil || v != dptest.XDPTX {
				unpin()
				return fmt.Errorf("first ACK of flow %d: verdict %d (%v)", i, v, err)
			}
		}
		unpin()
	}
	return nil
}

// newFlows is the number of flows the services' rings chose a backend for.
func newFlows(lb *datapath.LB) (uint64, error) {
	var sum uint64
	for id := uint32(1); id <= uint32(len(benchConfig().Services)); id++ {
		c, err := lb.ServiceCounters(id)
		if err != nil {
			return 0, err
		}
		sum += c.NewFlows
	}
	return sum, nil
}

// entriesText is 256 Ki, 1 Mi, 4 Mi.
func entriesText(n uint32) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d Mi", n>>20)
	}
	return fmt.Sprintf("%d Ki", n>>10)
}
