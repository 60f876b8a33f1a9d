package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"

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

// medianAndMean of one case's per-call times in one run, in ns. The mean resolves finer
// than the median: the kernel's timer ticks in steps (10 ns here), and the mean of many
// samples taken at random phases falls between them.
func medianAndMean(ns []uint32) (median, mean float64) {
	s := slices.Clone(ns)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return float64(s[(len(s)-1)/2]), sum / float64(len(s))
}

type dpCase struct {
	name    string
	prog    *ebpf.Program
	packets [][]byte // cycled through; many for "new flow", one otherwise
	target  float64
}

// tc says whether the case's program is a tc one: run as an skb, without an ingress
// device.
func (c dpCase) tc() bool { return c.prog.Type() == ebpf.SchedCLS }

var (
	benchVIP4 = netip.MustParseAddr("198.51.100.10")
	benchVIP6 = netip.MustParseAddr("2001:db8:100::10")
	// the same services with forwarding: gue
	benchGUE4 = netip.MustParseAddr("198.51.100.11")
	benchGUE6 = netip.MustParseAddr("2001:db8:100::11")
	// and with forwarding: nat
	benchNAT4 = netip.MustParseAddr("198.51.100.12")
	benchNAT6 = netip.MustParseAddr("2001:db8:100::12")
)

// benchBigRingPort is the port of the service whose Maglev table has the largest
// default size (65537 slots), beside the others' default for 10 backends (1021): the
// SYN's ring read misses the caches more often in the larger one.
const benchBigRingPort = 8080

// benchLocalPort is the port of a service whose only origin is reached by tunnel: its
// ring is the local pseudo-backend alone, whose packets pass to the node's stack.
const benchLocalPort = 443

// benchConfig: a TCP, a UDP and an IPv6 service with 10 backends each on the default
// Maglev table for 10 backends, as a node would run them, TCP services forwarding with
// GUE and NAT, one TCP service on a 65537-slot table, and one whose flows pass to the
// node's stack (an origin reached by tunnel).
func benchConfig() *config.Config {
	svc := func(name string, vip netip.Addr, port uint16, proto config.Protocol, backend func(int) netip.Addr) config.Service {
		tableSize := config.DefaultTableSize(10)
		if port == benchBigRingPort {
			tableSize = config.TableSizeSteps[len(config.TableSizeSteps)-1]
		}
		fwd := config.IPIP
		switch vip {
		case benchGUE4, benchGUE6:
			fwd = config.GUE
		case benchNAT4, benchNAT6:
			fwd = config.NAT
		}
		s := config.Service{Name: name, VIP: vip, Port: port, Protocol: proto, Forwarding: fwd, GUEPort: config.DefaultGUEPort,
			Scheduler: config.Maglev, TableSize: tableSize}
		for i := 1; i <= 10; i++ {
			s.Backends = append(s.Backends, config.Backend{Address: backend(i), Weight: 1})
		}
		return s
	}
	return &config.Config{Services: []config.Service{
		svc("tcp4", benchVIP4, 80, config.TCP, dptest.Backend4),
		svc("tcp4-big-ring", benchVIP4, benchBigRingPort, config.TCP, dptest.Backend4),
		svc("udp4", benchVIP4, 53, config.UDP, dptest.Backend4),
		svc("tcp6", benchVIP6, 80, config.TCP, dptest.Backend6),
		svc("gue4", benchGUE4, 80, config.TCP, dptest.Backend4),
		svc("gue6", benchGUE6, 80, config.TCP, dptest.Backend6),
		svc("nat4", benchNAT4, 80, config.TCP, dptest.Backend4),
		svc("nat6", benchNAT6, 80, config.TCP, dptest.Backend6),
		{Name: "local4", VIP: benchVIP4, Port: benchLocalPort, Protocol: config.TCP, Forwarding: config.IPIP, Scheduler: config.Maglev,
			TableSize: config.DefaultTableSize(1), Origins: []config.Origin{{Name: "home", Capacity: 1, Tunnel: true, Weight: 1}}},
	}}
}

