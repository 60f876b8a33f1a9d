package lab

// A service mixing origins reached by IPIP and by tunnel, on one node of a fleet: dc
// is a backend (manifold backend, IPIP) on the lab's network; home sits behind the NAT
// host and is reached only through its connector. The XDP program passes the flows
// its ring gives the local pseudo-backend (home's share) to the node's stack, where
// the tunnel edge hands them to home's connector; the others go to dc encapsulated.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

var mixedVIP = netip.MustParseAddr("198.51.100.45")

const mixedToken = "lab-mixed-token-0123456789abcdef" // may serve web for home

// Steering shares are written to the store as the controller writes them, so that
// the test sets them exactly (the controller's decisions are tested in
// TestSteering and TestTunnelSteering); the node reads and applies them.
func TestMixedOrigins(t *testing.T) {
	requireManifold(t)
	if err := hostprog.Check(hostprog.Nft, hostprog.Etcd); err != nil {
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
	etcd, err := l.StartEtcd(lb1)
	if err != nil {
		t.Fatal(err)
	}
	tunnels := &Tunnels{CertFile: cert, KeyFile: key, TokensFile: tokens}
	cfg := NodeConfig{Name: lb1.Role, Site: "ams", Address: lb1.Addr4, Tunnels: tunnels, Fleet: &Fleet{Endpoints: etcd.Endpoints()}}
	// the lab's NodeConfig knows no origins: the service is written here
	services := string(NodeConfig{Name: "import", Address: lb1.Addr4, Tunnels: tunnels}.YAML()) + fmt.Sprintf(`  - name: web
    vip: %s
    port: 80
    origins:
      - {name: dc, capacity: 100}
      - {name: home, capacity: 100, tunnel: true}
    backends:
      - {address: %s, origin: dc}
`, mixedVIP, dc.Addr4)
	if err := l.FleetImportFile(manifoldBin, lb1, cfg, []byte(services), false); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartNode(manifoldBin, lb1, cfg); err != nil {
		t.Fatal(err)
	}
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
	// the service applied and the connector attached: home answers its share (weights
	// 1 and 1 until shares are written)
	err = Eventually(30*time.Second, 50*time.Millisecond, func() error {
		if from, err := get(); err != nil || from != "home" {
			return fmt.Errorf("answered by %q, %v: want home's connector serving its share", from, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	api := NewNodeAPI(lb1)
	setShares := func(shares map[string]float64) {
		t.Helper()
		st, _ := json.Marshal(wire.Steering{Service: "web", Round: 1, Leader: "test", Shares: wire.Shares{"ams": shares}})
		if err := etcdPut(etcd.Members[0], config.DefaultFleetPrefix+"/steering/web", st); err != nil {
			t.Fatal(err)
		}
		err := Eventually(20*time.Second, 50*time.Millisecond, func() error {
			st, err := api.Steering()
			if err != nil {
				return err
			}
			for _, s := range st.Services {
				if s.Service == "web" && maps.Equal(s.Shares["ams"], shares) {
					return nil
				}
			}
			return fmt.Errorf("the node read %+v, want web's ams shares %v", st.Services, shares)
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// shares 50/50: the ring splits the new connections about in half
	setShares(map[string]float64{"dc": 0.5, "home": 0.5})
	count := map[string]int{}
	for range 60 {
		from, err := get()
		if err != nil {
			t.Fatalf("a request at shares 50/50 failed: %v", err)
		}
		count[from]++
	}
	t.Logf("60 connections at shares 50/50: %v", count)
	if count["dc"] < 10 || count["home"] < 10 || count["dc"]+count["home"] != 60 {
		t.Errorf("60 connections answered %v: want both origins, about half each", count)
	}

	// the flow table pins both kinds: to dc, and to the node's stack (named by the VIP)
	var flows wire.FlowsView
	if err := api.Get("/api/v1/flows?service=web&limit=1000", &flows); err != nil {
		t.Fatal(err)
	}
	pinned := map[string]int{}
	for _, f := range flows.Flows {
		pinned[f.Backend]++
	}
	if pinned[dc.Addr4.String()] == 0 || pinned[mixedVIP.String()] == 0 {
		t.Errorf("web's flows pinned to %v: want some to dc (%s) and some to the stack (%s)", pinned, dc.Addr4, mixedVIP)
	}

	// home's share 0: the local pseudo-backend drains, every new connection goes to dc
	setShares(map[string]float64{"dc": 1, "home": 0})
	err = Eventually(20*time.Second, 50*time.Millisecond, func() error {
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

// etcdPut writes key = value through the member's JSON gateway (the v3 API over HTTP),
// from its own namespace.
func etcdPut(m *EtcdMember, key string, value []byte) error {
	body, _ := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString(value)})
	resp, err := HTTPClient(m.Host.NS, 5*time.Second).Post(m.ClientURL()+"/v3/kv/put", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd put %s: %s: %s", key, resp.Status, out)
	}
	return nil
}
