package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The conventional load balancers manifold is measured against, run on a lab host:
// HAProxy in TCP mode, nginx's stream proxy, and nftables DNAT set up the way
// kube-proxy does it. Each one forwards one address and port to a set of backends,
// choosing a backend per connection.

// TCPProxy is a layer-4 proxy: connections to Listen are proxied, round robin, to
// Backends. Its address must be local on the host that runs it.
type TCPProxy struct {
	Listen   netip.AddrPort
	Backends []netip.AddrPort
	// Workers is HAProxy's nbthread and nginx's worker_processes: the cores it may use.
	Workers int
}

// HAProxyConfig renders p as an HAProxy configuration: no logs, timeouts long
// enough for a benchmark's keep-alive connections.
func (p TCPProxy) HAProxyConfig() string {
	var b strings.Builder
	fmt.Fprintf(&b, `# HAProxy in TCP mode (manifold lab)
global
    nbthread %d
    maxconn 4096
defaults
    mode tcp
    timeout connect 3s
    timeout client 5m
    timeout server 5m
frontend vip
    bind %s
    default_backend backends
backend backends
    balance roundrobin
`, max(1, p.Workers), p.Listen)
	for i, be := range p.Backends {
		fmt.Fprintf(&b, "    server s%d %s\n", i+1, be)
	}
	return b.String()
}