// DataplaneMethod says how the per-packet figures are measured.
const DataplaneMethod = "BPF_PROG_TEST_RUN on the XDP programs loaded into the kernel, in a network " +
	"namespace whose routes and neighbours bpf_fib_lookup consults. Every call runs the program " +
	"once (repeat = 1) on the packet as built, so a rewriting program never times its own output; " +
	"the kernel's own per-run time is read (it ticks in 10 ns steps here, so the mean is also " +
	"given). One run is `calls` calls per case, interleaved across cases in 20 slices so that a " +
	"noisy neighbour hits all of them alike; its value is the median over those calls. Ratios are " +
	"taken run by run to the trivial program that swaps MACs and returns XDP_TX. Services: TCP, " +
	"UDP and IPv6 with 10 backends on the default Maglev table for 10 backends (1021 slots; one " +
	"more TCP service on the largest default, 65537 slots, for the SYN row that names it), IPIP unless named GUE or NAT " +
	"(a NAT reply is a backend's answer to an established NAT flow, translated back to its client). The " +
	"thread is pinned to one CPU, and the flow table (262144 entries) is filled " +
	"before the runs (by packets without SYN of flows never seen: a TCP flow is remembered from its " +
	"first ACK, not its SYN), so that every new flow's first ACK evicts one as on a busy node. Each run times its own " +
	"load of manifold's program and maps (filled and warmed alike): where the JIT image and the maps land moves a " +
	"load's figures by up to a tenth, so one load would be one draw of that; the references are loaded once."

