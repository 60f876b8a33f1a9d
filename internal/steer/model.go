// Package steer is global steering: for every site (the edge nodes that clients reach
// by anycast) and every origin (a data centre holding some of a service's backends), the
// share of the site's new flows that goes to the origin. It holds the target (the
// assignment that minimises flow-weighted RTT within the origins' capacities), the
// control law that moves the current shares toward it (control.go), the published
// baseline it is measured against (seed.go), and the simulator that runs either on a
// simulated clock (simulate.go).
//
// Everything here is pure: a controller takes what the fleet observed and the shares in
// force, and returns the next shares with the reason for each. Time enters only as the
// argument of Decide, so the live controller and the simulator run the same code.
//
//	Observation + current Shares ──► SolveTarget ──► Target
//	                                        │
//	                Controller.Decide ◄─────┘ (control law: how far toward Target)
//	                        │
//	                        ▼
//	Decision (per site × origin: share, target, load, capacity, RTT, reason)
package steer

import (
	"maps"
	"time"
)

// Origin is what the fleet observed of one origin.
type Origin struct {
	Name string
	// Capacity is how many new flows per second the origin takes, for the whole fleet.
	Capacity float64
	// Load is the new flows per second the sites sent it over the last interval.
	Load float64
	// Healthy is false when the origin has no healthy backend (a tunnelled origin: no
	// connector attached to an edge).
	Healthy bool
}

// Site is what the fleet observed of one site.
type Site struct {
	Name string
	// Demand is the site's new flows per second over the last interval.
	Demand float64
	// RTT is the site's smoothed round-trip time to each origin. An origin without an
	// entry is unreachable from this site: it gets none of the site's flows.
	RTT map[string]time.Duration
}

// Observation is the state of the fleet a controller decides on. The order of Origins
// and Sites is the order of the decision, and breaks ties between equal RTTs.
type Observation struct {
	Origins []Origin
	Sites   []Site
}

// Shares maps site → origin → the fraction of the site's new flows sent to the origin;
// a site's shares sum to 1.
type Shares map[string]map[string]float64

// Clone returns a deep copy.
func (s Shares) Clone() Shares {
	out := make(Shares, len(s))
	for site, m := range s {
		out[site] = maps.Clone(m)
	}
	return out
}

// Equal tells whether s and o send every site's flows alike; an origin without an
// entry has a share of 0, as a site absent has none.
func (s Shares) Equal(o Shares) bool {
	return s.covers(o) && o.covers(s)
}

// covers tells whether every share of s is o's too.
func (s Shares) covers(o Shares) bool {
	for site, m := range s {
		for origin, v := range m {
			if o[site][origin] != v {
				return false
			}
		}
	}
	return true
}

// A Controller decides the next shares from an observation and the shares in force.
// The live controller calls Decide once per round, after fresh observations; the
// simulator once per step. now is the round's time: a controller that limits its moves
// per period reads it, and nothing else does.
type Controller interface {
	Name() string
	Decide(now time.Time, obs Observation, current Shares) Decision
}

// Decision is a controller's answer, in the plain form the API serves (WireDecision
// gives it as the wire's type, field for field and with the same JSON).
type Decision struct {
	// Note is about the fleet as a whole (demand above capacity, no healthy origin), or "".
	Note    string           `json:"note,omitempty"`
	Origins []OriginDecision `json:"origins"`
	Sites   []SiteDecision   `json:"sites"`

	// why is what Explain works the reasons out from; nil once they are (or for a
	// decision made elsewhere).
	why *explanation
}

// OriginDecision is one origin's side of a decision.
type OriginDecision struct {
	Origin   string  `json:"origin"`
	Healthy  bool    `json:"healthy"`
	Capacity float64 `json:"capacity"`
	// Load is the observed load; TargetLoad what the target would send it at the
	// observed demand; PredictedLoad what the new shares send it at that demand.
	Load          float64 `json:"load"`
	TargetLoad    float64 `json:"target_load"`
	PredictedLoad float64 `json:"predicted_load"`
	Reason        string  `json:"reason"`
}

// SiteDecision is one site's shares.
type SiteDecision struct {
	Site   string          `json:"site"`
	Demand float64         `json:"demand"`
	Shares []ShareDecision `json:"shares"`
}

// ShareDecision is one site × origin: the new share, the target it moves toward, the
// origin's load and capacity, the RTT, and why.
type ShareDecision struct {
	Origin   string  `json:"origin"`
	Share    float64 `json:"share"`
	Target   float64 `json:"target"`
	Load     float64 `json:"load"`
	Capacity float64 `json:"capacity"`
	RTTMs    float64 `json:"rtt_ms"`
	Reason   string  `json:"reason"`
}

// Shares returns the decided shares. An origin a site sends nothing has no entry:
// a site is on one origin or a few of a hundred, and a share's absence reads as 0.
func (d Decision) Shares() Shares {
	out := make(Shares, len(d.Sites))
	for _, s := range d.Sites {
		m := map[string]float64{}
		for _, sh := range s.Shares {
			if sh.Share != 0 {
				m[sh.Origin] = sh.Share
			}
		}
		out[s.Site] = m
	}
	return out
}
