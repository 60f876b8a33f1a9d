package link

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// routeNS is a named network namespace with four veth pairs standing for tunnels.
type routeNS struct {
	name    string
	handle  netns.NsHandle
	tunnels []*tunnel
}

func newRouteNS(t *testing.T) *routeNS {
	t.Helper()
	testenv.NeedRoot(t, "needs root (network namespaces)")
	if err := hostprog.Check(hostprog.IP); err != nil {
		testenv.Missing(t, err)
	}
	r := &routeNS{name: fmt.Sprintf("mflinkroute-%d", os.Getpid())}
	if out, err := hostprog.Command(hostprog.IP, "netns", "add", r.name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = hostprog.Command(hostprog.IP, "netns", "del", r.name).Run() })
	var err error
	if r.handle, err = netns.GetFromName(r.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.handle.Close() })
	r.in(t, func() error {
		for i := range 4 {
			name := fmt.Sprintf("tun%d", i)
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
				return err
			}
			for _, n := range []string{name, name + "p", "lo"} {
				l, err := netlink.LinkByName(n)
				if err != nil {
					return err
				}
				if err := netlink.LinkSetUp(l); err != nil {
					return err
				}
			}
			l, _ := netlink.LinkByName(name)
			r.tunnels = append(r.tunnels, &tunnel{index: i, name: name, ifindex: l.Attrs().Index})
		}
		lo, _ := netlink.LinkByName("lo")
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: hostNet(netip.MustParseAddr("10.1.0.1"))})
	})
	return r
}

// in runs fn with this goroutine's thread inside the namespace.
func (r *routeNS) in(t *testing.T, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(r.handle); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

var getDev = regexp.MustCompile(`\bdev (tun\d)`)

// tunnelsOf asks the namespace's kernel which tunnel each of n TCP flows takes.
func (r *routeNS) tunnelsOf(t *testing.T, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range n {
		b, err := hostprog.InNetns(context.Background(), r.name, hostprog.IP, "route", "get", "10.2.0.1", "from", "10.1.0.1",
			"ipproto", "tcp", "sport", fmt.Sprint(20000+i), "dport", "80").CombinedOutput()
		m := getDev.FindSubmatch(b)
		if err != nil || m == nil {
			t.Fatalf("ip route get: %v: %s", err, b)
		}
		out[i] = string(m[1])
	}
	return out
}

// moved counts the flows of the tunnels still up that changed tunnel.
func moved(before, after []string, gone string) (healthy, moved int) {
	for i := range before {
		if before[i] == gone {
			continue
		}
		healthy++
		if after[i] != before[i] {
			moved++
		}
	}
	return healthy, moved
}

// With a resilient group no flow of a healthy tunnel moves when one leaves; with a
// multipath route some do (hash-threshold), which is why the group is preferred. Both
// remove everything they made.
func TestRoutersMoveFlows(t *testing.T) {
	r := newRouteNS(t)
	prefixes := []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
	const flows = 400
	for _, kind := range []string{"resilient", "multipath"} {
		t.Run(kind, func(t *testing.T) {
			var rt router
			r.in(t, func() (err error) {
				// the namespace's own: /proc/sys/net is the writing thread's namespace's
				if err := os.WriteFile("/proc/sys/net/ipv4/fib_multipath_hash_policy", []byte("1"), 0); err != nil {
					return err
				}
				if kind == "resilient" {
					rt, err = newResilient("test", r.tunnels, r.tunnels, prefixes)
					return err
				}
				m := &multipath{prefixes: prefixes}
				rt = m
				return m.route(r.tunnels)
			})
			before := r.tunnelsOf(t, flows)
			per := map[string]int{}
			for _, d := range before {
				per[d]++
			}
			if len(per) != 4 {
				t.Fatalf("%d flows over %d of 4 tunnels: %v", flows, len(per), per)
			}
			gone := r.tunnels[1]
			r.in(t, func() error { return rt.route([]*tunnel{r.tunnels[0], r.tunnels[2], r.tunnels[3]}) })
			after := r.tunnelsOf(t, flows)
			healthy, n := moved(before, after, gone.name)
			for i := range after {
				if after[i] == gone.name {
					t.Fatalf("flow %d still on %s after it left", i, gone.name)
				}
			}
			t.Logf("%s: tunnel 1 of 4 left: %d of the other tunnels' %d flows moved", kind, n, healthy)
			switch {
			case kind == "resilient" && n != 0:
				t.Errorf("resilient group: %d flows of healthy tunnels moved", n)
			case kind == "multipath" && n == 0:
				t.Errorf("multipath: no flow of a healthy tunnel moved; docs/links.md says hash-threshold moves some")
			}
			r.in(t, func() error { rt.remove(); return nil })
			out, err := hostprog.InNetns(context.Background(), r.name, hostprog.IP, "route").CombinedOutput()
			nh, _ := hostprog.InNetns(context.Background(), r.name, hostprog.IP, "nexthop").CombinedOutput()
			if err != nil || strings.Contains(string(out), "10.2.0.0") || strings.TrimSpace(string(nh)) != "" {
				t.Errorf("left behind: %v\n%s%s", err, out, nh)
			}
		})
	}
}
