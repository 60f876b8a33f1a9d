// Package metrics exposes a node's state, and a steering controller's (steer.go), in
// the Prometheus text format (GET /metrics). Values are read at scrape time from a
// Source — the BPF maps' per-CPU counters summed, the reconciler's view, the health
// checker and the BGP speaker — so a scrape costs nothing on the packet path.
package metrics

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Snapshot is what a scrape reports: the node's status as the API serves it, and what
// the status does not carry.
type Snapshot struct {
	Status       wire.Status
	Events       map[string]uint64 // data-plane events that are not drops, by name
	HealthChecks []HealthCheck
	APIRequests  map[APIRequest]uint64
	// Steering is the global steering shares the node read, nil without a fleet.
	Steering *wire.SteeringStatus
	// Tunnels is the node's tunnel edge, nil without a tunnels section.
	Tunnels *wire.TunnelsStatus
}

// HealthCheck is one health-check target: a backend address and a check (a target
// shared by several services is checked, and counted, once).
type HealthCheck struct {
	Backend     string
	Check       string // tcp://10.0.1.1:80, http://10.0.1.1:80/healthz
	Up          bool
	Checks      uint64
	Failures    uint64
	LastLatency float64 // seconds
}

type APIRequest struct {
	Method string
	Code   int
}

// Source produces a Snapshot; the node implements it.
type Source interface {
	MetricsSnapshot() Snapshot
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	xdpDesc = desc("manifold_xdp_attached",
		"1 for every interface the XDP program is attached to, with the mode in use.", "interface", "mode")
	packetsDesc = desc("manifold_packets_total",
		"Packets forwarded to a backend of a service.", "service", "backend")
	bytesDesc = desc("manifold_bytes_total",
		"Bytes (of the clients' IP packets) forwarded to a backend of a service.", "service", "backend")
	newFlowsDesc = desc("manifold_new_flows_total",
		"Flows whose backend this node chose from the Maglev ring, counted once where the flow entry is opened (a TCP flow at its first packet without SYN), by service and backend.", "service", "backend")
	dropsDesc = desc("manifold_drops_total",
		"Packets for a VIP dropped by the data plane, by reason.", "reason")
	eventsDesc = desc("manifold_events_total",
		"Data-plane events that are not drops: flow_not_inserted (new-flow bound), icmp_echo_reply, icmp_to_backend, icmp_too_big_sent, transit_forwarded (router mode), nat_reply (a NAT backend's reply translated back), nat_icmp_to_client (an ICMP error about a NAT flow's packet, translated to its client).", "event")
	upDesc = desc("manifold_backend_up",
		"1 when the backend takes new flows of the service (healthy, weight > 0), else 0.", "service", "backend")
	weightDesc = desc("manifold_backend_weight",
		"Weight of the backend in the service's Maglev table (0: draining).", "service", "backend")
	announcedDesc = desc("manifold_vip_announced",
		"1 while this node announces the service's VIP over BGP, else 0.", "service")
	flowsDesc = desc("manifold_flow_table_entries",
		"Entries in the flow table.")
	flowSizeDesc = desc("manifold_flow_table_size",
		"Capacity of the flow table (node.flow_table_size).")
	checksDesc = desc("manifold_health_checks_total",
		"Health checks run against a backend.", "backend", "check")
	checkFailuresDesc = desc("manifold_health_check_failures_total",
		"Health checks of a backend that failed.", "backend", "check")
	checkUpDesc = desc("manifold_health_check_up",
		"1 when the backend passes its health check (rise/fall applied), else 0.", "backend", "check")
	checkLatencyDesc = desc("manifold_health_check_duration_seconds",
		"Duration of the last health check of a backend.", "backend", "check")
	peerUpDesc = desc("manifold_bgp_peer_up",
		"1 while the BGP session with the peer is established, else 0.", "peer")
	updatesSentDesc = desc("manifold_bgp_updates_sent_total",
		"BGP UPDATE messages sent to the peer.", "peer")
	updatesReceivedDesc = desc("manifold_bgp_updates_received_total",
		"BGP UPDATE messages received from the peer.", "peer")
	reloadsDesc = desc("manifold_config_reloads_total",
		"Config reloads asked for (SIGHUP).")
	reloadFailuresDesc = desc("manifold_config_reload_failures_total",
		"Config reloads refused or failed; the previous config kept serving.")
	fleetRevisionDesc = desc("manifold_fleet_applied_revision",
		"The revision of the fleet store's services this node serves.")
	fleetReachableDesc = desc("manifold_fleet_store_reachable",
		"1 while the node reaches the fleet store, else 0 (it serves its last applied revision).")
	fleetStaleDesc = desc("manifold_fleet_stale_since_timestamp_seconds",
		"When the node lost the fleet store (Unix time); 0 while it reaches it.")
	fleetLagDesc = desc("manifold_fleet_watch_lag_revisions",
		"Revisions of the services the node is behind the fleet store, as last seen.")
	fleetConflictsDesc = desc("manifold_fleet_write_conflicts_total",
		"API writes refused because another write reached the fleet store first.")
	fleetRefusedDesc = desc("manifold_fleet_documents_refused_total",
		"Service documents of the fleet store this node refused (each service keeps its last good state; the status names them).")
	fleetRefusedNowDesc = desc("manifold_fleet_services_refused",
		"Services whose latest document in the fleet store this node refuses now.")
	fleetRecordBytesDesc = desc("manifold_fleet_record_bytes",
		"Size of the last record this node published in the fleet store (bounded, see docs/fleet.md).")
	fleetRecordsCutDesc = desc("manifold_fleet_records_truncated_total",
		"Records of this node cut to their bound before they were published (the record's truncated field says what was left out).")

	kubeSyncedDesc = desc("manifold_kubernetes_synced",
		"1 once the node's Kubernetes caches have been filled (its services are the cluster's), else 0.")
	kubeReachableDesc = desc("manifold_kubernetes_api_reachable",
		"1 while the Kubernetes API server answers the node's probe, else 0 (the node serves what it has).")
	kubeServicesDesc = desc("manifold_kubernetes_services",
		"Services the node takes from the cluster (one per Service port with an address).")
	kubeSkippedDesc = desc("manifold_kubernetes_skipped",
		"What the node leaves out of the cluster's Services, and logs why (GET /api/v1/status: kubernetes.skipped).")
	kubeOutOfPoolDesc = desc("manifold_kubernetes_addresses_out_of_pool",
		"Addresses of Services' status.loadBalancer.ingress the node refuses: in no IPPool that selects the Service (an Event on each).")
	kubeUpdatesDesc = desc("manifold_kubernetes_updates_total",
		"Updates from the cluster the node applied or refused (logged; the next change tries again).", "result")
	steeringShareDesc = desc("manifold_steering_share",
		"Fraction of a site's new flows that global steering sends to an origin (a node reports its own site's, the leading controller every site's).", "service", "site", "origin")
	steeringTargetDesc = desc("manifold_steering_target",
		"The share global steering moves toward (the capacity-bound closest-first assignment).", "service", "site", "origin")
	tunnelConnectorsDesc = desc("manifold_tunnel_service_connectors",
		"Connectors' tunnels attached to this edge that serve the tunnel service and are not draining.", "service")
	tunnelCapacityDesc = desc("manifold_tunnel_service_capacity_streams",
		"Concurrent streams the service's attached connectors take, added up.", "service")
	tunnelServiceOpenDesc = desc("manifold_tunnel_service_streams_open",
		"Streams of the service open now over this edge's tunnels.", "service")
	tunnelOpenDesc = desc("manifold_tunnel_streams_open",
		"Streams open now over a connector's tunnel.", "connector", "tunnel")
	tunnelStreamsDesc = desc("manifold_tunnel_streams_total",
		"Client connections joined to a stream over a connector's tunnel.", "connector", "tunnel")
	tunnelBytesDesc = desc("manifold_tunnel_bytes_total",
		"Bytes of client connections carried over a connector's tunnel, by direction (to_origin, from_origin).", "connector", "tunnel", "direction")
	tunnelRTTDesc = desc("manifold_tunnel_rtt_seconds",
		"QUIC's smoothed round-trip time of a connector's tunnel.", "connector", "tunnel")
	tunnelsAttachedDesc = desc("manifold_tunnels_attached_total",
		"Connectors' tunnels this edge accepted.")
	tunnelsGoneDesc = desc("manifold_tunnels_gone_total",
		"Tunnels dropped because their connector stopped answering pings.")
	tunnelsRefusedDesc = desc("manifold_tunnels_refused_total",
		"Connectors refused, by reason: unknown_token, out_of_scope, tunnel_limit, tls, protocol, hello_limit, no_origin, unknown_origin, no_proxy_protocol.", "reason")
	tunnelRetriesDesc = desc("manifold_tunnel_stream_retries_total",
		"Streams that failed before carrying a byte and were retried on another connector.")
	tunnelClientsRefusedDesc = desc("manifold_tunnel_clients_refused_total",
		"Client connections closed because no connector of their service had free capacity in time.")
	tunnelClientsPerSourceDesc = desc("manifold_tunnel_clients_refused_per_source_total",
		"Client connections closed at once because their address had tunnels.max_conns_per_source open to the service.")
	tunnelClientsIdleDesc = desc("manifold_tunnel_clients_idle_total",
		"Client connections closed after tunnels.idle_timeout without a byte either way.")
	tunnelAcceptErrorsDesc = desc("manifold_tunnel_accept_errors_total",
		"Accept errors of the tunnel services' listeners waited out (out of file descriptors).")
	apiDesc = desc("manifold_api_requests_total",
		"REST API requests answered, by method (those of HTTP, any other as OTHER) and status code.", "method", "code")
)

