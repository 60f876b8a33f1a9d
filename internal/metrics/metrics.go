// Package metrics exposes a node's state in the Prometheus text format (GET /metrics).
// Values are read at scrape time from a Source — the BPF maps' per-CPU counters summed
// and the reconciler's view — so a scrape costs nothing on the packet path.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Snapshot is what a scrape reports.
type Snapshot struct {
	Backends         []Backend
	Drops            map[string]uint64 // by drop reason
	FlowTableEntries int
	Reloads          uint64
	ReloadFailures   uint64
}

type Backend struct {
	Service string
	Address string
	Up      bool // in the Maglev ring: healthy and not draining
	Packets uint64
	Bytes   uint64
}

// Source produces a Snapshot; the node implements it.
type Source interface {
	MetricsSnapshot() Snapshot
}

var (
	packetsDesc = prometheus.NewDesc("manifold_packets_total",
		"Packets forwarded to a backend of a service.", []string{"service", "backend"}, nil)
	bytesDesc = prometheus.NewDesc("manifold_bytes_total",
		"Bytes (of the clients' IP packets) forwarded to a backend of a service.", []string{"service", "backend"}, nil)
	dropsDesc = prometheus.NewDesc("manifold_drops_total",
		"Packets for a VIP dropped by the data plane, by reason.", []string{"reason"}, nil)
	upDesc = prometheus.NewDesc("manifold_backend_up",
		"1 when the backend takes new flows of the service (healthy, weight > 0), else 0.", []string{"service", "backend"}, nil)
	flowsDesc = prometheus.NewDesc("manifold_flow_table_entries",
		"Entries in the flow table.", nil, nil)
	reloadsDesc = prometheus.NewDesc("manifold_config_reloads_total",
		"Config reloads asked for (SIGHUP).", nil, nil)
	reloadFailuresDesc = prometheus.NewDesc("manifold_config_reload_failures_total",
		"Config reloads refused or failed; the previous config kept serving.", nil, nil)
)

type collector struct{ src Source }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{packetsDesc, bytesDesc, dropsDesc, upDesc, flowsDesc, reloadsDesc, reloadFailuresDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.MetricsSnapshot()
	for _, b := range s.Backends {
		ch <- prometheus.MustNewConstMetric(packetsDesc, prometheus.CounterValue, float64(b.Packets), b.Service, b.Address)
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(b.Bytes), b.Service, b.Address)
		up := 0.0
		if b.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, b.Service, b.Address)
	}
	for reason, n := range s.Drops {
		ch <- prometheus.MustNewConstMetric(dropsDesc, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(flowsDesc, prometheus.GaugeValue, float64(s.FlowTableEntries))
	ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(s.Reloads))
	ch <- prometheus.MustNewConstMetric(reloadFailuresDesc, prometheus.CounterValue, float64(s.ReloadFailures))
}

// Handler serves the node's metrics, plus the Go runtime's and the process's.
func Handler(src Source) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{src}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
