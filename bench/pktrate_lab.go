package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The packet-rate lab: three namespaces in a line, each link a veth pair.
//
//	<p>-gen                 <p>-dut                          <p>-sink
//	<p>-gen ───────────── <p>-in   [program under test]
//	10.1.1.2              10.1.1.1        <p>-out ───────────── <p>-sink
//	                                      10.1.2.1              10.1.2.2
//	BPF_PROG_RUN live                     route: backends       XDP: count, drop
//	frames, CPU 0                         via sink              NAPI thread on CPU 0
//	                      NAPI thread on CPU 1 (the device core)
//
// veth has no interrupts: a veth with an XDP program receives in a NAPI instance that
// runs in softirq on whichever CPU scheduled it, here the generator's. Threaded NAPI
// turns each instance into a kernel thread named napi/<dev>-<id>, which can be pinned;
// so the device under test runs on CPU 1 alone, and its busy time there is its cost.

var (
	labGenAddr  = netip.MustParseAddr("10.1.1.2")
	labInAddr   = netip.MustParseAddr("10.1.1.1")
	labOutAddr  = netip.MustParseAddr("10.1.2.1")
	labSinkAddr = netip.MustParseAddr("10.1.2.2")
	// Backends of the benchmark's service sit behind the sink: the sink's address is
	// their next hop, and the sink counts what is sent to them.
	labBackends = netip.MustParsePrefix("10.2.0.0/24")
)

// labBackend is the i-th backend (1-based).
func labBackend(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, 0, byte(i)}) }

// CPUs of the lab: the generator (and the sink, and this process) on one, the device
// under test alone on the other.
const (
	generatorCPU = 0
	deviceCPU    = 1
)

// maxPrefix keeps "<prefix>-sink" within a Linux interface name (15 bytes).
const maxPrefix = 10

type rateLab struct {
	prefix          string
	gen, dut, sink  labNS
	genLink, inLink *net.Interface // genLink in gen, inLink in dut
	outLink         *net.Interface // in dut
	sinkLink        *net.Interface // in sink
	sinkXDP         link.Link
}

type labNS struct {
	name string
	h    netns.NsHandle
	nl   *netlink.Handle
}

func (l *rateLab) nsNames() []string {
	return []string{l.prefix + "-gen", l.prefix + "-dut", l.prefix + "-sink"}
}

// newRateLab removes what an earlier run with this prefix left and builds the lab. On
// error it removes what it made.
func newRateLab(prefix string) (l *rateLab, err error) {
	if prefix == "" || len(prefix) > maxPrefix || strings.ContainsAny(prefix, "/. ") {
		return nil, fmt.Errorf("lab prefix %q: want 1 to %d characters, no '/', '.' or space", prefix, maxPrefix)
	}
	if runtime.NumCPU() <= deviceCPU {
		return nil, fmt.Errorf("the packet-rate lab needs CPUs %d and %d, this machine has %d", generatorCPU, deviceCPU, runtime.NumCPU())
	}
	l = &rateLab{prefix: prefix}
	if err := l.removeNamespaces(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
			l = nil
		}
	}()
	names := l.nsNames()
	for i, ns := range []*labNS{&l.gen, &l.dut, &l.sink} {
		if *ns, err = addNamespace(names[i]); err != nil {
			return l, err
		}
	}
	if l.genLink, l.inLink, err = l.vethPair(l.gen, prefix+"-gen", labGenAddr, l.dut, prefix+"-in", labInAddr); err != nil {
		return l, err
	}
	if l.outLink, l.sinkLink, err = l.vethPair(l.dut, prefix+"-out", labOutAddr, l.sink, prefix+"-sink", labSinkAddr); err != nil {
		return l, err
	}
	// Forwarding is on in every measurement, not only the kernel's: bpf_fib_lookup
	// answers only for interfaces that forward. rp_filter off: nothing here is spoofed,
	// but the check would be work the XDP paths do not do.
	err = l.dut.sysctl(map[string]string{
		"net.ipv4.conf.all.forwarding":                    "1",
		"net.ipv4.conf." + l.inLink.Name + ".forwarding":  "1",
		"net.ipv4.conf." + l.outLink.Name + ".forwarding": "1",
		"net.ipv4.conf.all.rp_filter":                     "0",
		"net.ipv4.conf." + l.inLink.Name + ".rp_filter":   "0",
	})
	if err != nil {
		return l, err
	}
	// A permanent neighbour: the sink answers no ARP (its XDP program drops
	// everything), and the XDP paths' FIB lookup needs the next hop's link-layer address.
	err = l.dut.nl.NeighSet(&netlink.Neigh{
		LinkIndex: l.outLink.Index, State: netlink.NUD_PERMANENT,
		IP: labSinkAddr.AsSlice(), HardwareAddr: l.sinkLink.HardwareAddr,
	})
	if err != nil {
		return l, fmt.Errorf("%s: neighbour %s: %w", l.dut.name, labSinkAddr, err)
	}
	if err := l.routeViaSink(labBackends); err != nil {
		return l, err
	}
	return l, nil
}

