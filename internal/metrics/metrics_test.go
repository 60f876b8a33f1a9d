package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/manifoldlb/manifold/internal/testenv"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

type fixed Snapshot

func (f fixed) MetricsSnapshot() Snapshot { return Snapshot(f) }

func scrape(t *testing.T, src Source) (string, map[string]float64) {
	t.Helper()
	return scrapeHandler(t, Handler(src))
}

// scrapeHandler is h's scrape, and its values by metric name and labels.
func scrapeHandler(t *testing.T, h http.Handler) (string, map[string]float64) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("not the Prometheus text format: %v\n%s", err, body)
	}
	values := map[string]float64{}
	for name, f := range families {
		for _, m := range f.Metric {
			key := name
			for _, l := range m.Label {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				values[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				values[key] = m.Gauge.GetValue()
			}
		}
	}
	return body, values
}

// full is a snapshot with something in every field.
var full = fixed{
	Status: wire.Status{
		Interfaces: []wire.InterfaceStatus{{Name: "eth0", XDPMode: "native"}},
		Services: []wire.ServiceStatus{
			{Name: "web", Announced: true, Backends: []wire.BackendStatus{
				{Address: "10.0.1.1", State: wire.BackendUp, Weight: 3, Packets: 10, Bytes: 600, NewFlows: 4},
				{Address: "10.0.1.2", State: wire.BackendDraining, Weight: 0, Packets: 3, Bytes: 180},
				{Address: "10.0.1.3", State: wire.BackendDown, Weight: 2},
			}},
			{Name: "dns", Announced: false, Backends: []wire.BackendStatus{}},
		},
		Drops:            map[string]uint64{"truncated": 2, "no_backend": 0},
		FlowTableEntries: 7,
		FlowTableSize:    262144,
		BGP:              &wire.BGPStatus{Peers: []wire.PeerStatus{{Address: "10.0.0.1", Up: true, UpdatesSent: 4, UpdatesReceived: 1}}},
		Reloads:          4,
		ReloadFailures:   1,
		Fleet: &wire.FleetState{Prefix: "/manifold", AppliedRevision: 40, StoreRevision: 42, Reachable: false, StaleSince: "2026-11-23T15:00:00Z", WriteConflicts: 3,
			Refused: []wire.FleetRefusal{{Service: "web", Revision: 41, Error: "vip: not an address"}}, DocumentsRefused: 4,
			RecordBytes: 18230, RecordsTruncated: 2},
		Kubernetes: &wire.KubernetesState{Synced: true, Reachable: false, Services: 5,
			Skipped: []string{"service a: no address", "service b: no address"}, OutOfPool: 1, Submitted: 12, Refused: 1},
	},
	Events: map[string]uint64{"flow_not_inserted": 7},
	HealthChecks: []HealthCheck{
		{Backend: "10.0.1.1", Check: "tcp://10.0.1.1:80", Up: true, Checks: 40, Failures: 1, LastLatency: 0.0004},
	},
	APIRequests: map[APIRequest]uint64{{"GET", 200}: 9, {"POST", 409}: 1},
	Steering: &wire.SteeringStatus{Site: "sjc", Services: []wire.Steering{{Service: "web", Decision: wire.SteeringDecision{Sites: []wire.SteeringSite{
		{Site: "sjc", Shares: []wire.SteeringShare{{Origin: "us", Share: 0.75, Target: 0.5}, {Origin: "eu", Share: 0.25, Target: 0.5}}},
		{Site: "ams", Shares: []wire.SteeringShare{{Origin: "eu", Share: 1, Target: 1}}},
	}}}}},
	Tunnels: &wire.TunnelsStatus{
		Services: []wire.TunnelService{{Name: "home", Connectors: 2, Capacity: 300, Open: 5}},
		Tunnels: []wire.Tunnel{{ID: 7, Connector: "nas", StreamsOpen: 4, Streams: 90, BytesToOrigin: 1000, BytesFromOrigin: 50000,
			RTT: 2500 * time.Microsecond}},
		Counters: wire.TunnelCounters{Attached: 3, Gone: 1, Refused: map[string]uint64{tunnel.RefusedOutOfScope: 2}, StreamRetries: 1, ClientsRefused: 6,
			ClientsRefusedPerSource: 7, ClientsIdle: 8, AcceptErrors: 9},
	},
}

