package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
	"github.com/manifoldlb/manifold/internal/reconcile"
)

// Per-packet cost of the data plane, through BPF_PROG_TEST_RUN, next to trivial
// programs in the same run.
//
// Method: every call runs the program once (repeat = 1) on the packet as built, so a
// rewriting program never times its own output; the kernel's own per-run time is
// read, and the median over all calls is reported. Cases are interleaved in rounds so
// that a noisy neighbour hits all of them alike.

// Sample is the distribution of one case's per-packet times, in ns.
type Sample struct {
	Name    string  `json:"name"`
	Verdict string  `json:"verdict"`
	Calls   int     `json:"calls"`
	Min     float64 `json:"min_ns"`
	Median  float64 `json:"median_ns"`
	// Mean resolves finer than the median: the kernel's timer ticks in steps (10 ns
	// here), and the mean of many samples taken at random phases falls between them.
	Mean float64 `json:"mean_ns"`
	P90  float64 `json:"p90_ns"`
	Max  float64 `json:"max_ns"`
	// Ratio is Median over the median of the trivial XDP_TX program; MeanRatio the same
	// of the means.
	Ratio     float64 `json:"ratio_to_xdp_tx"`
	MeanRatio float64 `json:"mean_ratio_to_xdp_tx"`
	// Target is the ratio the project aims at (0: none), Met whether it is reached.
	Target float64 `json:"target_ratio,omitempty"`
	Met    bool    `json:"target_met,omitempty"`
}

// Summarize turns raw per-call times into a Sample (ratio and target filled later).
func Summarize(name string, ns []uint32) Sample {
	s := slices.Clone(ns)
	slices.Sort(s)
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) }
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return Sample{Name: name, Calls: len(s), Min: at(0), Median: at(0.5), Mean: sum / float64(len(s)), P90: at(0.9), Max: at(1)}
}

type dpCase struct {
	name    string
	prog    *ebpf.Program
	packets [][]byte // cycled through; many for "new flow", one otherwise
	target  float64
}

var (
	benchVIP4 = netip.MustParseAddr("198.51.100.10")
	benchVIP6 = netip.MustParseAddr("2001:db8:100::10")
	// the same services with forwarding: gue
	benchGUE4 = netip.MustParseAddr("198.51.100.11")
	benchGUE6 = netip.MustParseAddr("2001:db8:100::11")
)

// benchConfig: a TCP, a UDP and an IPv6 service with 10 backends each on a full-size
// Maglev table, as a node would run them, and TCP services forwarding with GUE.
func benchConfig() *config.Config {
	svc := func(name string, vip netip.Addr, port uint16, proto config.Protocol, backend func(int) netip.Addr) config.Service {
		fwd := config.IPIP
		if vip == benchGUE4 || vip == benchGUE6 {
			fwd = config.GUE
		}
		s := config.Service{Name: name, VIP: vip, Port: port, Protocol: proto, Forwarding: fwd, GUEPort: config.DefaultGUEPort,
			Scheduler: config.Maglev, TableSize: 65537}
		for i := 1; i <= 10; i++ {
			s.Backends = append(s.Backends, config.Backend{Address: backend(i), Weight: 1})
		}
		return s
	}
	return &config.Config{Services: []config.Service{
		svc("tcp4", benchVIP4, 80, config.TCP, dptest.Backend4),
		svc("udp4", benchVIP4, 53, config.UDP, dptest.Backend4),
		svc("tcp6", benchVIP6, 80, config.TCP, dptest.Backend6),
		svc("gue4", benchGUE4, 80, config.TCP, dptest.Backend4),
		svc("gue6", benchGUE6, 80, config.TCP, dptest.Backend6),
	}}
}

