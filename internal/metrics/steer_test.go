package metrics

import (
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// leading is a leading controller's snapshot: one service, two sites, two origins.
var leading = SteerSnapshot{Controller: "a", Leading: true, Rounds: 12, Services: []wire.Steering{{Service: "web", Decision: wire.SteeringDecision{
	Origins: []wire.SteeringOrigin{{Origin: "us", Healthy: true, Capacity: 100, Load: 104}, {Origin: "eu", Healthy: false, Capacity: 400, Load: 0}},
	Sites: []wire.SteeringSite{
		{Site: "sjc", Demand: 125, Shares: []wire.SteeringShare{{Origin: "us", Share: 0.82, Target: 0.8, RTTMs: 5}, {Origin: "eu", Share: 0.18, Target: 0.2, RTTMs: 40}}},
		{Site: "ams", Demand: 25, Shares: []wire.SteeringShare{{Origin: "eu", Share: 1, Target: 1, RTTMs: 5}}},
	},
}}}}

func steerScrape(t *testing.T, s SteerSnapshot) (string, map[string]float64) {
	t.Helper()
	return scrapeHandler(t, SteerHandler(func() SteerSnapshot { return s }))
}

func TestSteerMetricsReportTheSnapshot(t *testing.T) {
	_, v := steerScrape(t, leading)
	want := map[string]float64{
		"manifold_steering_share,origin=us,service=web,site=sjc":       0.82,
		"manifold_steering_share,origin=eu,service=web,site=ams":       1,
		"manifold_steering_target,origin=eu,service=web,site=sjc":      0.2,
		"manifold_steering_rtt_seconds,origin=eu,service=web,site=sjc": 0.04,
		"manifold_steering_site_demand,service=web,site=sjc":           125,
		"manifold_steering_origin_load,origin=us,service=web":          104,
		"manifold_steering_origin_capacity,origin=eu,service=web":      400,
		"manifold_steering_origin_healthy,origin=us,service=web":       1,
		"manifold_steering_origin_healthy,origin=eu,service=web":       0,
		"manifold_steering_rounds_total,controller=a":                  12,
		"manifold_steering_leader,controller=a":                        1,
	}
	for k, w := range want {
		if got, ok := v[k]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
}

// A standby says so, counts its past rounds, and reports no shares: it has none of
// its own.
func TestSteerMetricsOfAStandby(t *testing.T) {
	_, v := steerScrape(t, SteerSnapshot{Controller: "b", Rounds: 3})
	if v["manifold_steering_leader,controller=b"] != 0 || v["manifold_steering_rounds_total,controller=b"] != 3 {
		t.Errorf("leader %v, rounds %v; want 0 and 3", v["manifold_steering_leader,controller=b"], v["manifold_steering_rounds_total,controller=b"])
	}
	for k := range v {
		if strings.HasPrefix(k, "manifold_steering_share,") {
			t.Errorf("a standby reports %s", k)
		}
	}
}

func TestSteerPromtoolCheckMetrics(t *testing.T) {
	if err := hostprog.Check(hostprog.Promtool); err != nil {
		testenv.Missing(t, err)
	}
	body, _ := steerScrape(t, leading)
	if err := Promtool(body); err != nil {
		t.Error(err)
	}
}