// Dataplane measures every case over `runs` runs of `calls` calls each, prints a table
// to w and returns the figures (section "per_packet").
func Dataplane(w io.Writer, calls, runs int) (Part, error) {
	part := Part{Name: "dataplane", Method: DataplaneMethod}
	n, err := dptest.NewNet()
	if err != nil {
		return part, fmt.Errorf("bench namespace (needs root): %w", err)
	}
	defer n.Close()
	var ref referenceObjects
	if err := loadReferenceObjects(&ref, nil); err != nil {
		return part, err
	}
	defer ref.Close()
	// the packet-rate benchmark's minimal IPIP forwarder, the reference of "through a
	// node": timed here too, its gap to manifold's own path is the program's share
	var minimal pktrateObjects
	if err := loadPktrateObjects(&minimal, nil); err != nil {
		return part, err
	}
	defer minimal.Close()
	if err := minimal.FwdPort.Put(uint32(0), uint32(n.Port0.Index)); err != nil {
		return part, err
	}

	rng := rand.New(rand.NewPCG(1, 2))
	client := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}) }
	// every run opens new flows, from sources no earlier run used: their SYNs, and the
	// first ACKs, which open the flow entries
	syns := make([][]byte, calls*runs)
	acks := make([][]byte, calls*runs)
	bigRingSyns := make([][]byte, calls*runs)
	for i := range syns {
		p := dptest.Packet{Src: client(i), Dst: benchVIP4, SPort: uint16(1024 + rng.IntN(60000)), DPort: 80, Flags: dptest.SYN}
		syns[i] = p.Bytes()
		p.DPort = benchBigRingPort
		bigRingSyns[i] = p.Bytes()
		p.DPort, p.Flags = 80, dptest.ACK
		acks[i] = p.Bytes()
	}
	est4 := dptest.Packet{Src: dptest.Client4, Dst: benchVIP4, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	udp4 := dptest.Packet{Src: dptest.Client4, Dst: benchVIP4, SPort: 40000, DPort: 53, UDP: true, Payload: make([]byte, 18)}.Bytes()
	est6 := dptest.Packet{Src: dptest.Client6, Dst: benchVIP6, SPort: 40000, DPort: 80, Flags: dptest.ACK}.Bytes()
	local4 := dptest.Packet{Src: dptest.Client4, Dst: benchVIP4, SPort: 40000, DPort: benchLocalPort, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	other := dptest.Packet{Src: dptest.Client4, Dst: netip.MustParseAddr("192.0.2.99"), SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	gue4 := dptest.Packet{Src: dptest.Client4, Dst: benchGUE4, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	gue6 := dptest.Packet{Src: dptest.Client6, Dst: benchGUE6, SPort: 40000, DPort: 80, Flags: dptest.ACK}.Bytes()
	nat4 := dptest.Packet{Src: dptest.Client4, Dst: benchNAT4, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}.Bytes()
	nat6 := dptest.Packet{Src: dptest.Client6, Dst: benchNAT6, SPort: 40000, DPort: 80, Flags: dptest.ACK}.Bytes()
	echo := icmpPacket(dptest.Client4, benchVIP4, 8, 0, 1, make([]byte, 18))
	fragNeeded := icmpPacket(netip.MustParseAddr("192.0.2.1"), benchVIP4, 3, 4, 1400,
		quote(dptest.Packet{Src: benchVIP4, Dst: dptest.Client4, SPort: 80, DPort: 40000, Flags: dptest.ACK, Payload: make([]byte, 1360)}, 48))
	tooBig := dptest.Packet{Src: dptest.Client4, Dst: benchVIP4, SPort: 40000, DPort: 80, Flags: dptest.ACK, DF: true, Payload: make([]byte, 1460)}.Bytes()

	casesOf := func(lb *datapath.LB) []dpCase {
		return []dpCase{
			{"xdp_tx reference (swap MACs)", ref.ReferenceTx, [][]byte{est4}, 0},
			{"xdp_drop reference", ref.ReferenceDrop, [][]byte{est4}, 0},
			{"minimal XDP IPIP forwarder (pktrate's), UDP", minimal.PktrateIpip, [][]byte{udp4}, 0},
			{"TCP new flow (SYN), full table", lb.Program(), syns, 4.5},
			{"TCP new flow (SYN), full table, 65537-slot ring", lb.Program(), bigRingSyns, 0},
			{"TCP new flow's first ACK, full table", lb.Program(), acks, 0},
			{"TCP established", lb.Program(), [][]byte{est4}, 1.9},
			{"UDP established", lb.Program(), [][]byte{udp4}, 1.9},
			{"IPv6 TCP established", lb.Program(), [][]byte{est6}, 1.9},
			{"TCP established, passed to the stack (tunnelled share)", lb.Program(), [][]byte{local4}, 0},
			{"non-VIP pass-through", lb.Program(), [][]byte{other}, 1.3},
			{"GUE TCP established", lb.Program(), [][]byte{gue4}, 0},
			{"GUE IPv6 TCP established", lb.Program(), [][]byte{gue6}, 0},
			{"NAT TCP established", lb.Program(), [][]byte{nat4}, 0},
			{"NAT IPv6 TCP established", lb.Program(), [][]byte{nat6}, 0},
			{"NAT TCP reply", lb.Program(), nil, 0},
			{"NAT IPv6 TCP reply", lb.Program(), nil, 0},
			{"ICMP echo to VIP (answered)", lb.Program(), [][]byte{echo}, 0},
			{"ICMP frag-needed to backend", lb.Program(), [][]byte{fragNeeded}, 0},
			{"too big: frag-needed to client", lb.Program(), [][]byte{tooBig}, 0},
		}
	}
	// A NAT reply answers the packet of a NAT case as the program sent it on: its
	// packet is made once that case has run.
	replyTo := map[string]string{"NAT TCP reply": "NAT TCP established", "NAT IPv6 TCP reply": "NAT IPv6 TCP established"}
	err = n.Do(func() error {
		// One CPU: a thread that moved between CPUs would time each CPU's per-CPU
		// counters and next-hop cache cold.
		unpin, err := dptest.PinCPU(0)
		if err != nil {
			return err
		}
		defer unpin()
		runCases := make([][]dpCase, runs)
		for run := range runs {
			lb, err := datapath.LoadLB(datapath.Options{NodeAddr4: dptest.NodeAddr4, NodeAddr6: dptest.NodeAddr6})
			if err != nil {
				return err
			}
			defer lb.Close()
			if err := reconcile.New(lb).Apply(benchConfig(), reconcile.AlwaysUp); err != nil {
				return err
			}
			cases := casesOf(lb)
			if err := warmUp(lb, cases, n.Port0.Index, replyTo); err != nil {
				return err
			}
			runCases[run] = cases
		}
		figures, err := measureCasesOf("per_packet", func(run int) []dpCase { return runCases[run] }, n.Port0.Index, calls, runs)
		part.Figures = append(part.Figures, figures...)
		return err
	})
	if err != nil {
		return part, err
	}
	WriteDataplaneTable(w, part, "per_packet", "× xdp_tx")
	return part, nil
}

// warmUp readies a load for timing: new flows are measured at the steady state of a
// busy node, where every insert evicts the least recently used flow, so the table is
// filled first; the established cases' flows (and FIB cache) are opened, and the NAT
// flows whose replies are timed, whose reply packets are made from what the program
// sent (replyTo: reply case → the case it answers).
func warmUp(lb *datapath.LB, cases []dpCase, ifindex int, replyTo map[string]string) error {
	if _, err := dptest.FloodTCP(lb.Program(), ifindex, benchVIP4, 80, dptest.ACK, config.DefaultFlowTableSize+config.DefaultFlowTableSize/4, 7); err != nil {
		return err
	}
	sent := map[string][]byte{}
	for ci := range cases[3:] {
		c := &cases[3+ci]
		if to, ok := replyTo[c.name]; ok {
			c.packets = [][]byte{natReply(sent[to])}
		}
		_, out, err := dptest.RunXDP(c.prog, ifindex, c.packets[0])
		if err != nil {
			return err
		}
		sent[c.name] = out
	}
	return nil
}

// measureCases times every case over `runs` runs of `calls` calls each and returns,
// per case, its median and mean figures in section, each compared run by run with the
// first case's (the reference), against the case's target.
func measureCases(section string, cases []dpCase, ifindex, calls, runs int) ([]Figure, error) {
	return measureCasesOf(section, func(int) []dpCase { return cases }, ifindex, calls, runs)
}

// measureCasesOf is measureCases with each run's own cases (the same cases, by name
// and order, of another load).
func measureCasesOf(section string, casesOf func(run int) []dpCase, ifindex, calls, runs int) ([]Figure, error) {
	cases := casesOf(0)
	medians := make([][]float64, len(cases))
	means := make([][]float64, len(cases))
	verdicts := make([]uint32, len(cases))
	for run := 0; run < runs; run++ {
		times, err := dataplaneRun(casesOf(run), ifindex, calls, run*calls, verdicts)
		if err != nil {
			return nil, err
		}
		for ci := range cases {
			median, mean := medianAndMean(times[ci])
			medians[ci] = append(medians[ci], median)
			means[ci] = append(means[ci], mean)
		}
	}
	var figures []Figure
	var refMedian, refMean Figure
	for ci, c := range cases {
		med := NewFigure(section, c.name, "ns/packet", medians[ci])
		mean := NewFigure(section, c.name, "mean ns/packet", means[ci])
		med.Note = "verdict " + verdictName(verdicts[ci], c.tc())
		mean.Note = med.Note
		if ci == 0 {
			refMedian, refMean = med, mean
		}
		med.Compare(refMedian, "<=", c.target)
		mean.Compare(refMean, "<=", 0)
		figures = append(figures, med, mean)
	}
	return figures, nil
}

// dataplaneRun times `calls` calls of every case, interleaved in slices; a case with
// many packets is walked from packet `first` on (so that each run of "new flow" sends
// packets of flows not seen before).
func dataplaneRun(cases []dpCase, ifindex, calls, first int, verdicts []uint32) ([][]uint32, error) {
	const slices = 20
	times := make([][]uint32, len(cases))
	for sl := 0; sl < slices; sl++ {
		for ci, c := range cases {
			for i := sl * calls / slices; i < (sl+1)*calls/slices; i++ {
				v, ns, err := timedCase(c, ifindex, c.packets[(first+i)%len(c.packets)])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", c.name, err)
				}
				verdicts[ci] = v
				times[ci] = append(times[ci], ns)
			}
		}
	}
	return times, nil
}

func timedCase(c dpCase, ifindex int, pkt []byte) (uint32, uint32, error) {
	if c.tc() {
		return dptest.TimedTC(c.prog, pkt)
	}
	return dptest.TimedXDP(c.prog, ifindex, pkt, 1)
}

// icmpPacket builds an ICMP message from `from` to `to`: type, code, the 4 bytes after
// the checksum, and payload.
func icmpPacket(from, to netip.Addr, typ, code uint8, rest uint32, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: dptest.RouterMAC, DstMAC: dptest.ClientMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: from.AsSlice(), DstIP: to.AsSlice()}
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Id: uint16(rest >> 16), Seq: uint16(rest)}
	return dptest.Serialize(eth, ip, icmp, gopacket.Payload(payload))
}

