package lab

import (
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// Scrape GETs http://addr/metrics inside h's namespace (a node's API and a
// controller's metrics listen on its loopback) and returns the body and its metric
// families by name.
func Scrape(h *Host, addr string) (string, map[string]*dto.MetricFamily, error) {
	out, err := h.Output(hostprog.Curl, "-sf", "--max-time", "2", "http://"+addr+"/metrics")
	if err != nil {
		return "", nil, fmt.Errorf("scrape %s's %s/metrics: %w", h.Role, addr, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		return out, nil, fmt.Errorf("%s's %s/metrics is not the Prometheus text format: %w", h.Role, addr, err)
	}
	return out, families, nil
}

// MetricValue is the value of the gauge or counter of family name whose labels are
// exactly labels, and whether there is one.
func MetricValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.Metric {
		if len(m.Label) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.Label {
			match = match && labels[l.GetName()] == l.GetValue()
		}
		if !match {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}

// MetricSum is the sum of the values of family name over all its series.
func MetricSum(families map[string]*dto.MetricFamily, name string) float64 {
	var sum float64
	for _, m := range families[name].GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}
