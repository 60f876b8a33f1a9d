package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// SteerSnapshot is what a scrape of a steering controller (`manifold steer`) reports.
type SteerSnapshot struct {
	Controller string // its name in the election
	Leading    bool
	Rounds     uint64 // rounds it has written, over all its terms
	// Services is what the controller last wrote, while it leads; nil on a standby,
	// whose view would be stale.
	Services []wire.Steering
}

var (
	steeringDemandDesc = desc("manifold_steering_site_demand",
		"New flows per second a site's nodes reported for the service, as the leading controller last read them.", "service", "site")
	steeringRTTDesc = desc("manifold_steering_rtt_seconds",
		"A site's round-trip time to an origin (its nodes' health checks, smoothed), as the leading controller last read it.", "service", "site", "origin")
	steeringLoadDesc = desc("manifold_steering_origin_load",
		"New flows per second the fleet's nodes sent an origin's backends, as the leading controller last read them.", "service", "origin")
	steeringCapacityDesc = desc("manifold_steering_origin_capacity",
		"An origin's capacity in new flows per second (services[].origins[].capacity).", "service", "origin")
	steeringHealthyDesc = desc("manifold_steering_origin_healthy",
		"1 while some node sees a backend of the origin healthy, else 0 (the origin then gets no share).", "service", "origin")
	steeringRoundsDesc = desc("manifold_steering_rounds_total",
		"Rounds this controller has written (read the fleet, decide, write the shares).", "controller")
	steeringLeaderDesc = desc("manifold_steering_leader",
		"1 while this controller leads (holds the election), else 0: it stands by.", "controller")
)

type steerCollector func() SteerSnapshot

func (steerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{steeringShareDesc, steeringTargetDesc, steeringDemandDesc, steeringRTTDesc,
		steeringLoadDesc, steeringCapacityDesc, steeringHealthyDesc, steeringRoundsDesc, steeringLeaderDesc} {
		ch <- d
	}
}

func (c steerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	ch <- prometheus.MustNewConstMetric(steeringRoundsDesc, prometheus.CounterValue, float64(s.Rounds), s.Controller)
	gauge(steeringLeaderDesc, bit(s.Leading), s.Controller)
	for _, sv := range s.Services {
		for _, o := range sv.Decision.Origins {
			gauge(steeringLoadDesc, o.Load, sv.Service, o.Origin)
			gauge(steeringCapacityDesc, o.Capacity, sv.Service, o.Origin)
			gauge(steeringHealthyDesc, bit(o.Healthy), sv.Service, o.Origin)
		}
		for _, site := range sv.Decision.Sites {
			gauge(steeringDemandDesc, site.Demand, sv.Service, site.Site)
			for _, sh := range site.Shares {
				gauge(steeringShareDesc, sh.Share, sv.Service, site.Site, sh.Origin)
				gauge(steeringTargetDesc, sh.Target, sv.Service, site.Site, sh.Origin)
				gauge(steeringRTTDesc, sh.RTTMs/1000, sv.Service, site.Site, sh.Origin)
			}
		}
	}
}

// SteerHandler serves a steering controller's metrics, read from snapshot at each
// scrape, plus the Go runtime's and the process's.
func SteerHandler(snapshot func() SteerSnapshot) http.Handler {
	return handler(steerCollector(snapshot))
}