// sinkRoute is a route of the device's through the sink.
func (l *rateLab) sinkRoute(dst netip.Prefix) *netlink.Route {
	return &netlink.Route{Dst: prefixIPNet(dst), Gw: labSinkAddr.AsSlice(), LinkIndex: l.outLink.Index}
}

func (l *rateLab) routeViaSink(dst netip.Prefix) error {
	if err := l.dut.nl.RouteReplace(l.sinkRoute(dst)); err != nil {
		return fmt.Errorf("%s: route %s via %s: %w", l.dut.name, dst, labSinkAddr, err)
	}
	return nil
}

// attachSink puts prog, which counts and drops, on the sink's veth, whose NAPI thread
// shares the generator's CPU.
func (l *rateLab) attachSink(prog *ebpf.Program) error {
	var err error
	if l.sinkXDP, err = attachXDP(l.sink, l.sinkLink, prog); err != nil {
		return err
	}
	pids, err := l.sink.threadedNAPI(l.sinkLink.Name, generatorCPU)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := unix.Setpriority(unix.PRIO_PROCESS, pid, sinkNice); err != nil {
			return fmt.Errorf("sink NAPI thread %d: nice %d: %w", pid, sinkNice, err)
		}
	}
	return nil
}

// sinkNice is the sink NAPI thread's nice level. It shares its CPU with the generator,
// which never sleeps; at the same level the scheduler lets the generator run for
// milliseconds before the sink, while 256 frames fill the sink's ring in tens of
// microseconds and the rest are lost, and the device, fed in bursts, idles between
// them. Favoured, the sink takes each handful of frames as it comes.
const sinkNice = -20

// vethPair joins namespaces a and b with a veth pair, addresses both ends (/24) and
// brings them up.
func (l *rateLab) vethPair(a labNS, aName string, aAddr netip.Addr, b labNS, bName string, bAddr netip.Addr) (*net.Interface, *net.Interface, error) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(b.h)}
	if err := a.nl.LinkAdd(veth); err != nil {
		return nil, nil, fmt.Errorf("veth %s:%s ↔ %s:%s: %w", a.name, aName, b.name, bName, err)
	}
	var ifcs [2]*net.Interface
	for i, end := range []struct {
		ns   labNS
		name string
		addr netip.Addr
	}{{a, aName, aAddr}, {b, bName, bAddr}} {
		lk, err := end.ns.nl.LinkByName(end.name)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: link %s: %w", end.ns.name, end.name, err)
		}
		addr := &netlink.Addr{IPNet: prefixIPNet(netip.PrefixFrom(end.addr, 24))}
		if err := end.ns.nl.AddrAdd(lk, addr); err != nil {
			return nil, nil, fmt.Errorf("%s: address %s on %s: %w", end.ns.name, end.addr, end.name, err)
		}
		if err := end.ns.nl.LinkSetUp(lk); err != nil {
			return nil, nil, fmt.Errorf("%s: %s up: %w", end.ns.name, end.name, err)
		}
		ifcs[i] = &net.Interface{Index: lk.Attrs().Index, Name: end.name, HardwareAddr: lk.Attrs().HardwareAddr}
	}
	return ifcs[0], ifcs[1], nil
}

// Close detaches the sink's program and deletes the namespaces, and with them the
// veths. It is safe to call more than once.
func (l *rateLab) Close() error {
	var errs []error
	if l.sinkXDP != nil {
		errs = append(errs, l.sinkXDP.Close())
		l.sinkXDP = nil
	}
	for _, ns := range []*labNS{&l.gen, &l.dut, &l.sink} {
		ns.close()
	}
	errs = append(errs, l.removeNamespaces())
	return errors.Join(errs...)
}

