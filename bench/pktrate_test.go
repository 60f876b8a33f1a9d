package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/manifoldlb/manifold/internal/testenv"
)

const procStat = `cpu  183490 0 104509 412117 1703 0 1863 55 0 0
cpu0 90950 0 53536 206441 313 0 763 22 0 0
cpu1 92539 7 50973 205676 1389 11 1099 33 5 0
intr 11451168 0 0 0
ctxt 4000
`

func TestParseCPUStat(t *testing.T) {
	got, err := parseCPUStat(procStat, 1)
	if err != nil {
		t.Fatal(err)
	}
	// busy: user nice system irq softirq steal; guest (5) is inside user already
	busy := uint64(92539 + 7 + 50973 + 11 + 1099 + 33)
	if want := (cpuTicks{Busy: busy, Total: busy + 205676 + 1389}); got != want {
		t.Errorf("cpu1 = %+v, want %+v", got, want)
	}
	if _, err := parseCPUStat(procStat, 2); err == nil {
		t.Error("cpu2 is not in the text, want an error")
	}
	if _, err := parseCPUStat("cpu1 1 2 3\n", 1); err == nil {
		t.Error("a short cpu line, want an error")
	}
	if _, err := parseCPUStat("cpu1 1 2 3 x 5 6 7 8\n", 1); err == nil {
		t.Error("a field that is not a number, want an error")
	}
}