// NginxStreamConfig renders p as the configuration of an nginx that only proxies
// streams: a master and Workers worker processes in the foreground, the listener
// split over the workers by the kernel (reuseport; without it one worker tends to
// take every connection of a burst). dir holds the pid file; loadModule is the
// load_module line the stream module needs when nginx was built with it as a dynamic
// module ("" when it is built in; see NginxStreamModule).
func (p TCPProxy) NginxStreamConfig(dir, loadModule string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# nginx stream proxy (manifold lab)
%s
daemon off;
master_process on;
worker_processes %d;
pid %s/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
stream {
    upstream backends {
`, loadModule, max(1, p.Workers), dir)
	for _, be := range p.Backends {
		fmt.Fprintf(&b, "        server %s;\n", be)
	}
	fmt.Fprintf(&b, `    }
    server {
        listen %s reuseport;
        proxy_pass backends;
    }
}
`, p.Listen)
	return b.String()
}

// StartHAProxy runs HAProxy with p's configuration on h, in the foreground (-db) with
// a master process (-W), which stops its worker on SIGTERM and exits with status 0
// (a lone worker dies of the signal); it returns once p.Listen accepts connections.
func (l *Lab) StartHAProxy(h *Host, p TCPProxy) (*Process, error) {
	name := "haproxy-" + h.Role
	path := filepath.Join(l.Dir, name+".cfg")
	if err := os.WriteFile(path, []byte(p.HAProxyConfig()), 0o644); err != nil {
		return nil, err
	}
	proc, err := l.Start(h, name, hostprog.HAProxy, "-W", "-db", "-f", path)
	if err != nil {
		return nil, err
	}
	return proc, waitListening(proc, h, p.Listen)
}

var modulesPathRe = regexp.MustCompile(`--modules-path=(\S+)`)

// NginxStreamModule returns the load_module line that nginx's stream module needs:
// "" when nginx has it built in, the path of the module when it was built as a
// dynamic one (Debian packages it in libnginx-mod-stream), an error when nginx has
// none. nginx is asked once per process.
func NginxStreamModule() (string, error) { return nginxStreamModule() }

var nginxStreamModule = sync.OnceValues(func() (string, error) {
	out, err := hostprog.Command(hostprog.Nginx, "-V").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nginx -V: %w", err)
	}
	args := string(out)
	switch {
	case strings.Contains(args, "--with-stream=dynamic"):
		dir := "/usr/lib/nginx/modules"
		if m := modulesPathRe.FindStringSubmatch(args); m != nil {
			dir = m[1]
		}
		path := filepath.Join(dir, "ngx_stream_module.so")
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("nginx's stream module is not installed (apt-get install libnginx-mod-stream): %w", err)
		}
		return "load_module " + path + ";", nil
	case strings.Contains(args, "--with-stream"):
		return "", nil
	}
	return "", errors.New("nginx was built without the stream module")
})

// StartNginxStream runs nginx as p's stream proxy on h; it returns once p.Listen
// accepts connections.
func (l *Lab) StartNginxStream(h *Host, p TCPProxy) (*Process, error) {
	module, err := NginxStreamModule()
	if err != nil {
		return nil, err
	}
	name := "nginx-stream-" + h.Role
	dir := filepath.Join(l.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(p.NginxStreamConfig(dir, module)), 0o644); err != nil {
		return nil, err
	}
	// -e: where errors go before the config is read (see StartNginx)
	proc, err := l.Start(h, name, hostprog.Nginx, "-e", "stderr", "-p", dir, "-c", conf)
	if err != nil {
		return nil, err
	}
	return proc, waitListening(proc, h, p.Listen)
}

func waitListening(p *Process, h *Host, addr netip.AddrPort) error {
	err := p.WaitReady(5*time.Second, func() error {
		c, err := DialTCP(h.NS, addr.String(), 0)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s on %s, %s: %w", p.Name, h.Role, addr, err)
	}
	return nil
}

// DNAT is a virtual address served the kube-proxy way, in the kernel: the first
// packet of a connection to VIP:Port is DNATed to a backend picked at random
// (numgen, as kube-proxy's nftables mode does), conntrack translates the rest of the
// connection, and the source is masqueraded so that the replies come back through the
// DNAT host to be translated back (kube-proxy masquerades external traffic for the
// same reason). The port is kept.
type DNAT struct {
	VIP      netip.Addr
	Port     uint16
	Backends []netip.Addr // of the VIP's family
}

// Ruleset renders d as an nftables ruleset for `nft -f`. Every DNAT goes into the
// same table (lab_dnat, of the VIP's family): applying several adds their rules to it.
func (d DNAT) Ruleset() string {
	family, match := "ip", "ip daddr"
	if d.VIP.Is6() {
		family, match = "ip6", "ip6 daddr"
	}
	var backends []string
	for i, be := range d.Backends {
		backends = append(backends, fmt.Sprintf("%d : %s", i, be))
	}
	return fmt.Sprintf(`# nftables DNAT (manifold lab), the kube-proxy way
table %[1]s lab_dnat {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		%[2]s %[3]s tcp dport %[4]d dnat to numgen random mod %[5]d map { %[6]s }
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ct status dnat ct original %[2]s %[3]s masquerade
	}
}
`, family, match, d.VIP, d.Port, len(d.Backends), strings.Join(backends, ", "))
}

// ApplyDNAT installs d's rules in h's namespace, and makes h forward the VIP's family.
func (l *Lab) ApplyDNAT(h *Host, d DNAT) error {
	if len(d.Backends) == 0 {
		return fmt.Errorf("DNAT of %s: no backends", d.VIP)
	}
	forwarding := "net.ipv4.conf.all.forwarding"
	if d.VIP.Is6() {
		forwarding = "net.ipv6.conf.all.forwarding"
	}
	if err := h.Sysctl(map[string]string{forwarding: "1"}); err != nil {
		return err
	}
	path := filepath.Join(l.Dir, fmt.Sprintf("nft-%s-%s.conf", h.Role, d.VIP))
	if err := os.WriteFile(path, []byte(d.Ruleset()), 0o644); err != nil {
		return err
	}
	return h.Exec(hostprog.Nft, "-f", path)
}

// AddLoopbackAddr makes a an address of h, on lo, as a host-length prefix: a VIP that
// a proxy on h listens on.
func (h *Host) AddLoopbackAddr(a netip.Addr) error {
	if err := h.addAddr("lo", a, a.BitLen()); err != nil {
		return err
	}
	return h.WaitLocal(3*time.Second, a)
}
