package steer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// World is a synthetic fleet of the size steering is measured at (BenchmarkRound,
// `manifold-bench steerscale`, the scenarios with a world: section): sites and origins
// at random points of a sphere the size of the Earth, RTT from their distance over
// fibre, demand and capacity at random. The same Seed gives the same world.
type World struct {
	Sites, Origins int
	Seed           uint64
	// Utilisation is the total demand over the total capacity (0: 0.8). Sites and
	// origins are placed independently, so a region can hold more demand than its
	// origins take: spills happen below 1.
	Utilisation float64
}

// worldPoint is a place on the unit sphere.
type worldPoint struct{ x, y, z float64 }

func randomPoint(rng *rand.Rand) worldPoint {
	// uniform on the sphere: z uniform in [-1, 1], the longitude uniform
	z := 2*rng.Float64() - 1
	phi := 2 * math.Pi * rng.Float64()
	r := math.Sqrt(1 - z*z)
	return worldPoint{r * math.Cos(phi), r * math.Sin(phi), z}
}

// worldRTT is the round trip over fibre along the great circle from a to b (the
// antipode is 20 000 km away: 200 ms at 200 km/ms), plus 1 ms of access and up to 20 %
// for the path's detours.
func worldRTT(rng *rand.Rand, a, b worldPoint) time.Duration {
	angle := math.Acos(max(-1, min(1, a.x*b.x+a.y*b.y+a.z*b.z)))
	ms := 1 + 200*angle/math.Pi*(1+0.2*rng.Float64())
	return time.Duration(ms * float64(time.Millisecond))
}

// WorldOriginName and WorldSiteName name a world's i-th origin and site.
func WorldOriginName(i int) string { return fmt.Sprintf("origin%03d", i) }
func WorldSiteName(i int) string   { return fmt.Sprintf("site%04d", i) }

// Scenario is the world as a scenario: one service, each site's demand constant from
// 0 s (the events and demand steps are the caller's to add).
func (w World) Scenario(name string, duration, step time.Duration, elasticity float64) *Scenario {
	obs := w.Observations(1)[0]
	sc := &Scenario{Name: name, Duration: duration, Step: step, Elasticity: elasticity}
	for _, o := range obs.Origins {
		sc.Origins = append(sc.Origins, ScenarioOrigin{Name: o.Name, Capacity: o.Capacity, Healthy: true})
	}
	for _, s := range obs.Sites {
		sc.Sites = append(sc.Sites, ScenarioSite{Name: s.Name, RTT: s.RTT, Demand: []DemandStep{{At: 0, Rate: s.Demand}}})
	}
	return sc
}

// Observations are one observation per service: the same sites, origins and RTTs,
// each service with its own demand (log-normal around 100 flows/s per site) and
// capacities (the origins' weights drawn anew, their sum the demand / Utilisation).
// Loads are 0: the round that reads them is the first.
func (w World) Observations(services int) []Observation {
	rng := rand.New(rand.NewPCG(w.Seed, 0x5743e))
	util := w.Utilisation
	if util <= 0 {
		util = 0.8
	}
	origins := make([]worldPoint, w.Origins)
	for i := range origins {
		origins[i] = randomPoint(rng)
	}
	rtts := make([]map[string]time.Duration, w.Sites)
	for i := range rtts {
		p := randomPoint(rng)
		rtts[i] = make(map[string]time.Duration, w.Origins)
		for j, o := range origins {
			rtts[i][WorldOriginName(j)] = worldRTT(rng, p, o)
		}
	}
	out := make([]Observation, services)
	for k := range out {
		var obs Observation
		var demand float64
		for i := range w.Sites {
			d := 100 * math.Exp(rng.NormFloat64())
			demand += d
			obs.Sites = append(obs.Sites, Site{Name: WorldSiteName(i), Demand: d, RTT: rtts[i]})
		}
		weights := make([]float64, w.Origins)
		var sum float64
		for j := range weights {
			weights[j] = 0.5 + rng.Float64()
			sum += weights[j]
		}
		for j := range weights {
			obs.Origins = append(obs.Origins, Origin{Name: WorldOriginName(j), Capacity: demand / util * weights[j] / sum, Healthy: true})
		}
		out[k] = obs
	}
	return out
}