// Dataplane measures every case with `calls` calls each and writes a table to w.
func Dataplane(w io.Writer, calls int) ([]Sample, error) {
	n, err := dptest.NewNet()
	if err != nil {
		return nil, fmt.Errorf("bench namespace (needs root): %w", err)
	}
	defer n.Close()
	lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, NodeAddr6: dptest.NodeAddr6})
	if err != nil {
		return nil, err
	}
	defer lb.Close()
	if err := reconcile.New(lb).Apply(benchConfig(), reconcile.AlwaysUp); err != nil {
		return nil, err
	}
	var ref referenceObjects
	if err := loadReferenceObjects(&ref, nil); err != nil {
		return nil, err
	}
	defer ref.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	client := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}) }
	syns := make([][]byte, calls)
	for i := range syns {
		syns[i] = dptest.Packet{Src: client(i), Dst: benchVIP4, SPort: uint16(1024 + rng.IntN(60000)), DPort: 80, Flags: dptest.SYN}.Bytes()
	}
	est4 := dptest.Packet{Src: dptest.Client4, Dst: benchVIP4, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	udp4 := dptest.Packet{Src: dptest.Client4, Dst: benchVIP4, SPort: 40000, DPort: 53, UDP: true, Payload: make([]byte, 18)}.Bytes()
	est6 := dptest.Packet{Src: dptest.Client6, Dst: benchVIP6, SPort: 40000, DPort: 80, Flags: dptest.ACK}.Bytes()
	other := dptest.Packet{Src: dptest.Client4, Dst: netip.MustParseAddr("192.0.2.99"), SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	gue4 := dptest.Packet{Src: dptest.Client4, Dst: benchGUE4, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	gue6 := dptest.Packet{Src: dptest.Client6, Dst: benchGUE6, SPort: 40000, DPort: 80, Flags: dptest.ACK}.Bytes()
	echo := icmpPacket(dptest.Client4, benchVIP4, 8, 0, 1, make([]byte, 18))
	fragNeeded := icmpPacket(netip.MustParseAddr("192.0.2.1"), benchVIP4, 3, 4, 1400,
		quote(dptest.Packet{Src: benchVIP4, Dst: dptest.Client4, SPort: 80, DPort: 40000, Flags: dptest.ACK, Payload: make([]byte, 1360)}, 48))
	tooBig := dptest.Packet{Src: dptest.Client4, Dst: benchVIP4, SPort: 40000, DPort: 80, Flags: dptest.ACK, DF: true, Payload: make([]byte, 1460)}.Bytes()

	cases := []dpCase{
		{"xdp_tx reference (swap MACs)", ref.ReferenceTx, [][]byte{est4}, 0},
		{"xdp_drop reference", ref.ReferenceDrop, [][]byte{est4}, 0},
		{"TCP new flow (SYN)", lb.Program(), syns, 4.5},
		{"TCP established", lb.Program(), [][]byte{est4}, 2.3},
		{"UDP established", lb.Program(), [][]byte{udp4}, 2.3},
		{"IPv6 TCP established", lb.Program(), [][]byte{est6}, 2.3},
		{"non-VIP pass-through", lb.Program(), [][]byte{other}, 1.3},
		{"GUE TCP established", lb.Program(), [][]byte{gue4}, 0},
		{"GUE IPv6 TCP established", lb.Program(), [][]byte{gue6}, 0},
		{"ICMP echo to VIP (answered)", lb.Program(), [][]byte{echo}, 0},
		{"ICMP frag-needed to backend", lb.Program(), [][]byte{fragNeeded}, 0},
		{"too big: frag-needed to client", lb.Program(), [][]byte{tooBig}, 0},
	}
	times := make([][]uint32, len(cases))
	verdicts := make([]uint32, len(cases))
	const rounds = 20
	err = n.Do(func() error {
		// warm the flow table (and the FIB cache) for the established cases
		for _, c := range cases[2:] {
			if _, _, err := dptest.TimedXDP(c.prog, n.Port0.Index, c.packets[0], 1); err != nil {
				return err
			}
		}
		for r := 0; r < rounds; r++ {
			for ci, c := range cases {
				for i := r * calls / rounds; i < (r+1)*calls/rounds; i++ {
					v, ns, err := dptest.TimedXDP(c.prog, n.Port0.Index, c.packets[i%len(c.packets)], 1)
					if err != nil {
						return fmt.Errorf("%s: %w", c.name, err)
					}
					verdicts[ci] = v
					times[ci] = append(times[ci], ns)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Sample, len(cases))
	for i, c := range cases {
		out[i] = Summarize(c.name, times[i])
		out[i].Verdict = verdictName(verdicts[i])
		out[i].Target = c.target
	}
	for i := range out {
		out[i].Ratio = out[i].Median / out[0].Median
		out[i].MeanRatio = out[i].Mean / out[0].Mean
		if out[i].Target > 0 {
			out[i].Met = out[i].Ratio <= out[i].Target
		}
	}
	WriteDataplaneTable(w, out)
	return out, nil
}

// icmpPacket builds an ICMP message from `from` to `to`: type, code, the 4 bytes after
// the checksum, and payload.
func icmpPacket(from, to netip.Addr, typ, code uint8, rest uint32, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: dptest.RouterMAC, DstMAC: dptest.ClientMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: from.AsSlice(), DstIP: to.AsSlice()}
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Id: uint16(rest >> 16), Seq: uint16(rest)}
	return dptest.Serialize(eth, ip, icmp, gopacket.Payload(payload))
}

// quote is the first n bytes of p's IP packet, as an ICMP error carries it.
func quote(p dptest.Packet, n int) []byte { return p.Bytes()[14 : 14+n] }

func verdictName(v uint32) string {
	switch v {
	case dptest.XDPDrop:
		return "XDP_DROP"
	case dptest.XDPPass:
		return "XDP_PASS"
	case dptest.XDPTX:
		return "XDP_TX"
	case dptest.XDPRedirect:
		return "XDP_REDIRECT"
	}
	return "XDP_ABORTED"
}

// WriteDataplaneTable prints samples as an aligned table.
func WriteDataplaneTable(w io.Writer, samples []Sample) {
	fmt.Fprintf(w, "%-30s %-12s %7s %7s %7s %7s %9s %7s  %-14s\n", "case", "verdict", "min ns", "median", "mean", "p90", "× xdp_tx", "(mean)", "target")
	for _, s := range samples {
		target := ""
		if s.Target > 0 {
			met := "met"
			if !s.Met {
				met = "NOT met"
			}
			target = fmt.Sprintf("≤ %.1f× %s", s.Target, met)
		}
		fmt.Fprintf(w, "%-30s %-12s %7.0f %7.0f %7.1f %7.0f %9.2f %7.2f  %-14s\n", s.Name, s.Verdict, s.Min, s.Median, s.Mean, s.P90, s.Ratio, s.MeanRatio, target)
	}
}
