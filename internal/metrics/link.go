package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// A site-to-site link's metrics (manifold link serves them), one series per tunnel.
var (
	linkUpDesc = desc("manifold_link_tunnel_up",
		"1 while the tunnel's probes are answered (it is in the route), else 0.", "link", "tunnel", "device")
	linkBytesDesc = desc("manifold_link_tunnel_bytes_total",
		"Inner bytes through the tunnel, by direction (tx: into it).", "link", "tunnel", "device", "direction")
	linkPacketsDesc = desc("manifold_link_tunnel_packets_total",
		"Inner packets through the tunnel, by direction (tx: into it).", "link", "tunnel", "device", "direction")
	linkHandshakesDesc = desc("manifold_link_tunnel_handshakes_total",
		"WireGuard handshakes seen completing on the tunnel.", "link", "tunnel", "device")
	linkProbesDesc = desc("manifold_link_tunnel_probes_total",
		"Probes sent through the tunnel.", "link", "tunnel", "device")
	linkProbesLostDesc = desc("manifold_link_tunnel_probes_lost_total",
		"Probes through the tunnel not answered before fall later ones had left.", "link", "tunnel", "device")
	linkRTTDesc = desc("manifold_link_tunnel_probe_rtt_seconds",
		"Round trip of the tunnel's latest answered probe.", "link", "tunnel", "device")
	linkTransitionsDesc = desc("manifold_link_tunnel_transitions_total",
		"Changes of the tunnel's state (up, down) since the link started.", "link", "tunnel", "device")
)

type linkCollector struct{ status func() wire.LinkStatus }

func (c linkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{linkUpDesc, linkBytesDesc, linkPacketsDesc, linkHandshakesDesc, linkProbesDesc,
		linkProbesLostDesc, linkRTTDesc, linkTransitionsDesc} {
		ch <- d
	}
}

func (c linkCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	for _, t := range s.Tunnels {
		labels := []string{s.Name, strconv.Itoa(t.Index), t.Device}
		counter := func(d *prometheus.Desc, v uint64, more ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(labels, more...)...)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(linkUpDesc, bit(t.State == wire.LinkTunnelUp))
		counter(linkBytesDesc, t.TxBytes, "tx")
		counter(linkBytesDesc, t.RxBytes, "rx")
		counter(linkPacketsDesc, t.TxPackets, "tx")
		counter(linkPacketsDesc, t.RxPackets, "rx")
		counter(linkHandshakesDesc, t.Handshakes)
		counter(linkProbesDesc, t.ProbesSent)
		counter(linkProbesLostDesc, t.ProbesLost)
		gauge(linkRTTDesc, t.LastProbeRTTMillis/1000)
		counter(linkTransitionsDesc, t.Transitions)
	}
}

// LinkHandler serves a link's metrics, plus the Go runtime's and the process's.
func LinkHandler(status func() wire.LinkStatus) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(linkCollector{status}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
