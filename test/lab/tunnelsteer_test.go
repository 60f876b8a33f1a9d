package lab

// Steering of tunnelled origins, end to end: two edges of one site (manifold run with
// a tunnels section, on a fleet), a steering controller (manifold steer), and two
// origins behind the NAT host, home and office, each with a connector dialling both
// edges and naming its origin. home has room for the load, office for 1 new stream/s.

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

const tunnelOriginsToken = "lab-origins-token-0123456789abcdef" // may name home and office

// The edges publish each origin's health, load and tunnel RTT; the controller steers
// the site to home (office is nearly full at once); the edges send the streams by
// the shares. home's connector killed: the records say home unhealthy, its share
// moves to office, and no request fails meanwhile (the edges spill home's share to
// office until the share moves).
func TestTunnelSteering(t *testing.T) {
	if err := hostprog.Check(hostprog.Etcd); err != nil {
		testenv.Missing(t, err)
	}
	tl := newTunnelLab(t, "home", "office")
	err := os.WriteFile(tl.tunnels.TokensFile, []byte(fmt.Sprintf("- {token: %q, services: [web], origins: [home, office]}\n", tunnelOriginsToken)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	lb1 := tl.edges[0]
	etcd, err := tl.StartEtcd(lb1)
	if err != nil {
		t.Fatal(err)
	}
	fleet := &Fleet{Endpoints: etcd.Endpoints()}
	nodeCfg := func(e *Host) NodeConfig {
		c := tl.nodeConfig(e, fleet)
		c.Site = "ams"
		return c
	}
	// the lab's NodeConfig knows no origins: the tunnel service, last, gets them here
	services := string(tl.nodeConfig(lb1, nil, webTunnel).YAML()) + "    origins: [{name: home, capacity: 1000}, {name: office, capacity: 1}]\n"
	if err := tl.FleetImportFile(manifoldBin, lb1, nodeCfg(lb1), []byte(services), false); err != nil {
		t.Fatal(err)
	}
	for _, e := range tl.edges {
		if _, err := tl.StartNode(manifoldBin, e, nodeCfg(e)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tl.StartSteer(manifoldBin, lb1, "a", etcd.Endpoints(), 500*time.Millisecond, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	connectors := map[string]*Process{}
	for _, origin := range []string{"home", "office"} {
		h := tl.origins[origin]
		connectors[origin], err = tl.StartConnector(manifoldBin, h, origin, tunnelOriginsToken, tl.caFile, tl.edgeAddrs,
			fmt.Sprintf("  - {name: web, to: %s, capacity: 100, origin: %s}\n", netip.AddrPortFrom(h.Addr4, 8000), origin))
		if err != nil {
			t.Fatal(err)
		}
	}
	tl.waitConnectors(t, 20*time.Second, "home", "office")
	tl.waitBothEdgesAnnounce(t)
	url := "http://" + netip.AddrPortFrom(tunnelVIP, 80).String() + "/"
	load := StartOfferedLoad(tl.client.NS, url, 20)
	defer load.Stop()

	// every edge's record: both origins healthy, with their tunnels' RTT
	api := tl.api[lb1.Role]
	if err := waitOriginRecords(api, map[string]bool{"home": true, "office": true}); err != nil {
		t.Fatal(err)
	}
	// the controller puts the site on home: office takes 1/s of the 20/s at most
	_, err = waitSteering(api, 20*time.Second, func(st *wire.Steering) error {
		if sh := st.Shares["ams"]; sh["home"] < 0.9 || len(st.Decision.Origins) != 2 || st.Decision.Origins[0].Load <= 0 {
			return fmt.Errorf("ams's shares %v, origins %+v: want home at 90%% or more and its load seen", sh, st.Decision.Origins)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for range 200 {
		from, err := tl.get("/")
		if err != nil {
			t.Fatal(err)
		}
		count[from]++
	}
	// spread by the connectors' free capacity alone, office would take about half
	if count["home"] < 160 || count["home"]+count["office"] != 200 {
		t.Errorf("200 requests answered %v: want home's share (90%% or more) of them", count)
	}

	_, failedBefore := load.Counts()
	if err := connectors["home"].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err := waitSteering(api, 20*time.Second, func(st *wire.Steering) error {
		if sh := st.Shares["ams"]; sh["home"] != 0 || sh["office"] != 1 {
			return fmt.Errorf("ams's shares %v: want all on office, home's connector killed", sh)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// requests in flight over home's tunnel when it was killed fail with it; the new
	// ones go to office meanwhile
	_, failedMoved := load.Counts()
	t.Logf("%d requests of the offered load failed while home's share moved", failedMoved-failedBefore)
	if err := waitOriginRecords(api, map[string]bool{"home": false, "office": true}); err != nil {
		t.Error(err)
	}
	if o := st.Decision.Origins[0]; o.Origin != "home" || o.Healthy || !strings.Contains(o.Reason, "unhealthy") {
		t.Errorf("the decision's home: %+v, want unhealthy", o)
	}
	out, err := lb1.Output(hostprog.Built(manifoldBin), "ctl", "steering")
	if err != nil || !strings.Contains(out, "office") || !strings.Contains(out, "100.0%") {
		t.Errorf("manifold ctl steering: %v\n%s", err, out)
	}
	for range 20 {
		if from, err := tl.get("/"); err != nil || from != "office" {
			t.Fatalf("a request with home's connector gone: answered by %q, %v", from, err)
		}
	}
	if _, failed := load.Counts(); failed != failedMoved {
		t.Errorf("%d requests of the offered load failed once home's share had moved", failed-failedMoved)
	}
}

// waitOriginRecords waits until every edge's fleet record gives web's origins the
// health of healthy, each healthy one with an RTT and each other without.
func waitOriginRecords(api *NodeAPI, healthy map[string]bool) error {
	return Eventually(20*time.Second, 100*time.Millisecond, func() error {
		var fl wire.FleetStatus
		if err := api.Get("/api/v1/fleet", &fl); err != nil {
			return err
		}
		for _, n := range fl.Nodes {
			origins := map[string]wire.OriginLoad{}
			for _, s := range n.Services {
				if s.Name == "web" {
					for _, o := range s.Origins {
						origins[o.Name] = o
					}
				}
			}
			for name, want := range healthy {
				if o, ok := origins[name]; !ok || o.Healthy != want || (o.RTTMilliseconds > 0) != want {
					return fmt.Errorf("%s's record of web's origins: %+v, want %s healthy %v, with an RTT if so", n.Name, origins, name, want)
				}
			}
		}
		return nil
	})
}