func TestReadCPUTicksOfThisMachine(t *testing.T) {
	c, err := readCPUTicks(0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Total == 0 || c.Busy > c.Total {
		t.Errorf("cpu0 ticks %+v", c)
	}
}

func TestParseSchedstat(t *testing.T) {
	if d, err := parseSchedstat("1234567 890 12\n"); err != nil || d != 1234567*time.Nanosecond {
		t.Errorf("got %v, %v; want 1.234567ms", d, err)
	}
	for _, bad := range []string{"", "1 2", "x 2 3"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
	if _, err := threadRuntime(os.Getpid()); err != nil {
		t.Errorf("this process's schedstat: %v", err)
	}
}

func TestBetweenIsTheDifference(t *testing.T) {
	t0 := time.Now()
	a := rateSnapshot{at: t0, sent: 100, sink: pktrateSinkCount{Packets: 50, Ipip: 40}, device: cpuTicks{Busy: 10, Total: 20}, napi: time.Second}
	b := rateSnapshot{at: t0.Add(2 * time.Second), sent: 8_000_100, sink: pktrateSinkCount{Packets: 6_000_050, Ipip: 6_000_040},
		device: cpuTicks{Busy: 200, Total: 220}, napi: 3 * time.Second}
	r, err := between(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := RateRun{Elapsed: 2 * time.Second, Sent: 8_000_000, Received: 6_000_000, IPIP: 6_000_000, Device: cpuTicks{Busy: 190, Total: 200}, NAPI: 2 * time.Second}
	if r != want {
		t.Errorf("run %+v, want %+v", r, want)
	}
	if _, err := between(b, a); err == nil {
		t.Error("counters going backwards, want an error")
	}
}

func TestRateArithmetic(t *testing.T) {
	// 3 Mpps for 2 s on a core busy 1.9 s of 2 s: 1.9e9 ns / 6e6 packets
	r := RateRun{Elapsed: 2 * time.Second, Sent: 8_000_000, Received: 6_000_000, Device: cpuTicks{Busy: 190, Total: 200}, NAPI: 1800 * time.Millisecond}
	approx := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9*want || d < -1e-9*want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	approx("Mpps", r.Mpps(), 3)
	approx("GeneratorMpps", r.GeneratorMpps(), 4)
	approx("NsPerPacket", r.NsPerPacket(), 1.9e9/6e6)
	approx("NAPINsPerPacket", r.NAPINsPerPacket(), 1.8e9/6e6)
	approx("DeviceBusy", r.DeviceBusy(), 0.95)
	approx("NAPIBusy", r.NAPIBusy(), 0.9)
	if r.GeneratorLimited() || r.CoreShared() {
		t.Errorf("a saturated device doing its own work: limited %v, shared %v", r.GeneratorLimited(), r.CoreShared())
	}
	if (RateRun{}).NsPerPacket() != 0 || (RateRun{}).Mpps() != 0 || (RateRun{}).DeviceBusy() != 0 {
		t.Error("an empty run must give zeros, not NaN")
	}

	idle := RateRun{Elapsed: time.Second, Received: 1, Device: cpuTicks{Busy: 63, Total: 100}, NAPI: 600 * time.Millisecond}
	if !idle.GeneratorLimited() || idle.CoreShared() {
		t.Error("a device core 63 % busy: the generator is the limit")
	}
	shared := RateRun{Elapsed: time.Second, Received: 1, Device: cpuTicks{Busy: 100, Total: 100}, NAPI: 300 * time.Millisecond}
	if shared.GeneratorLimited() || !shared.CoreShared() {
		t.Error("a core busy all the time, 30 % of it with the device: shared")
	}
}

func TestIsNAPIThreadOf(t *testing.T) {
	for _, c := range []struct {
		comm, dev string
		want      bool
	}{
		{"napi/mfr-in-8195", "mfr-in", true},
		{"napi/mfr-in2-8195", "mfr-in", false},
		{"napi/mfr-in-", "mfr-in", false},
		{"napi/mfr-sink", "mfr-sink", false},
		{"napi/abcdefghij", "abcdefghijkl-in", true}, // cut at 15 bytes by an older kernel
		{"napi/abcdefghiX", "abcdefghijkl-in", false},
		{"kworker/1:0", "mfr-in", false},
	} {
		if got := isNAPIThreadOf(c.comm, c.dev); got != c.want {
			t.Errorf("isNAPIThreadOf(%q, %q) = %v", c.comm, c.dev, got)
		}
	}
}

func TestGenFrame(t *testing.T) {
	dst := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	src := net.HardwareAddr{2, 0, 0, 0, 0, 2}
	f := genFrame(dst, src, labGenAddr, benchVIP4, 12345, 53)
	if len(f) != 64 {
		t.Fatalf("frame of %d bytes, want 64", len(f))
	}
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if eth == nil || ip == nil || udp == nil {
		t.Fatalf("not Ethernet/IPv4/UDP:\n%s", p.Dump())
	}
	if !bytes.Equal(eth.DstMAC, dst) || !bytes.Equal(eth.SrcMAC, src) {
		t.Errorf("MACs %s → %s", eth.SrcMAC, eth.DstMAC)
	}
	if ip.SrcIP.String() != labGenAddr.String() || ip.DstIP.String() != benchVIP4.String() || ip.Length != 50 || ip.TTL == 0 {
		t.Errorf("IPv4 header %+v", ip)
	}
	if ipv4Checksum(f[14:34]) != 0 {
		t.Error("IPv4 checksum does not verify")
	}
	if udp.SrcPort != 12345 || udp.DstPort != 53 || udp.Length != 30 || udp.Checksum != 0 {
		t.Errorf("UDP header %+v", udp)
	}
	// the program stores the words as they are, so they must hold the frame's bytes
	var back []byte
	for _, v := range genHeaderWords(f) {
		back = binary.NativeEndian.AppendUint64(back, v)
	}
	if !bytes.Equal(back, f[:48]) {
		t.Error("gen_header words do not hold the frame's first 48 bytes")
	}
}

func TestNftRulesetIsKubeProxyShaped(t *testing.T) {
	r := nftRuleset()
	for _, want := range []string{
		"type nat hook prerouting priority dstnat",
		"198.51.100.10 . udp . 53 : goto service-udp4",
		"numgen random mod 10 vmap",
		"9 : goto endpoint-10 }",
		"dnat to 10.2.0.10:53",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, r)
		}
	}
}

// syntheticRuns: every path and flow count over 3 rounds; manifold at 4 Mpps and
// 250 ns/packet, nftables at 0.8 Mpps and 1250 ns, the minimal IPIP forwarder at
// 4.5 Mpps and 225 ns, the others in between; round 1 a third slower for everyone.
func syntheticRuns() []RateRun {
	perPacket := map[string]float64{
		PathManifold: 250, PathMinimalIPIP: 225, PathMinimalRedirect: 200, PathKernel: 1000, PathNftables: 1250,
	}
	var runs []RateRun
	for round := range 3 {
		slow := 1.0
		if round == 1 {
			slow = 1.5
		}
		for _, p := range pktratePaths {
			for _, flows := range DefaultPktrateFlows {
				ns := perPacket[p.name] * slow
				received := uint64(1e9 / ns) // a core busy all of one second
				ipip := uint64(0)
				if p.name == PathManifold || p.name == PathMinimalIPIP {
					ipip = received
				}
				runs = append(runs, RateRun{Path: p.name, Flows: flows, Round: round, Elapsed: time.Second,
					Sent: 5_000_000, Received: received, IPIP: ipip, Device: cpuTicks{Busy: 100, Total: 100}, NAPI: time.Second})
			}
		}
	}
	return runs
}

func TestPktratePart(t *testing.T) {
	part := PktratePart(syntheticRuns(), PktrateOptions{})
	if want := len(pktratePaths) * len(DefaultPktrateFlows) * len(pktrateMetrics); len(part.Figures) != want {
		t.Fatalf("%d figures, want %d", len(part.Figures), want)
	}
	ns, ok := part.Find(PktrateSection, "manifold, 10000 flows", MetricNsPerPacket)
	if !ok {
		t.Fatal("no figure \"manifold, 10000 flows\" ns/packet")
	}
	if !statNear(ns.Value, Stat{250, 250, 375}) || len(ns.Runs) != 3 {
		t.Errorf("manifold ns/packet %+v", ns)
	}
	want := map[string]Comparison{
		"nftables DNAT, 10000 flows":              {Ratio: Stat{0.2, 0.2, 0.2}, Target: &Target{Op: "<=", Value: 0.25, Met: true}},
		"minimal XDP IPIP forwarder, 10000 flows": {Ratio: Stat{250.0 / 225, 250.0 / 225, 250.0 / 225}, Target: &Target{Op: "<=", Value: 1.25, Met: true}},
		"kernel forwarding, 10000 flows":          {Ratio: Stat{0.25, 0.25, 0.25}},
	}
	if len(ns.Compared) != len(want) {
		t.Fatalf("comparisons %+v", ns.Compared)
	}
	for _, c := range ns.Compared {
		w, ok := want[c.Reference]
		if !ok {
			t.Errorf("unexpected reference %q", c.Reference)
			continue
		}
		if !statNear(c.Ratio, w.Ratio) || (c.Target == nil) != (w.Target == nil) || (c.Target != nil && *c.Target != *w.Target) {
			t.Errorf("vs %s: %+v (target %+v), want %+v (target %+v)", c.Reference, c.Ratio, c.Target, w.Ratio, w.Target)
		}
	}
	pps, _ := part.Find(PktrateSection, "manifold, 1 flow", MetricMpps)
	for _, c := range pps.Compared {
		if c.Reference == "nftables DNAT, 1 flow" && (c.Target == nil || c.Target.Op != ">=" || c.Target.Value != 4 || !c.Target.Met) {
			t.Errorf("manifold Mpps vs nftables: %+v target %+v, want ≥ 4 met", c.Ratio, c.Target)
		}
		if c.Reference == "minimal XDP IPIP forwarder, 1 flow" && (c.Target == nil || c.Target.Value != 0.8 || !c.Target.Met) {
			t.Errorf("manifold Mpps vs minimal IPIP: %+v target %+v, want ≥ 0.8 met", c.Ratio, c.Target)
		}
	}
	napi, _ := part.Find(PktrateSection, "manifold, 1 flow", MetricNAPINsPerPacket)
	for _, c := range napi.Compared {
		if c.Target != nil {
			t.Errorf("NAPI thread ns/packet carries a target vs %s", c.Reference)
		}
	}
	gen, _ := part.Find(PktrateSection, "kernel forwarding, 1 flow", MetricGeneratorMpps)
	if len(gen.Compared) != 0 || gen.Value.Median != 5 {
		t.Errorf("generator Mpps %+v", gen)
	}
	if ns.Note != "device core 100 % busy" {
		t.Errorf("note %q", ns.Note)
	}
	if !strings.Contains(part.Method, "BPF_F_TEST_XDP_LIVE_FRAMES") || !strings.Contains(part.Method, "3 rounds") {
		t.Errorf("method: %s", part.Method)
	}
	var buf bytes.Buffer
	WritePktrateTable(&buf, part)
	if !strings.Contains(buf.String(), "ratio to nftables DNAT, 1 flow") || !strings.Contains(buf.String(), "≥ 4× met") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func statNear(a, b Stat) bool {
	close := func(x, y float64) bool { return x-y < 1e-6*y && y-x < 1e-6*y } // whole packets
	return close(a.Min, b.Min) && close(a.Median, b.Median) && close(a.Max, b.Max)
}

func TestRunsNote(t *testing.T) {
	base := RateRun{Elapsed: time.Second, Received: 1000, IPIP: 1000, Device: cpuTicks{Busy: 99, Total: 100}, NAPI: 990 * time.Millisecond}
	limited := base
	limited.Device.Busy, limited.NAPI = 63, 630*time.Millisecond
	if n := runsNote(PathKernel, []RateRun{base, limited, base}); n != "generator-limited in 1 of 3 runs: device core 63–99 % busy" {
		t.Errorf("note %q", n)
	}
	shared := base
	shared.NAPI = 400 * time.Millisecond
	if n := runsNote(PathKernel, []RateRun{shared}); !strings.Contains(n, "device core shared with other work in 1 of 1 runs") {
		t.Errorf("note %q", n)
	}
	plain := base
	plain.IPIP = 500
	if n := runsNote(PathManifold, []RateRun{plain}); !strings.Contains(n, "only 50.0 % of the packets at the sink were IPIP") {
		t.Errorf("note %q", n)
	}
}

// TestPktrateSmoke runs every path for a moment in a real lab: packets must reach the
// sink on each, encapsulated on the IPIP paths and only there.
func TestPktrateSmoke(t *testing.T) {
	testenv.NeedRoot(t, "needs root: network namespaces and XDP")
	prefix := os.Getenv("MANIFOLD_LAB_PREFIX")
	if prefix == "" {
		prefix = DefaultPktratePrefix
	}
	// a prefix of its own, so that a benchmark running meanwhile keeps its lab
	opts := PktrateOptions{Prefix: prefix[:min(len(prefix), maxPrefix-1)] + "t", Rounds: 1, Measure: 200 * time.Millisecond, Warmup: 50 * time.Millisecond}
	var out bytes.Buffer
	part, runs, err := Pktrate(context.Background(), &out, opts)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range runs {
		name := r.Path + ", " + flowsName(r.Flows)
		seen[name] = true
		if r.Received == 0 {
			t.Errorf("%s: no packets reached the sink (generator sent %d)", name, r.Sent)
			continue
		}
		encap := r.Path == PathManifold || r.Path == PathMinimalIPIP
		if encap && r.IPIP != r.Received {
			t.Errorf("%s: %d of %d packets at the sink were IPIP, want all", name, r.IPIP, r.Received)
		}
		if !encap && r.IPIP != 0 {
			t.Errorf("%s: %d IPIP packets at the sink, want none", name, r.IPIP)
		}
	}
	for _, p := range pktratePaths {
		for _, f := range DefaultPktrateFlows {
			if name := p.name + ", " + flowsName(f); !seen[name] {
				t.Errorf("no run of %s", name)
			}
		}
	}
	if _, ok := part.Find(PktrateSection, "manifold, 10000 flows", MetricMpps); !ok {
		t.Error("no manifold figure in the part")
	}
	for _, ns := range []string{"-gen", "-dut", "-sink"} {
		if _, err := os.Stat("/run/netns/" + opts.Prefix + ns); err == nil {
			t.Errorf("namespace %s%s left behind", opts.Prefix, ns)
		}
	}
}
