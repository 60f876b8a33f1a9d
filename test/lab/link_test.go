package lab

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The link's settings in these tests: the defaults for the probes (docs/configuration.md).
const (
	linkTunnels  = 4
	linkInterval = 100 * time.Millisecond
	linkFall     = 3
	linkRise     = 3
	linkPort     = 51820
	linkFlows    = 64 // of each family, hashed over 4 tunnels: every one gets some (a miss: 4·(3/4)^64 ≈ 10^-8)
	echoPort     = 7000
	flowPayload  = 64 << 10
)

var (
	siteA  = netip.MustParsePrefix("10.1.0.0/16")
	siteB  = netip.MustParsePrefix("10.2.0.0/16")
	siteA6 = netip.MustParsePrefix("fd10:1::/48")
	siteB6 = netip.MustParsePrefix("fd10:2::/48")
)

// linkLab is two sites, A and B, whose gateways meet on the lab's router (the WAN),
// with one host behind each gateway.
type linkLab struct {
	*Lab
	gwA, gwB, hostA, hostB *Host
	keyA, keyB             WireGuardKey
}

func newLinkLab(t *testing.T) *linkLab {
	t.Helper()
	requireLab(t)
	if err := hostprog.Check(hostprog.Nft, hostprog.IP); err != nil {
		testenv.Missing(t, err)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	ll := &linkLab{Lab: newLabOf(t, HostSpec{Role: "gwa", Kind: Gateway}, HostSpec{Role: "gwb", Kind: Gateway})}
	ll.gwA, ll.gwB = ll.Host("gwa"), ll.Host("gwb")
	var err error
	addr := netip.MustParseAddr
	if ll.hostA, err = ll.AddSiteHost(ll.gwA, "hosta", addr("10.1.0.1"), addr("10.1.0.2"), addr("fd10:1::1"), addr("fd10:1::2")); err != nil {
		t.Fatal(err)
	}
	if ll.hostB, err = ll.AddSiteHost(ll.gwB, "hostb", addr("10.2.0.1"), addr("10.2.0.2"), addr("fd10:2::1"), addr("fd10:2::2")); err != nil {
		t.Fatal(err)
	}
	if ll.keyA, err = NewWireGuardKey(); err != nil {
		t.Fatal(err)
	}
	if ll.keyB, err = NewWireGuardKey(); err != nil {
		t.Fatal(err)
	}
	return ll
}

// startLinks starts the link on gwA, then on gwB, with these configs.
func (ll *linkLab) startLinks(t *testing.T, cfgA, cfgB LinkConfig) (pa, pb *Process) {
	t.Helper()
	pa, err := ll.StartLink(manifoldBin, ll.gwA, "link-gwa", cfgA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err = ll.StartLink(manifoldBin, ll.gwB, "link-gwb", cfgB)
	if err != nil {
		t.Fatal(err)
	}
	return pa, pb
}

// configs returns both sides' files; timeout is their connect_timeout.
func (ll *linkLab) configs(timeout time.Duration) (a, b LinkConfig) {
	a = LinkConfig{Name: "ab", Local: ll.gwA.Addr4, Remote: ll.gwB.Addr4, LocalPrefixes: []netip.Prefix{siteA, siteA6}, Prefixes: []netip.Prefix{siteB, siteB6},
		Tunnels: linkTunnels, Key: ll.keyA, PeerPublicKey: ll.keyB.Public, Interval: linkInterval, Rise: linkRise, Fall: linkFall, ConnectTimeout: timeout}
	b = a
	b.Local, b.Remote, b.LocalPrefixes, b.Prefixes, b.Key, b.PeerPublicKey = a.Remote, a.Local, a.Prefixes, a.LocalPrefixes, ll.keyB, ll.keyA.Public
	return a, b
}

// waitRoute waits until the link on gw routes over exactly the tunnels want.
func waitRoute(p *Process, gw *Host, timeout time.Duration, want []int) error {
	return p.WaitReady(timeout, func() error {
		st, err := LinkStatus(gw)
		if err != nil {
			return err
		}
		if got := InRoute(st); !slices.Equal(got, want) || st.Route == "" {
			return fmt.Errorf("%s: tunnels in the route %v (%q), want %v", gw.Role, got, st.Route, want)
		}
		return nil
	})
}

// echoServer answers every line on every connection, in hostB, on both its addresses.
func echoServer(t *testing.T, h *Host) {
	for _, a := range []netip.Addr{h.Addr4, h.Addr6} {
		var ln net.Listener
		err := InNamespace(h.NS, func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(a, echoPort).String())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					_, _ = io.Copy(c, c)
				}()
			}
		}()
	}
}

