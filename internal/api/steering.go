package api

import "github.com/manifoldlb/manifold/internal/steer"

// Steering is one service's shares as the steering controller wrote them to the fleet
// store (P/steering/<service>), and what GET /api/v1/steering serves.
type Steering struct {
	Service string `json:"service"`
	// Round counts the controller's writes of this service's shares; At is when it was
	// made (RFC 3339), Leader the controller that made it.
	Round  int64  `json:"round"`
	At     string `json:"at"`
	Leader string `json:"leader"`
	// Shares maps site → origin → the fraction of the site's new flows sent to the origin.
	Shares steer.Shares `json:"shares"`
	// Decision explains the shares: per origin and per site × origin, the target, the
	// load against the capacity, the RTT and the reason in words.
	Decision steer.Decision `json:"decision"`
}

// SteeringStatus is the body of GET /api/v1/steering: the shares of every service that
// has them, by service name, and the site of the node that answers.
type SteeringStatus struct {
	Site     string     `json:"site"`
	Services []Steering `json:"services"`
}