func TestMetricsReportTheSnapshot(t *testing.T) {
	_, v := scrape(t, full)
	want := map[string]float64{
		"manifold_xdp_attached,interface=eth0,mode=native":                                1,
		"manifold_packets_total,backend=10.0.1.1,service=web":                             10,
		"manifold_bytes_total,backend=10.0.1.1,service=web":                               600,
		"manifold_new_flows_total,backend=10.0.1.1,service=web":                           4,
		"manifold_packets_total,backend=10.0.1.2,service=web":                             3,
		"manifold_backend_up,backend=10.0.1.1,service=web":                                1,
		"manifold_backend_up,backend=10.0.1.2,service=web":                                0,
		"manifold_backend_up,backend=10.0.1.3,service=web":                                0,
		"manifold_backend_weight,backend=10.0.1.3,service=web":                            2,
		"manifold_backend_weight,backend=10.0.1.1,service=web":                            3,
		"manifold_vip_announced,service=web":                                              1,
		"manifold_vip_announced,service=dns":                                              0,
		"manifold_drops_total,reason=truncated":                                           2,
		"manifold_drops_total,reason=no_backend":                                          0,
		"manifold_events_total,event=flow_not_inserted":                                   7,
		"manifold_flow_table_entries":                                                     7,
		"manifold_flow_table_size":                                                        262144,
		"manifold_health_checks_total,backend=10.0.1.1,check=tcp://10.0.1.1:80":           40,
		"manifold_health_check_failures_total,backend=10.0.1.1,check=tcp://10.0.1.1:80":   1,
		"manifold_health_check_up,backend=10.0.1.1,check=tcp://10.0.1.1:80":               1,
		"manifold_health_check_duration_seconds,backend=10.0.1.1,check=tcp://10.0.1.1:80": 0.0004,
		"manifold_bgp_peer_up,peer=10.0.0.1":                                              1,
		"manifold_bgp_updates_sent_total,peer=10.0.0.1":                                   4,
		"manifold_bgp_updates_received_total,peer=10.0.0.1":                               1,
		"manifold_config_reloads_total":                                                   4,
		"manifold_fleet_applied_revision":                                                 40,
		"manifold_fleet_store_reachable":                                                  0,
		"manifold_fleet_stale_since_timestamp_seconds":                                    1795446000,
		"manifold_fleet_watch_lag_revisions":                                              2,
		"manifold_fleet_write_conflicts_total":                                            3,
		"manifold_fleet_documents_refused_total":                                          4,
		"manifold_fleet_services_refused":                                                 1,
		"manifold_fleet_record_bytes":                                                     18230,
		"manifold_fleet_records_truncated_total":                                          2,
		"manifold_kubernetes_synced":                                                      1,
		"manifold_kubernetes_api_reachable":                                               0,
		"manifold_kubernetes_services":                                                    5,
		"manifold_kubernetes_skipped":                                                     2,
		"manifold_kubernetes_addresses_out_of_pool":                                       1,
		"manifold_kubernetes_updates_total,result=applied":                                12,
		"manifold_kubernetes_updates_total,result=refused":                                1,
		"manifold_config_reload_failures_total":                                           1,
		"manifold_api_requests_total,code=200,method=GET":                                 9,
		"manifold_api_requests_total,code=409,method=POST":                                1,
		"manifold_steering_share,origin=us,service=web,site=sjc":                          0.75,
		"manifold_steering_target,origin=eu,service=web,site=sjc":                         0.5,
		"manifold_tunnel_service_connectors,service=home":                                 2,
		"manifold_tunnel_service_capacity_streams,service=home":                           300,
		"manifold_tunnel_service_streams_open,service=home":                               5,
		"manifold_tunnel_streams_open,connector=nas,tunnel=7":                             4,
		"manifold_tunnel_streams_total,connector=nas,tunnel=7":                            90,
		"manifold_tunnel_bytes_total,connector=nas,direction=from_origin,tunnel=7":        50000,
		"manifold_tunnel_rtt_seconds,connector=nas,tunnel=7":                              0.0025,
		"manifold_tunnels_attached_total":                                                 3,
		"manifold_tunnels_gone_total":                                                     1,
		"manifold_tunnels_refused_total,reason=out_of_scope":                              2,
		"manifold_tunnel_stream_retries_total":                                            1,
		"manifold_tunnel_clients_refused_total":                                           6,
		"manifold_tunnel_clients_refused_per_source_total":                                7,
		"manifold_tunnel_clients_idle_total":                                              8,
		"manifold_tunnel_accept_errors_total":                                             9,
	}
	if _, ok := v["manifold_steering_share,origin=eu,service=web,site=ams"]; ok {
		t.Error("another site's share is reported: the node applies its own site's only")
	}
	for k, w := range want {
		if got, ok := v[k]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
}

// promtool itself (Debian package prometheus) accepts the whole scrape.
func TestPromtoolCheckMetrics(t *testing.T) {
	if err := hostprog.Check(hostprog.Promtool); err != nil {
		testenv.Missing(t, err)
	}
	body, _ := scrape(t, full)
	if err := Promtool(body); err != nil {
		t.Error(err)
	}
}

// The same rules promtool check metrics applies, to a node's and a controller's.
func TestMetricsPassLint(t *testing.T) {
	node, _ := scrape(t, full)
	controller, _ := steerScrape(t, leading)
	for _, body := range []string{node, controller} {
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			if strings.HasPrefix(p.Metric, "manifold_") {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		}
	}
}
