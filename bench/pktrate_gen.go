package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// The traffic generator and the counters a run is measured with.
//
//	generator thread (CPU 0, in <p>-gen): BPF_PROG_RUN(pktrate_gen, live frames)
//	    until halted ──XDP_TX──▶ <p>-gen ══veth══▶ <p>-in (device under test)
//	snapshot (sink counters, frames sent, CPU 1's ticks) at the start and the end of
//	the measured window; a RateRun is their difference.

// Generated frames: 64 bytes of Ethernet, IPv4 and UDP (FCS not included), to the
// benchmark service's VIP and port.
const (
	genFrameLen  = 64
	genSportBase = 10000
	genDport     = 53
)

// bpfFTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES (linux/bpf.h): the frames a
// program run by BPF_PROG_RUN returns XDP_TX or XDP_REDIRECT for are really sent.
const bpfFTestXDPLiveFrames = 1 << 1

// genBatchSize is the frames BPF_PROG_RUN makes between flushes to the device: as many
// as the veth's ring holds. Each flush costs the generator a wake-up of the device's
// NAPI thread (an inter-processor interrupt, dear on a virtual machine); with smaller
// batches the generator, sharing its CPU with the sink, offered less than the XDP
// paths take. What a full ring cannot hold is dropped at once, at little cost.
const genBatchSize = 256

// xdpMD mirrors struct xdp_md as BPF_PROG_RUN's context: data = 0, data_end = the frame
// length, and the device the frame "arrived" on, which XDP_TX sends it out of.
type xdpMD struct {
	Data, DataEnd, DataMeta      uint32
	IngressIfindex, RxQueueIndex uint32
	EgressIfindex                uint32
}

// genFrame builds the generator's frame, IPv4 checksum filled in, UDP checksum 0 (none).
func genFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16) []byte {
	f := make([]byte, genFrameLen)
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_IP)
	ip := f[14:34]
	ip[0] = 0x45 // version 4, 5 words
	binary.BigEndian.PutUint16(ip[2:], genFrameLen-14)
	ip[8] = 64 // TTL
	ip[9] = unix.IPPROTO_UDP
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], genFrameLen-34)
	return f
}

// ipv4Checksum is the Internet checksum of a header whose checksum field is zero.
func ipv4Checksum(hdr []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(hdr); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// genHeaderWords is the frame's start as the gen_header global holds it: 64-bit words
// in the machine's byte order, so that storing them writes the bytes in frame order.
func genHeaderWords(frame []byte) [6]uint64 {
	var w [6]uint64
	for i := range w {
		w[i] = binary.NativeEndian.Uint64(frame[8*i:])
	}
	return w
}

// macWords is the destination and source MAC as the fwd_macs global holds them.
func macWords(dst, src net.HardwareAddr) [3]uint32 {
	b := append(append([]byte{}, dst...), src...)
	return [3]uint32{binary.NativeEndian.Uint32(b[0:]), binary.NativeEndian.Uint32(b[4:]), binary.NativeEndian.Uint32(b[8:])}
}

// generator sends frames out of the generator's veth until halted.
//
// Every BPF_PROG_RUN of an XDP program swaps it in and out of the kernel's XDP
// dispatcher, and each swap waits for an RCU grace period: milliseconds on a virtual
// machine, during which nothing is sent, so calls of a few tens of ms spent half their
// time sending nothing and fed the device in bursts. So one call runs for the whole
// run, with a repeat count it never reaches, and halt ends it with a signal
// (BPF_PROG_RUN returns EINTR when one is pending). cilium/ebpf's Run restarts on
// EINTR, hence the raw system call. The frame, the context and the attributes live in
// the generator, on the heap, which does not move while the kernel reads them.
type generator struct {
	prog    *ebpf.Program
	flows   *ebpf.Variable
	ns      labNS
	ifindex int
	frame   []byte

	ctx    xdpMD
	attr   dptest.TestRunAttr
	halted atomic.Bool
	tid    atomic.Int32 // the sending thread, for halt's signal; 0 until it runs
	done   chan error
}

// start sends frames of `flows` flows from a thread in the generator's namespace
// pinned to the generator's CPU.
func (g *generator) start(flows int) error {
	if err := g.flows.Set(uint32(flows)); err != nil {
		return fmt.Errorf("generator flows: %w", err)
	}
	g.halted.Store(false)
	g.tid.Store(0)
	g.done = make(chan error, 1)
	go func() { g.done <- g.ns.do(g.send) }()
	return nil
}

func (g *generator) send() error {
	var set unix.CPUSet
	set.Set(generatorCPU)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin generator to CPU %d: %w", generatorCPU, err)
	}
	g.ctx = xdpMD{DataEnd: uint32(len(g.frame)), IngressIfindex: uint32(g.ifindex)}
	g.attr = dptest.TestRunAttr{
		ProgFD:     uint32(g.prog.FD()),
		DataSizeIn: uint32(len(g.frame)),
		DataIn:     uint64(uintptr(unsafe.Pointer(&g.frame[0]))),
		Repeat:     math.MaxUint32,
		CtxSizeIn:  uint32(unsafe.Sizeof(g.ctx)),
		CtxIn:      uint64(uintptr(unsafe.Pointer(&g.ctx))),
		Flags:      bpfFTestXDPLiveFrames,
		BatchSize:  genBatchSize,
	}
	g.tid.Store(int32(unix.Gettid()))
	for !g.halted.Load() {
		errno := dptest.ProgTestRun(&g.attr)
		// EINTR: halt's signal, or another; either way the loop's condition decides
		if errno != 0 && errno != unix.EINTR {
			return fmt.Errorf("generator: BPF_PROG_RUN live frames: %w", errno)
		}
	}
	runtime.KeepAlive(g.frame)
	return nil
}

