package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// nginxConf is one backend's web server: a single foreground process (no master, so
// SIGTERM stops it and nothing outlives it) that names its backend on every path.
// Errors go to stderr, the process log; every file it could write lives in its own
// directory.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    keepalive_timeout 300s;
    keepalive_requests 100000;
    server {
        listen 0.0.0.0:80;
        listen [::]:80 ipv6only=on;
        default_type text/plain;
        location / { return 200 "%[2]s\n"; }
    }
}
`

// StartNginx runs nginx in h's namespace, answering every request with h's role and a
// newline, on port 80 of every IPv4 and IPv6 address; it returns once both listen.
func (l *Lab) StartNginx(h *Host) (*Process, error) {
	name := "nginx-" + h.Role
	dir := filepath.Join(l.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, h.Role), 0o644); err != nil {
		return nil, err
	}
	// -e: where errors go before the config is read, or nginx opens /var/log/nginx.
	p, err := l.Start(h, name, hostprog.Nginx, "-e", "stderr", "-p", dir, "-c", conf)
	if err != nil {
		return nil, err
	}
	for _, a := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		err := p.WaitReady(5*time.Second, func() error {
			c, err := DialTCP(h.NS, netip.AddrPortFrom(a, 80).String(), 0)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			return p, fmt.Errorf("nginx on %s, %s: %w", h.Role, a, err)
		}
	}
	return p, nil
}
