package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// nginxHead and nginxTempPaths open every nginx config of the lab: a single
// foreground process (no master, so SIGTERM stops it and nothing outlives it), errors
// to stderr (the process log), every file it could write in its own directory %[1]s.
const nginxHead = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
`

const nginxTempPaths = `    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
`

// nginxConf is one backend's web server, which names its backend on every path.
const nginxConf = nginxHead + `http {
    access_log off;
` + nginxTempPaths + `    keepalive_timeout 300s;
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
	return l.startNginx(h, name, fmt.Sprintf(nginxConf, dir, h.Role),
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 80), netip.AddrPortFrom(netip.IPv6Loopback(), 80))
}

// nginxProxyProtocolConf is an origin that reads the PROXY header (either version)
// on one port and none on another, and logs, for every request, the addresses and
// ports the header gave ("-" without one) beside the connection's own address.
const nginxProxyProtocolConf = nginxHead + `http {
    log_format addresses 'uri=$request_uri status=$status remote=$remote_addr '
                         'client=$proxy_protocol_addr client_port=$proxy_protocol_port '
                         'vip=$proxy_protocol_server_addr vip_port=$proxy_protocol_server_port';
    access_log %[1]s/access.log addresses;
` + nginxTempPaths + `    server {
        listen %[2]d proxy_protocol;
        listen %[3]d;
        default_type text/plain;
        location / { return 200 "ok\n"; }
    }
}
`

// StartNginxProxyProtocol runs nginx in h's namespace on every IPv4 address: on port
// proxied it reads a PROXY header first, on plain none; it returns once both listen,
// with the path of its access log (nginxProxyProtocolConf's format).
func (l *Lab) StartNginxProxyProtocol(h *Host, proxied, plain uint16) (*Process, string, error) {
	name := "nginx-pp-" + h.Role
	dir := filepath.Join(l.Dir, name)
	p, err := l.startNginx(h, name, fmt.Sprintf(nginxProxyProtocolConf, dir, proxied, plain),
		netip.AddrPortFrom(h.Addr4, proxied), netip.AddrPortFrom(h.Addr4, plain))
	return p, filepath.Join(dir, "access.log"), err
}

// startNginx runs nginx named name of config conf in h's namespace, in a directory of
// its own, and returns once each of ready takes connections.
func (l *Lab) startNginx(h *Host, name, conf string, ready ...netip.AddrPort) (*Process, error) {
	dir := filepath.Join(l.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	// -e: where errors go before the config is read, or nginx opens /var/log/nginx.
	p, err := l.Start(h, name, hostprog.Nginx, "-e", "stderr", "-p", dir, "-c", path)
	if err != nil {
		return nil, err
	}
	for _, at := range ready {
		err := p.WaitReady(5*time.Second, func() error {
			c, err := DialTCP(h.NS, at.String(), 0)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			return p, fmt.Errorf("nginx on %s, %s: %w", h.Role, at, err)
		}
	}
	return p, nil
}