// haltSignal interrupts the generator's system call. The Go runtime uses SIGURG to
// preempt goroutines and ignores it where it asked for nothing.
const haltSignal = unix.SIGURG

// halt stops the generator and waits for it. The signal is repeated: one sent between
// the thread's look at the flag and its system call would be lost.
func (g *generator) halt() error {
	g.halted.Store(true)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if tid := g.tid.Load(); tid != 0 {
			if err := unix.Tgkill(unix.Getpid(), int(tid), haltSignal); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("signal generator: %w", err)
			}
		}
		select {
		case err := <-g.done:
			return err
		case <-tick.C:
		}
	}
}

// sumPerCPU reads key 0 of a per-CPU array of uint64 counters, summed over the CPUs.
func sumPerCPU(m *ebpf.Map) (uint64, error) {
	var vals []uint64
	if err := m.Lookup(uint32(0), &vals); err != nil {
		return 0, fmt.Errorf("read %s: %w", m, err)
	}
	var sum uint64
	for _, v := range vals {
		sum += v
	}
	return sum, nil
}

// sinkCount reads the sink's counters, summed over the CPUs.
func sinkCount(m *ebpf.Map) (pktrateSinkCount, error) {
	var vals []pktrateSinkCount
	var sum pktrateSinkCount
	if err := m.Lookup(uint32(0), &vals); err != nil {
		return sum, fmt.Errorf("read sink counters: %w", err)
	}
	for _, v := range vals {
		sum.Packets += v.Packets
		sum.Ipip += v.Ipip
	}
	return sum, nil
}

// userHZ is the unit of /proc/stat's CPU times (USER_HZ, 100 on every architecture
// Linux runs XDP on; Go has no sysconf to ask).
const userHZ = 100

// cpuTicks are one CPU's times from /proc/stat, in USER_HZ ticks: busy is user, nice,
// system, irq, softirq and steal; total adds idle and iowait. (guest time is already
// counted in user.)
type cpuTicks struct {
	Busy, Total uint64
}

// parseCPUStat finds the line of one CPU ("cpuN ...") in the text of /proc/stat.
func parseCPUStat(stat string, cpu int) (cpuTicks, error) {
	label := "cpu" + strconv.Itoa(cpu)
	for line := range strings.Lines(stat) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != label {
			continue
		}
		if len(f) < 9 {
			return cpuTicks{}, fmt.Errorf("/proc/stat: %s: %d fields, want at least 8 times", label, len(f)-1)
		}
		var v [8]uint64 // user nice system idle iowait irq softirq steal
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return cpuTicks{}, fmt.Errorf("/proc/stat: %s: %w", label, err)
			}
			v[i] = n
		}
		busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		return cpuTicks{Busy: busy, Total: busy + v[3] + v[4]}, nil
	}
	return cpuTicks{}, fmt.Errorf("/proc/stat: no line for %s", label)
}

func readCPUTicks(cpu int) (cpuTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, err
	}
	return parseCPUStat(string(b), cpu)
}

// rateSnapshot is what the counters say at one moment.
type rateSnapshot struct {
	at     time.Time
	sent   uint64
	sink   pktrateSinkCount
	device cpuTicks
	napi   time.Duration
}

