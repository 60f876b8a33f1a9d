package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

// A link's scrape has one series per tunnel with the status's values, and promtool
// accepts it.
func TestLinkMetrics(t *testing.T) {
	st := wire.LinkStatus{Name: "dc1-dc2", Tunnels: []wire.LinkTunnel{
		{Index: 0, Device: "mlink0", State: wire.LinkTunnelUp, TxBytes: 1000, RxBytes: 2000, TxPackets: 10, RxPackets: 20, Handshakes: 3,
			ProbesSent: 50, ProbesLost: 1, LastProbeRTTMillis: 0.5, Transitions: 1},
		{Index: 1, Device: "mlink1", State: wire.LinkTunnelDown, ProbesSent: 50, ProbesLost: 9, Transitions: 2},
	}}
	srv := httptest.NewServer(LinkHandler(func() wire.LinkStatus { return st }))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	for _, want := range []string{
		`manifold_link_tunnel_up{device="mlink0",link="dc1-dc2",tunnel="0"} 1`,
		`manifold_link_tunnel_up{device="mlink1",link="dc1-dc2",tunnel="1"} 0`,
		`manifold_link_tunnel_bytes_total{device="mlink0",direction="rx",link="dc1-dc2",tunnel="0"} 2000`,
		`manifold_link_tunnel_packets_total{device="mlink0",direction="tx",link="dc1-dc2",tunnel="0"} 10`,
		`manifold_link_tunnel_handshakes_total{device="mlink0",link="dc1-dc2",tunnel="0"} 3`,
		`manifold_link_tunnel_probes_lost_total{device="mlink1",link="dc1-dc2",tunnel="1"} 9`,
		`manifold_link_tunnel_probe_rtt_seconds{device="mlink0",link="dc1-dc2",tunnel="0"} 0.0005`,
		`manifold_link_tunnel_transitions_total{device="mlink1",link="dc1-dc2",tunnel="1"} 2`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if hostprog.Check(hostprog.Promtool) == nil {
		if err := Promtool(body); err != nil {
			t.Error(err)
		}
	}
}