type collector struct{ src Source }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{xdpDesc, packetsDesc, bytesDesc, newFlowsDesc, dropsDesc, eventsDesc, upDesc, weightDesc, announcedDesc,
		flowsDesc, flowSizeDesc, checksDesc, checkFailuresDesc, checkUpDesc, checkLatencyDesc, peerUpDesc,
		updatesSentDesc, updatesReceivedDesc, reloadsDesc, reloadFailuresDesc, apiDesc,
		fleetRevisionDesc, fleetReachableDesc, fleetStaleDesc, fleetLagDesc, fleetConflictsDesc, fleetRefusedDesc, fleetRefusedNowDesc, fleetRecordBytesDesc, fleetRecordsCutDesc, steeringShareDesc, steeringTargetDesc,
		kubeSyncedDesc, kubeReachableDesc, kubeServicesDesc, kubeSkippedDesc, kubeOutOfPoolDesc, kubeUpdatesDesc,
		tunnelConnectorsDesc, tunnelCapacityDesc, tunnelServiceOpenDesc, tunnelOpenDesc, tunnelStreamsDesc, tunnelBytesDesc, tunnelRTTDesc,
		tunnelsAttachedDesc, tunnelsGoneDesc, tunnelsRefusedDesc, tunnelRetriesDesc, tunnelClientsRefusedDesc,
		tunnelClientsPerSourceDesc, tunnelClientsIdleDesc, tunnelAcceptErrorsDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.MetricsSnapshot()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := &s.Status
	for _, i := range st.Interfaces {
		gauge(xdpDesc, 1, i.Name, i.XDPMode)
	}
	for _, sv := range st.Services {
		gauge(announcedDesc, bit(sv.Announced), sv.Name)
		for _, b := range sv.Backends {
			counter(packetsDesc, b.Packets, sv.Name, b.Address)
			counter(bytesDesc, b.Bytes, sv.Name, b.Address)
			counter(newFlowsDesc, b.NewFlows, sv.Name, b.Address)
			gauge(upDesc, bit(b.State == wire.BackendUp), sv.Name, b.Address)
			gauge(weightDesc, float64(b.Weight), sv.Name, b.Address)
		}
	}
	for reason, n := range st.Drops {
		counter(dropsDesc, n, reason)
	}
	for event, n := range s.Events {
		counter(eventsDesc, n, event)
	}
	gauge(flowsDesc, float64(st.FlowTableEntries))
	gauge(flowSizeDesc, float64(st.FlowTableSize))
	for _, h := range s.HealthChecks {
		counter(checksDesc, h.Checks, h.Backend, h.Check)
		counter(checkFailuresDesc, h.Failures, h.Backend, h.Check)
		gauge(checkUpDesc, bit(h.Up), h.Backend, h.Check)
		gauge(checkLatencyDesc, h.LastLatency, h.Backend, h.Check)
	}
	if st.BGP != nil {
		for _, p := range st.BGP.Peers {
			gauge(peerUpDesc, bit(p.Up), p.Address)
			counter(updatesSentDesc, p.UpdatesSent, p.Address)
			counter(updatesReceivedDesc, p.UpdatesReceived, p.Address)
		}
	}
	if f := st.Fleet; f != nil {
		gauge(fleetRevisionDesc, float64(f.AppliedRevision))
		gauge(fleetReachableDesc, bit(f.Reachable))
		var since float64
		if t, err := time.Parse(time.RFC3339, f.StaleSince); err == nil {
			since = float64(t.Unix())
		}
		gauge(fleetStaleDesc, since)
		gauge(fleetLagDesc, float64(max(0, f.StoreRevision-f.AppliedRevision)))
		counter(fleetConflictsDesc, f.WriteConflicts)
		counter(fleetRefusedDesc, f.DocumentsRefused)
		gauge(fleetRefusedNowDesc, float64(len(f.Refused)))
		gauge(fleetRecordBytesDesc, float64(f.RecordBytes))
		counter(fleetRecordsCutDesc, f.RecordsTruncated)
	}
	if k := st.Kubernetes; k != nil {
		gauge(kubeSyncedDesc, bit(k.Synced))
		gauge(kubeReachableDesc, bit(k.Reachable))
		gauge(kubeServicesDesc, float64(k.Services))
		gauge(kubeSkippedDesc, float64(len(k.Skipped)))
		gauge(kubeOutOfPoolDesc, float64(k.OutOfPool))
		counter(kubeUpdatesDesc, k.Submitted, "applied")
		counter(kubeUpdatesDesc, k.Refused, "refused")
	}
	if sr := s.Steering; sr != nil {
		for _, sv := range sr.Services {
			for _, site := range sv.Decision.Sites {
				if site.Site != sr.Site {
					continue // the shares this node applies: its site's
				}
				for _, sh := range site.Shares {
					gauge(steeringShareDesc, sh.Share, sv.Service, site.Site, sh.Origin)
					gauge(steeringTargetDesc, sh.Target, sv.Service, site.Site, sh.Origin)
				}
			}
		}
	}
	if t := s.Tunnels; t != nil {
		for _, sv := range t.Services {
			gauge(tunnelConnectorsDesc, float64(sv.Connectors), sv.Name)
			gauge(tunnelCapacityDesc, float64(sv.Capacity), sv.Name)
			gauge(tunnelServiceOpenDesc, float64(sv.Open), sv.Name)
		}
		for _, tn := range t.Tunnels {
			id := strconv.FormatUint(tn.ID, 10)
			gauge(tunnelOpenDesc, float64(tn.StreamsOpen), tn.Connector, id)
			counter(tunnelStreamsDesc, tn.Streams, tn.Connector, id)
			counter(tunnelBytesDesc, uint64(tn.BytesToOrigin), tn.Connector, id, "to_origin")
			counter(tunnelBytesDesc, uint64(tn.BytesFromOrigin), tn.Connector, id, "from_origin")
			gauge(tunnelRTTDesc, tn.RTT.Seconds(), tn.Connector, id)
		}
		c := &t.Counters
		counter(tunnelsAttachedDesc, c.Attached)
		counter(tunnelsGoneDesc, c.Gone)
		for reason, n := range c.Refused {
			counter(tunnelsRefusedDesc, n, reason)
		}
		counter(tunnelRetriesDesc, c.StreamRetries)
		counter(tunnelClientsRefusedDesc, c.ClientsRefused)
		counter(tunnelClientsPerSourceDesc, c.ClientsRefusedPerSource)
		counter(tunnelClientsIdleDesc, c.ClientsIdle)
		counter(tunnelAcceptErrorsDesc, c.AcceptErrors)
	}
	counter(reloadsDesc, st.Reloads)
	counter(reloadFailuresDesc, st.ReloadFailures)
	for r, n := range s.APIRequests {
		counter(apiDesc, n, r.Method, strconv.Itoa(r.Code))
	}
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Handler serves the node's metrics, plus the Go runtime's and the process's.
func Handler(src Source) http.Handler { return handler(collector{src}) }

func handler(c prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Promtool runs `promtool check metrics` on a scrape and returns its complaints as an
// error. Tests use it on a unit scrape and on a live node's.
func Promtool(scrape string) error {
	cmd := hostprog.Command(hostprog.Promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	return nil
}