func (r *rateRig) snapshot() (rateSnapshot, error) {
	var s rateSnapshot
	var err error
	if s.sent, err = sumPerCPU(r.objs.GenSent); err != nil {
		return s, err
	}
	if s.sink, err = sinkCount(r.objs.SinkCounts); err != nil {
		return s, err
	}
	s.at = time.Now()
	if s.device, err = readCPUTicks(deviceCPU); err != nil {
		return s, err
	}
	for _, pid := range r.deviceNAPI {
		t, err := threadRuntime(pid)
		if err != nil {
			return s, fmt.Errorf("NAPI thread of the device: %w", err)
		}
		s.napi += t
	}
	return s, nil
}

// parseSchedstat reads the time a thread has spent on a CPU from the text of its
// /proc/PID/schedstat (the first of three numbers, in ns).
func parseSchedstat(text string) (time.Duration, error) {
	f := strings.Fields(text)
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat %q: want 3 fields", text)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat %q: %w", text, err)
	}
	return time.Duration(ns), nil
}

func threadRuntime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		return 0, err
	}
	return parseSchedstat(string(b))
}

// RateRun is one measured run of one path.
type RateRun struct {
	Path     string        `json:"path"`
	Flows    int           `json:"flows"`
	Round    int           `json:"round"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Sent     uint64        `json:"sent"`     // frames the generator made
	Received uint64        `json:"received"` // frames counted at the sink
	IPIP     uint64        `json:"ipip"`     // of them IPv4-in-IPv4
	// Device is the device core's ticks over the run.
	Device cpuTicks `json:"device_ticks"`
	// NAPI is the CPU time of the device's NAPI thread, where all of the device's
	// forwarding runs: unlike the core's busy time it leaves out whatever else the
	// machine runs on that core.
	NAPI time.Duration `json:"napi_ns"`
}

// between turns two snapshots into a run.
func between(a, b rateSnapshot) (RateRun, error) {
	if !b.at.After(a.at) || b.sent < a.sent || b.sink.Packets < a.sink.Packets || b.device.Total < a.device.Total ||
		b.device.Busy < a.device.Busy || b.napi < a.napi {
		return RateRun{}, errors.New("counters went backwards between snapshots")
	}
	return RateRun{
		Elapsed:  b.at.Sub(a.at),
		Sent:     b.sent - a.sent,
		Received: b.sink.Packets - a.sink.Packets,
		IPIP:     b.sink.Ipip - a.sink.Ipip,
		Device:   cpuTicks{Busy: b.device.Busy - a.device.Busy, Total: b.device.Total - a.device.Total},
		NAPI:     b.napi - a.napi,
	}, nil
}

// Mpps is the rate at the sink, in millions of packets per second.
func (r RateRun) Mpps() float64 { return mpps(r.Received, r.Elapsed) }

// GeneratorMpps is the offered rate.
func (r RateRun) GeneratorMpps() float64 { return mpps(r.Sent, r.Elapsed) }

func mpps(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e6
}

// NsPerPacket is the device core's busy time per packet delivered to the sink: what
// forwarding one packet cost, dropped ones included (0 without packets).
func (r RateRun) NsPerPacket() float64 {
	if r.Received == 0 {
		return 0
	}
	return float64(r.Device.Busy) * (1e9 / userHZ) / float64(r.Received)
}

// NAPINsPerPacket is the device's NAPI thread's CPU time per packet at the sink.
func (r RateRun) NAPINsPerPacket() float64 {
	if r.Received == 0 {
		return 0
	}
	return float64(r.NAPI.Nanoseconds()) / float64(r.Received)
}

// NAPIBusy is the share of the run the device's NAPI thread was on the CPU.
func (r RateRun) NAPIBusy() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return r.NAPI.Seconds() / r.Elapsed.Seconds()
}

// DeviceBusy is the share of the run the device core was busy.
func (r RateRun) DeviceBusy() float64 {
	if r.Device.Total == 0 {
		return 0
	}
	return float64(r.Device.Busy) / float64(r.Device.Total)
}

// saturatedBusy is the device core's busy share below which a run measured the
// generator rather than the device: the device waited for packets.
const saturatedBusy = 0.9

// GeneratorLimited reports whether the device core had time to spare.
func (r RateRun) GeneratorLimited() bool { return r.DeviceBusy() < saturatedBusy }

// CoreShared reports whether the device core was busy but much of it with other work
// than the device's: the machine's other tasks, which the core's busy time, and so
// ns/packet, then counts as the device's.
func (r RateRun) CoreShared() bool {
	return !r.GeneratorLimited() && r.NAPIBusy() < saturatedBusy*r.DeviceBusy()
}
