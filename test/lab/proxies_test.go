package lab

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

var testProxy = TCPProxy{
	Listen:   netip.MustParseAddrPort("198.51.100.12:80"),
	Backends: []netip.AddrPort{netip.MustParseAddrPort("10.0.3.2:80"), netip.MustParseAddrPort("[fd00:0:4::2]:8080")},
	Workers:  2,
}

// The rendered configurations are checked by the programs that read them, in their
// check-only modes, and for the settings the benchmark's method relies on.

func TestHAProxyConfig(t *testing.T) {
	cfg := testProxy.HAProxyConfig()
	for _, want := range []string{"nbthread 2\n", "mode tcp\n", "bind 198.51.100.12:80\n", "balance roundrobin\n",
		"server s1 10.0.3.2:80\n", "server s2 [fd00:0:4::2]:8080\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if err := hostprog.Check(hostprog.HAProxy); err != nil {
		testenv.Missing(t, err)
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := hostprog.Command(hostprog.HAProxy, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
}

func TestNginxStreamConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := testProxy.NginxStreamConfig(dir, "")
	for _, want := range []string{"worker_processes 2;\n", "server 10.0.3.2:80;\n", "server [fd00:0:4::2]:8080;\n",
		"listen 198.51.100.12:80 reuseport;\n", "proxy_pass backends;\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if err := hostprog.Check(hostprog.Nginx, hostprog.Unshare, hostprog.Sh, hostprog.IP); err != nil {
		testenv.Missing(t, err)
	}
	module, err := NginxStreamModule()
	if err != nil {
		testenv.Missing(t, err)
	}
	testenv.NeedRoot(t, "needs root: nginx -t binds a reuseport listener, in a namespace of its own")
	// With reuseport, nginx -t opens the listener: give it an address it can have, in a
	// namespace of its own.
	local := testProxy
	local.Listen = netip.MustParseAddrPort("127.0.0.1:80")
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(local.NginxStreamConfig(dir, module)), 0o644); err != nil {
		t.Fatal(err)
	}
	ip, _ := hostprog.IP.Path()
	nginx, _ := hostprog.Nginx.Path()
	sh, _ := hostprog.Sh.Path()
	check := ip + " link set lo up && exec " + nginx + " -t -q -e stderr -p " + dir + " -c " + path
	if out, err := hostprog.Command(hostprog.Unshare, "--net", sh, "-c", check).CombinedOutput(); err != nil {
		t.Errorf("nginx -t: %v\n%s", err, out)
	}
}

func TestDNATRuleset(t *testing.T) {
	v4 := DNAT{VIP: netip.MustParseAddr("198.51.100.11"), Port: 80,
		Backends: []netip.Addr{netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.4.2")}}
	v6 := DNAT{VIP: netip.MustParseAddr("2001:db8:100::11"), Port: 8080,
		Backends: []netip.Addr{netip.MustParseAddr("fd00:0:3::2")}}
	for _, c := range []struct {
		d    DNAT
		want []string
	}{
		{v4, []string{"table ip lab_dnat {",
			"ip daddr 198.51.100.11 tcp dport 80 dnat to numgen random mod 2 map { 0 : 10.0.3.2, 1 : 10.0.4.2 }\n",
			"ct status dnat ct original ip daddr 198.51.100.11 masquerade\n"}},
		{v6, []string{"table ip6 lab_dnat {",
			"ip6 daddr 2001:db8:100::11 tcp dport 8080 dnat to numgen random mod 1 map { 0 : fd00:0:3::2 }\n",
			"ct status dnat ct original ip6 daddr 2001:db8:100::11 masquerade\n"}},
	} {
		rules := c.d.Ruleset()
		for _, want := range c.want {
			if !strings.Contains(rules, want) {
				t.Errorf("ruleset lacks %q:\n%s", want, rules)
			}
		}
		if os.Geteuid() != 0 {
			continue // nft -c needs netlink, and that root
		}
		if err := hostprog.Check(hostprog.Nft); err != nil {
			testenv.Missing(t, err)
		}
		path := filepath.Join(t.TempDir(), "dnat.nft")
		if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
		// -c: check only, nothing is committed to this namespace's ruleset
		if out, err := hostprog.Command(hostprog.Nft, "-c", "-f", path).CombinedOutput(); err != nil {
			t.Errorf("nft -c: %v\n%s\n%s", err, out, rules)
		}
	}
}

// Every way of reaching the backends that the HTTP benchmark measures answers with
// the backends' own body, and reaches each of them: a mode that is broken, or that
// reaches something else, fails here before it gives a benchmark figure.
func TestLBComparison(t *testing.T) {
	requireLab(t)
	if err := hostprog.Check(hostprog.HAProxy, hostprog.Nft); err != nil {
		testenv.Missing(t, err)
	}
	if _, err := NginxStreamModule(); err != nil {
		testenv.Missing(t, err)
	}
	if buildErr != nil {
		t.Fatalf("cannot build manifold (make build shows the same): %v", buildErr)
	}
	c, err := NewLBComparison(LBComparisonSpec{Prefix: prefix, Dir: t.TempDir(), Logf: t.Logf,
		Manifold: manifoldBin, Backends: 2, ProxyWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	t.Cleanup(func() { c.Dump(t) })

	if err := c.WaitServing(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// keep-alive, as the benchmark's wrk: several requests on one connection
	for _, m := range c.Modes {
		conn, err := DialKeepAlive(c.Client.NS, URL(m.Addrs[0], 80), 0)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		for range 3 {
			body, err := conn.Do()
			if err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
			if len(body) != 13 || !strings.HasPrefix(body, "web-server-") {
				t.Errorf("%s: body %q, want a backend's 13-byte name and newline", m.Name, body)
			}
		}
		conn.Close()
	}
}