// removeNamespaces deletes this lab's namespaces, by name: only those this benchmark
// makes, never another lab's that shares the prefix.
func (l *rateLab) removeNamespaces() error {
	var errs []error
	for _, name := range l.nsNames() {
		if _, err := os.Stat(filepath.Join("/run/netns", name)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if out, err := hostprog.Command(hostprog.IP, "netns", "del", name).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", name, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// addNamespace makes a named namespace (so that `ip netns exec` finds it, for nft and
// sysfs) with its loopback up.
func addNamespace(name string) (labNS, error) {
	ns := labNS{name: name}
	if out, err := hostprog.Command(hostprog.IP, "netns", "add", name).CombinedOutput(); err != nil {
		return ns, fmt.Errorf("ip netns add %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	var err error
	if ns.h, err = netns.GetFromName(name); err != nil {
		return ns, fmt.Errorf("namespace %s: %w", name, err)
	}
	if ns.nl, err = netlink.NewHandleAt(ns.h); err != nil {
		ns.close()
		return ns, fmt.Errorf("netlink in %s: %w", name, err)
	}
	lo, err := ns.nl.LinkByName("lo")
	if err == nil {
		err = ns.nl.LinkSetUp(lo)
	}
	if err != nil {
		ns.close()
		return ns, fmt.Errorf("%s: loopback up: %w", name, err)
	}
	// No IPv6 on the interfaces made afterwards: they would send router solicitations
	// and MLD reports of their own, which the sink would count with the traffic.
	err = ns.sysctl(map[string]string{"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"})
	if err != nil {
		ns.close()
		return ns, err
	}
	return ns, nil
}

func (ns *labNS) close() {
	if ns.nl != nil {
		ns.nl.Close()
		ns.nl = nil
	}
	if ns.h.IsOpen() {
		ns.h.Close()
	}
}

// do runs fn on an OS thread switched into the namespace: ifindexes in XDP attachment
// and in BPF_PROG_RUN's context are looked up in the calling thread's namespace.
func (ns labNS) do(fn func() error) error {
	if err := dptest.InNamespace(ns.h, fn); err != nil {
		return fmt.Errorf("namespace %s: %w", ns.name, err)
	}
	return nil
}

// exec runs a short command in the namespace and returns its error with its output.
func (ns labNS) exec(stdin string, prog hostprog.Program, args ...string) error {
	cmd := hostprog.InNetns(context.Background(), ns.name, prog, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %s %s: %w: %s", ns.name, prog.Name(), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sysctl writes net.* settings of the namespace.
func (ns labNS) sysctl(settings map[string]string) error {
	return ns.do(func() error {
		for k, v := range settings {
			path := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(path, []byte(v), 0); err != nil {
				return fmt.Errorf("%s: sysctl %s=%s: %w", ns.name, k, v, err)
			}
		}
		return nil
	})
}

// attachXDP attaches prog to ifc in native (driver) mode.
func attachXDP(ns labNS, ifc *net.Interface, prog *ebpf.Program) (link.Link, error) {
	var l link.Link
	err := ns.do(func() error {
		var err error
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: XDP on %s: %w", ns.name, ifc.Name, err)
	}
	return l, nil
}

// threadedNAPI puts dev's NAPI instances into kernel threads, pins them to cpu and
// returns their pids. A veth has NAPI only while it has an XDP program, and gets a new
// instance (and thread) with each attachment, so this runs after every attach. The
// threaded setting is in sysfs, which shows the devices of the namespace that mounted
// it: hence `ip netns exec`, which mounts the namespace's own.
func (ns labNS) threadedNAPI(dev string, cpu int) ([]int, error) {
	if err := ns.exec("", hostprog.Sh, "-c", "echo 1 > /sys/class/net/"+dev+"/threaded"); err != nil {
		return nil, err
	}
	var pids []int
	deadline := time.Now().Add(2 * time.Second)
	for {
		var err error
		if pids, err = napiThreads(dev); err != nil {
			return nil, err
		}
		if len(pids) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no napi/%s-* kernel thread after enabling threaded NAPI", ns.name, dev)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var set unix.CPUSet
	set.Set(cpu)
	for _, pid := range pids {
		if err := unix.SchedSetaffinity(pid, &set); err != nil {
			return nil, fmt.Errorf("pin napi thread %d of %s to CPU %d: %w", pid, dev, cpu, err)
		}
	}
	return pids, nil
}

// napiThreads returns the pids of the threaded-NAPI kernel threads of dev. Devices of
// other namespaces may share the name; the lab's names carry its prefix.
func napiThreads(dev string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue // gone meanwhile
		}
		if isNAPIThreadOf(strings.TrimSpace(string(comm)), dev) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// isNAPIThreadOf reports whether a thread named comm is a NAPI thread of dev. Older
// kernels cut thread names at 15 bytes, which may cut into the device name.
func isNAPIThreadOf(comm, dev string) bool {
	want := "napi/" + dev + "-"
	if strings.HasPrefix(comm, want) {
		return len(comm) > len(want)
	}
	return len(comm) == 15 && strings.HasPrefix(want, comm)
}

// pinProcess binds every thread of this process to cpu and returns what undoes it.
// Threads made later inherit the binding from the thread that makes them, so the Go
// runtime's own work (the garbage collector, timers) stays off the device core too.
func pinProcess(cpu int) (func(), error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	apply := func(s *unix.CPUSet) error {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, s); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity %d: %w", tid, err)
			}
		}
		return nil
	}
	restore := func() { _ = apply(&old) }
	if err := apply(&set); err != nil {
		restore()
		return nil, err
	}
	return restore, nil
}

func prefixIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