// natReply is the backend's answer to the NAT-translated packet out: the addresses and
// ports swapped, an ACK with no payload.
func natReply(out []byte) []byte {
	p := dptest.Decode(out)
	tcp := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	src, dst := p.NetworkLayer().NetworkFlow().Endpoints()
	from, _ := netip.AddrFromSlice(dst.Raw())
	to, _ := netip.AddrFromSlice(src.Raw())
	return dptest.Packet{Src: from, Dst: to, SPort: uint16(tcp.DstPort), DPort: uint16(tcp.SrcPort), Flags: dptest.ACK}.Bytes()
}

// quote is the first n bytes of p's IP packet, as an ICMP error carries it.
func quote(p dptest.Packet, n int) []byte { return p.Bytes()[14 : 14+n] }

func verdictName(v uint32, tc bool) string {
	if tc {
		switch v {
		case dptest.TCActOK:
			return "TC_ACT_OK"
		case tcActShot:
			return "TC_ACT_SHOT"
		}
		return fmt.Sprintf("tc %d", v)
	}
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

// WriteDataplaneTable prints the per-packet figures of a part's section: per case the
// median over runs of each run's median (min–max beside it), the mean, and the ratio to
// the reference (headed ref) with its target.
func WriteDataplaneTable(w io.Writer, p Part, section, ref string) {
	fmt.Fprintf(w, "%-30s %-13s %7s %11s %7s %9s %11s  %s\n", "case", "verdict", "median", "(runs)", "mean", ref, "(runs)", "target")
	for _, f := range p.Figures {
		if f.Section != section || f.Metric != "ns/packet" {
			continue
		}
		mean, _ := p.Find(f.Section, f.Name, "mean ns/packet")
		ratio, ratioRange, target := "", "", ""
		if len(f.Compared) > 0 {
			c := f.Compared[0]
			ratio = fmt.Sprintf("%.2f", c.Ratio.Median)
			ratioRange = fmt.Sprintf("%.2f–%.2f", c.Ratio.Min, c.Ratio.Max)
			target = c.TargetText()
		}
		fmt.Fprintf(w, "%-30s %-13s %7.0f %11s %7.1f %9s %11s  %s\n", f.Name, strings.TrimPrefix(f.Note, "verdict "),
			f.Value.Median, fmt.Sprintf("%.0f–%.0f", f.Value.Min, f.Value.Max), mean.Value.Median, ratio, ratioRange, target)
	}
}