// flow is one long-lived TCP connection from hostA to hostB's echo server.
type flow struct {
	conn *net.TCPConn
	r    *bufio.Reader
}

// roundTrip sends n bytes and a newline and reads them back within timeout.
func (f *flow) roundTrip(n int, timeout time.Duration) error {
	f.conn.SetDeadline(time.Now().Add(timeout))
	msg := strings.Repeat("x", n) + "\n"
	if _, err := f.conn.Write([]byte(msg)); err != nil {
		return err
	}
	got, err := f.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg {
		return fmt.Errorf("echoed %d bytes, sent %d", len(got), len(msg))
	}
	return nil
}

func (f *flow) port() int { return f.conn.LocalAddr().(*net.TCPAddr).Port }

// tunnelsOf finds the tunnel of every flow by traffic: each flow in turn sends 64 KiB
// and the one tunnel whose inner bytes sent grew by that much carries it.
func (ll *linkLab) tunnelsOf(t *testing.T, flows []*flow) []int {
	t.Helper()
	devs := make([]int, len(flows))
	for i, f := range flows {
		before := txBytes(t, ll.gwA)
		if err := f.roundTrip(flowPayload, 10*time.Second); err != nil {
			t.Fatalf("flow %d: %v", i, err)
		}
		after := txBytes(t, ll.gwA)
		devs[i] = -1
		for tn := range after {
			if after[tn]-before[tn] >= flowPayload {
				devs[i] = tn
			}
		}
		if devs[i] < 0 {
			t.Fatalf("flow %d: no tunnel's counter grew by the %d bytes it sent: %v → %v", i, flowPayload, before, after)
		}
	}
	return devs
}

