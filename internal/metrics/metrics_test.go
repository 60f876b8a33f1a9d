package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

type fixed Snapshot

func (f fixed) MetricsSnapshot() Snapshot { return Snapshot(f) }

func scrape(t *testing.T, src Source) (string, map[string]float64) {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler(src).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
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

func TestMetricsReportTheSnapshot(t *testing.T) {
	src := fixed{
		Backends: []Backend{
			{Service: "web", Address: "10.0.1.1", Up: true, Packets: 10, Bytes: 600},
			{Service: "web", Address: "10.0.1.2", Up: false, Packets: 3, Bytes: 180},
		},
		Drops:            map[string]uint64{"truncated": 2, "no_backend": 0},
		FlowTableEntries: 7,
		Reloads:          4,
		ReloadFailures:   1,
	}
	_, v := scrape(t, src)
	want := map[string]float64{
		"manifold_packets_total,backend=10.0.1.1,service=web": 10,
		"manifold_bytes_total,backend=10.0.1.1,service=web":   600,
		"manifold_packets_total,backend=10.0.1.2,service=web": 3,
		"manifold_backend_up,backend=10.0.1.1,service=web":    1,
		"manifold_backend_up,backend=10.0.1.2,service=web":    0,
		"manifold_drops_total,reason=truncated":               2,
		"manifold_drops_total,reason=no_backend":              0,
		"manifold_flow_table_entries":                         7,
		"manifold_config_reloads_total":                       4,
		"manifold_config_reload_failures_total":               1,
	}
	for k, w := range want {
		if got, ok := v[k]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
}

// The same rules promtool check metrics applies.
func TestMetricsPassLint(t *testing.T) {
	body, _ := scrape(t, fixed{Backends: []Backend{{Service: "web", Address: "10.0.1.1", Up: true}}, Drops: map[string]uint64{"truncated": 1}})
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
