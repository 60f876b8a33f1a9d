package lab

// A service mixing origins reached by IPIP and by tunnel, on one node: dc is a backend
// (manifold backend, IPIP) on the lab's network; home sits behind the NAT host and is
// reached only through its connector. The XDP program passes the flows its ring gives
// the local pseudo-backend (home's share) to the node's stack, where the tunnel edge
// hands them to home's connector; the others go to dc encapsulated.

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

var mixedVIP = netip.MustParseAddr("198.51.100.45")

const mixedToken = "lab-mixed-token-0123456789abcdef" // may serve web for home

// mixedService is the node's services section: web of origins dc (its backend) and
// home (by tunnel, of weight homeWeight: 1 is dc's half, 0 none).
func mixedService(dc netip.Addr, homeWeight int) string {
	return fmt.Sprintf(`  - name: web
    vip: %s
    port: 80
    origins:
      - {name: dc, capacity: 100}
      - {name: home, capacity: 100, tunnel: true, weight: %d}
    backends:
      - {address: %s, origin: dc}
`, mixedVIP, homeWeight, dc)
}

func TestMixedOrigins(t *testing.T) {
	requireManifold(t)
	if err := hostprog.Check(hostprog.Nft); err != nil {
		testenv.Missing(t, err)
	}
	l := newLabOf(t, HostSpec{Role: "client", Kind: Client}, HostSpec{Role: "lb1", Kind: LBNode},
		HostSpec{Role: "dc", Kind: Backend}, HostSpec{Role: "nat", Kind: Backend})
	client, lb1, dc, nat := l.Host("client"), l.Host("lb1"), l.Host("dc"), l.Host("nat")
	if err := l.SetupNAT(nat); err != nil {
		t.Fatal(err)
	}
	home, err := l.AddOriginBehind(nat, "home", 1)
	if err != nil {
		t.Fatal(err)
	}
	answer := func(role string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, role) }
	}
	serveHTTP(t, home, netip.AddrPortFrom(home.Addr4, 8000).String(), answer("home"))
	if _, err := l.StartBackendAgent(manifoldBin, dc, mixedVIP); err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, dc, netip.AddrPortFrom(mixedVIP, 80).String(), answer("dc"))

	ca, cert, key, err := TunnelPKI(l.Dir, lb1.Addr4)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(l.Dir, "tunnel-tokens.yaml")
	if err := os.WriteFile(tokens, fmt.Appendf(nil, "- {token: %q, services: [web], origins: [home]}\n", mixedToken), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := NodeConfig{Name: lb1.Role, Address: lb1.Addr4, Tunnels: &Tunnels{CertFile: cert, KeyFile: key, TokensFile: tokens}}
	node, err := l.StartNode(manifoldBin, lb1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// SIGHUP reloads once the node runs (before, it would end the process)
	if _, err := node.WaitLog(15*time.Second, func(line string) bool { return strings.Contains(line, "node running") }); err != nil {
		t.Fatal(err)
	}
	configure := func(homeWeight int) {
		t.Helper()
		if err := writeFileAtomic(node.ConfigPath, append(cfg.YAML(), mixedService(dc.Addr4, homeWeight)...)); err != nil {
			t.Fatal(err)
		}
		if err := node.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	configure(1)
	if err := l.RouteVIP(mixedVIP, lb1); err != nil {
		t.Fatal(err)
	}
	_, err = l.StartConnector(manifoldBin, home, "home", mixedToken, ca, []string{netip.AddrPortFrom(lb1.Addr4, 7443).String()},
		fmt.Sprintf("  - {name: web, to: %s, capacity: 100, origin: home}\n", netip.AddrPortFrom(home.Addr4, 8000)))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + netip.AddrPortFrom(mixedVIP, 80).String() + "/"
	get := func() (string, error) {
		body, err := HTTPGet(client.NS, url, 0)
		return strings.TrimSpace(body), err
	}
	// the connector attached and the service applied: home answers a request
	err = Eventually(30*time.Second, 50*time.Millisecond, func() error {
		if from, err := get(); err != nil || from != "home" {
			return fmt.Errorf("answered by %q, %v: want home's connector serving its share", from, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// weights 1 and 1: the ring splits the new connections about in half
	count := map[string]int{}
	for range 60 {
		from, err := get()
		if err != nil {
			t.Fatalf("a request of the 50/50 split failed: %v", err)
		}
		count[from]++
	}
	t.Logf("60 connections, weights 1/1: %v", count)
	if count["dc"] < 10 || count["home"] < 10 || count["dc"]+count["home"] != 60 {
		t.Errorf("60 connections answered %v: want both origins, about half each", count)
	}

	// home's weight 0 (its share 0): the local pseudo-backend drains, every new
	// connection goes to dc
	configure(0)
	err = Eventually(30*time.Second, 50*time.Millisecond, func() error {
		for range 20 {
			if from, err := get(); err != nil || from != "dc" {
				return fmt.Errorf("answered by %q, %v: want dc alone, home's share 0", from, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 60 {
		if from, err := get(); err != nil || from != "dc" {
			t.Fatalf("home's share 0: a connection answered by %q, %v", from, err)
		}
	}
}
