package lab

// Client addresses through a tunnel: an nginx origin behind a NAT host that lets
// nothing in reads the PROXY header the connector writes and logs the address and port
// it gives; the client connects from IPv4 and IPv6 through a real edge (manifold run)
// and connector (manifold connect).
//
//	client ── router ── lb1 (manifold run: edge; vip4, vip6 routed to it)
//	            └── nat ── org1 (manifold connect + nginx: 8081 proxy_protocol, 8080 plain)

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

const (
	ppToken              = "lab-pp-token-0123456789abcdef"
	ppProxied, ppPlain   = 8081, 8080 // the origin's ports: with the PROXY header, without
	ppPortV1, ppPortV2   = 81, 82     // the services' ports on each VIP
	ppPortOff            = 80
	ppConnectorName      = "org1"
	ppConnectorAttaching = 30 * time.Second
)

var ppVIPs = []netip.Addr{netip.MustParseAddr("198.51.100.41"), netip.MustParseAddr("2001:db8:100::41")}

func TestTunnelProxyProtocol(t *testing.T) {
	requireManifold(t)
	if err := hostprog.Check(hostprog.Nft); err != nil {
		testenv.Missing(t, err)
	}
	l := newLabOf(t, HostSpec{Role: "client", Kind: Client}, HostSpec{Role: "lb1", Kind: LBNode}, HostSpec{Role: "nat", Kind: Backend})
	client, lb, nat := l.Host("client"), l.Host("lb1"), l.Host("nat")
	if err := l.SetupNAT(nat); err != nil {
		t.Fatal(err)
	}
	org, err := l.AddOriginBehind(nat, "org1", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, accessLog, err := l.StartNginxProxyProtocol(org, ppProxied, ppPlain)
	if err != nil {
		t.Fatal(err)
	}

	ca, cert, key, err := TunnelPKI(l.Dir, lb.Addr4)
	if err != nil {
		t.Fatal(err)
	}
	type service struct {
		name  string
		vip   netip.AddrPort
		proxy string // proxy_protocol
	}
	var services []service
	var names []string
	cfg := NodeConfig{Name: lb.Role, Address: lb.Addr4, Address6: lb.Addr6}
	var entries strings.Builder // the connector's services
	for _, vip := range ppVIPs {
		family := "ipv4"
		if vip.Is6() {
			family = "ipv6"
		}
		for _, s := range []service{{"v1-" + family, netip.AddrPortFrom(vip, ppPortV1), "v1"},
			{"v2-" + family, netip.AddrPortFrom(vip, ppPortV2), "v2"}, {"off-" + family, netip.AddrPortFrom(vip, ppPortOff), ""}} {
			services, names = append(services, s), append(names, s.name)
			cfg.Services = append(cfg.Services, Service{Name: s.name, VIP: vip, Port: s.vip.Port(), Tunnel: true, ProxyProtocol: s.proxy})
			to := netip.AddrPortFrom(org.Addr4, ppPlain)
			if s.proxy != "" {
				to = netip.AddrPortFrom(org.Addr4, ppProxied)
			}
			fmt.Fprintf(&entries, "  - {name: %s, to: %s}\n", s.name, to)
		}
	}
	tokens := filepath.Join(l.Dir, "tunnel-tokens.yaml")
	if err := os.WriteFile(tokens, fmt.Appendf(nil, "- {token: %q, services: [%s]}\n", ppToken, strings.Join(names, ", ")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Tunnels = &Tunnels{CertFile: cert, KeyFile: key, TokensFile: tokens}
	if _, err := l.StartNode(manifoldBin, lb, cfg); err != nil {
		t.Fatal(err)
	}
	for _, vip := range ppVIPs {
		if err := l.RouteVIP(vip, lb); err != nil {
			t.Fatal(err)
		}
	}
	edge := []string{netip.AddrPortFrom(lb.Addr4, 7443).String()}
	if _, err := l.StartConnector(manifoldBin, org, ppConnectorName, ppToken, ca, edge, entries.String()); err != nil {
		t.Fatal(err)
	}
	api := NewNodeAPI(lb)
	err = Eventually(ppConnectorAttaching, 50*time.Millisecond, func() error {
		var st wire.TunnelsStatus
		if err := api.Get("/api/v1/tunnels", &st); err != nil {
			return err
		}
		for _, tn := range st.Tunnels {
			if tn.Connector == ppConnectorName && len(tn.Services) == len(services) {
				return nil
			}
		}
		return fmt.Errorf("connector %s not attached with its %d services: %+v", ppConnectorName, len(services), st.Tunnels)
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, s := range services {
		t.Run(s.name, func(t *testing.T) {
			conn, err := DialTCP(client.NS, s.vip.String(), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			from := netip.MustParseAddrPort(conn.LocalAddr().String())
			uri := fmt.Sprintf("/%s/%d", s.name, from.Port())
			_ = conn.SetDeadline(time.Now().Add(RequestTimeout))
			if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\n\r\n", uri); err != nil {
				t.Fatal(err)
			}
			answer, err := io.ReadAll(conn)
			if err != nil || !strings.HasPrefix(string(answer), "HTTP/1.1 200") {
				t.Fatalf("answer %q, %v; want 200", answer, err)
			}
			line := waitLogLine(t, accessLog, "uri="+uri+" ")
			t.Logf("client %s, the origin logged: %s", from, line)
			got := logFields(line)
			// the connection the origin sees is the connector's; the header, the client's
			want := map[string]string{"status": "200", "remote": org.Addr4.String(), "client": "-", "client_port": "-", "vip": "-", "vip_port": "-"}
			if s.proxy != "" {
				want["client"], want["client_port"] = from.Addr().String(), fmt.Sprint(from.Port())
				want["vip"], want["vip_port"] = s.vip.Addr().String(), fmt.Sprint(s.vip.Port())
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("the origin logged %s=%s, want %s (line: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// waitLogLine waits for the line of the access log at path that holds key.
func waitLogLine(t *testing.T, path, key string) string {
	t.Helper()
	var line string
	err := Eventually(10*time.Second, 20*time.Millisecond, func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for l := range strings.Lines(string(data)) {
			if strings.Contains(l, key) {
				line = strings.TrimSpace(l)
				return nil
			}
		}
		return fmt.Errorf("no line with %q in %s:\n%s", key, path, data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// logFields are an access log line's key=value fields, addresses in Go's form.
func logFields(line string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		if a, err := netip.ParseAddr(v); err == nil {
			v = a.String()
		}
		out[k] = v
	}
	return out
}