// TestLink runs a link of four tunnels between two sites: flows spread over every
// tunnel, a tunnel whose UDP port the WAN drops leaves the route within interval ×
// fall and its flows go on over the others while the others' connections stay on
// their tunnels, it comes back once the port passes again; stopped, the link leaves
// nothing behind; with a wrong key it installs nothing and says why.
func TestLink(t *testing.T) {
	ll := newLinkLab(t)
	policyBefore, err := ll.gwA.SysctlValue("net.ipv4.fib_multipath_hash_policy")
	if err != nil {
		t.Fatal(err)
	}
	cfgA, cfgB := ll.configs(0)
	pa, pb := ll.startLinks(t, cfgA, cfgB)
	all := []int{0, 1, 2, 3}
	for _, side := range []struct {
		p  *Process
		gw *Host
	}{{pa, ll.gwA}, {pb, ll.gwB}} {
		// WireGuard retries a lost first handshake after 5 s: two retries on a loaded machine
		if err := waitRoute(side.p, side.gw, 30*time.Second, all); err != nil {
			t.Fatal(err)
		}
	}
	st, err := LinkStatus(ll.gwA)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("route: %s", st.Route)
	if st.Route != "resilient" {
		t.Logf("this kernel has no resilient next-hop groups: flows of healthy tunnels may move (not checked)")
	}

	// Many flows of each family, each found on one tunnel by its traffic, spread over
	// all of them.
	echoServer(t, ll.hostB)
	flows := make([]*flow, 2*linkFlows)
	for i := range flows {
		to := ll.hostB.Addr4
		if i >= linkFlows {
			to = ll.hostB.Addr6
		}
		c, err := DialTCP(ll.hostA.NS, netip.AddrPortFrom(to, echoPort).String(), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		flows[i] = &flow{conn: c, r: bufio.NewReaderSize(c, 1<<17)}
	}
	if st.Route == "resilient" {
		if err := WaitBalanced(pa, ll.gwA, ll.gwB); err != nil {
			t.Fatal(err)
		}
	}
	devs := ll.tunnelsOf(t, flows)
	perTunnel := make([]int, linkTunnels)
	for i, fam := range []string{"IPv4", "IPv6"} {
		perFamily := make([]int, linkTunnels)
		for _, d := range devs[i*linkFlows : (i+1)*linkFlows] {
			perFamily[d]++
			perTunnel[d]++
		}
		t.Logf("%s flows per tunnel: %v", fam, perFamily)
		for tn, n := range perFamily {
			if n == 0 {
				t.Errorf("tunnel %d carries none of %d %s flows: they do not spread", tn, linkFlows, fam)
			}
		}
	}

	// Break the tunnel carrying flow 0: the WAN drops its UDP port both ways.
	broken := devs[0]
	port := fmt.Sprint(linkPort + broken)
	nft := func(args ...string) {
		t.Helper()
		if err := ll.Router.Exec(hostprog.Nft, args...); err != nil {
			t.Fatal(err)
		}
	}
	nft("add", "table", "inet", "linktest")
	nft("add", "chain", "inet", "linktest", "filter", "{ type filter hook forward priority 0; }")
	start := time.Now()
	nft("add", "rule", "inet", "linktest", "filter", "udp", "dport", port, "drop")
	nft("add", "rule", "inet", "linktest", "filter", "udp", "sport", port, "drop")
	rest := slices.DeleteFunc(slices.Clone(all), func(i int) bool { return i == broken })
	if err := waitRoute(pa, ll.gwA, 10*time.Second, rest); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// The bound: interval × fall, plus the probe in flight when the port closed (one
	// interval), plus slack for a 2-core machine shared with compilers (the status is
	// polled every 20 ms and the link runs with the race detector).
	bound := linkInterval*linkFall + linkInterval + 700*time.Millisecond
	t.Logf("tunnel %d left gateway A's route %s after its port closed (interval × fall = %s)", broken, took.Round(time.Millisecond), linkInterval*linkFall)
	if took > bound {
		t.Errorf("tunnel %d left the route after %s, bound %s", broken, took, bound)
	}
	if err := waitRoute(pb, ll.gwB, 5*time.Second, rest); err != nil {
		t.Fatal(err)
	}
	// Every flow goes on (tunnelsOf fails on one that does not); those of the broken
	// tunnel over the others, the others' on their own tunnels.
	devsDown := ll.tunnelsOf(t, flows)
	moved := 0
	for i := range flows {
		switch {
		case devsDown[i] == broken:
			t.Errorf("flow %d still on the broken tunnel %d", i, broken)
		case devs[i] != broken && devsDown[i] != devs[i]:
			moved++
			if st.Route == "resilient" {
				t.Errorf("flow %d moved from the healthy tunnel %d to %d", i, devs[i], devsDown[i])
			}
		}
	}
	t.Logf("%d flows of the broken tunnel went on over the others; %d of the healthy tunnels' %d moved", perTunnel[broken], moved, len(flows)-perTunnel[broken])

	// Restored: the tunnel comes back after rise answered probes.
	nft("delete", "table", "inet", "linktest")
	for _, side := range []struct {
		p  *Process
		gw *Host
	}{{pa, ll.gwA}, {pb, ll.gwB}} {
		if err := waitRoute(side.p, side.gw, 10*time.Second, all); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range flows {
		if err := f.roundTrip(1024, 5*time.Second); err != nil {
			t.Errorf("flow %d after the tunnel came back: %v", i, err)
		}
	}
	if st, err := LinkStatus(ll.gwA); err == nil {
		tn := st.Tunnels[broken]
		if tn.Transitions != 3 || tn.ProbesLost < linkFall || tn.Handshakes == 0 || tn.LastProbeRTTMillis <= 0 {
			t.Errorf("tunnel %d's status after a failure and a return: %+v", broken, tn)
		}
	}

	// Stopped, the links leave nothing behind.
	for _, p := range []*Process{pa, pb} {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	ll.requireClean(t, policyBefore)
}

// txBytes reads the tunnels' inner bytes sent, by tunnel, from a gateway's status.
func txBytes(t *testing.T, gw *Host) map[int]uint64 {
	t.Helper()
	st, err := LinkStatus(gw)
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]uint64{}
	for _, tn := range st.Tunnels {
		m[tn.Index] = tn.TxBytes
	}
	return m
}

// requireClean fails unless gateway A has no tunnel device, no route to site B (of
// either family), no next hop, and its multipath hash policy as before.
func (ll *linkLab) requireClean(t *testing.T, policy string) {
	t.Helper()
	for cmd, args := range map[string][]string{
		"devices":     {"-br", "link"},
		"routes":      {"route"},
		"IPv6 routes": {"-6", "route"},
		"next hops":   {"nexthop"},
	} {
		out, err := ll.gwA.Output(hostprog.IP, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "mlink") || strings.Contains(out, siteB.Addr().String()) || strings.Contains(out, "fd10:2:") ||
			(cmd == "next hops" && strings.TrimSpace(out) != "") {
			t.Errorf("gateway A's %s after the link: %s", cmd, out)
		}
	}
	if got, _ := ll.gwA.SysctlValue("net.ipv4.fib_multipath_hash_policy"); got != policy {
		t.Errorf("fib_multipath_hash_policy %s after the link, %s before", got, policy)
	}
}

// TestLinkRefuses: a wrong key installs nothing and says why; remote prefixes the host
// already routes are refused before anything is made.
func TestLinkRefuses(t *testing.T) {
	ll := newLinkLab(t)
	policyBefore, err := ll.gwA.SysctlValue("net.ipv4.fib_multipath_hash_policy")
	if err != nil {
		t.Fatal(err)
	}
	cfgA, cfgB := ll.configs(3 * time.Second)
	wrong, err := NewWireGuardKey()
	if err != nil {
		t.Fatal(err)
	}
	cfgA.PeerPublicKey = wrong.Public
	cfgB.ConnectTimeout = 0 // the default, 30 s: B waits for A throughout
	pb, err := ll.StartLink(manifoldBin, ll.gwB, "link-gwb", cfgB)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := ll.StartLink(manifoldBin, ll.gwA, "link-gwa", cfgA)
	if err != nil {
		t.Fatal(err)
	}
	// While it waits for a handshake that never comes, nothing is routed.
	if _, err := pa.WaitLog(5*time.Second, func(l string) bool { return strings.Contains(l, "waiting for the peer") }); err != nil {
		t.Fatal(err)
	}
	if out, _ := ll.gwA.Output(hostprog.IP, "route", "show", siteB.String()); strings.TrimSpace(out) != "" {
		t.Errorf("a route before any tunnel answered: %s", out)
	}
	if err := pa.Wait(10 * time.Second); err == nil || !strings.Contains(pa.Log(), "keys do not match") || !strings.Contains(pa.Log(), ll.keyA.Public) {
		t.Errorf("a link with a wrong peer key: exit %v, log:\n%s", err, pa.Log())
	}
	ll.requireClean(t, policyBefore)
	if err := pb.Stop(); err != nil {
		t.Fatal(err)
	}

	// A route to part of site B already on gateway A: refused, nothing made.
	if err := ll.gwA.Exec(hostprog.IP, "route", "add", "10.2.5.0/24", "dev", ll.hostA.RouterLink); err != nil {
		t.Fatal(err)
	}
	cfgA, _ = ll.configs(3 * time.Second)
	pa, err = ll.StartLink(manifoldBin, ll.gwA, "link-gwa-overlap", cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if err := pa.Wait(10 * time.Second); err == nil || !strings.Contains(pa.Log(), "overlaps the host's route to 10.2.5.0/24") {
		t.Errorf("a link whose prefixes overlap a route: exit %v, log:\n%s", err, pa.Log())
	}
	if err := ll.gwA.Exec(hostprog.IP, "route", "del", "10.2.5.0/24"); err != nil {
		t.Fatal(err)
	}
	ll.requireClean(t, policyBefore)
}
