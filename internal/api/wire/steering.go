package wire

// Steering is one service's shares as the steering controller wrote them to the fleet
// store (P/steering/<service>), and what GET /api/v1/steering serves. internal/steer
// computes them (steer.Decision); its WireDecision converts them to these types.
type Steering struct {
	Service string `json:"service"`
	// Round counts the controller's writes of this service's shares; At is when it was
	// made (RFC 3339), Leader the controller that made it.
	Round  int64  `json:"round"`
	At     string `json:"at"`
	Leader string `json:"leader"`
	// Shares maps site → origin → the fraction of the site's new flows sent to the origin.
	Shares Shares `json:"shares"`
	// Decision explains the shares: per origin and per site × origin, the target, the
	// load against the capacity, the RTT and the reason in words.
	Decision SteeringDecision `json:"decision"`
}

// Shares maps site → origin → the fraction of the site's new flows sent to the origin
// (steer.Shares, which converts to and from it as is).
type Shares map[string]map[string]float64

// SteeringDecision is a steering round's answer for one service.
type SteeringDecision struct {
	// Note is about the fleet as a whole (demand above capacity, no healthy origin), or "".
	Note    string           `json:"note,omitempty"`
	Origins []SteeringOrigin `json:"origins"`
	Sites   []SteeringSite   `json:"sites"`
}

// SteeringOrigin is one origin's side of a decision.
type SteeringOrigin struct {
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

// SteeringSite is one site's shares.
type SteeringSite struct {
	Site   string          `json:"site"`
	Demand float64         `json:"demand"`
	Shares []SteeringShare `json:"shares"`
}

// SteeringShare is one site × origin: the new share, the target it moves toward, the
// origin's load and capacity, the RTT, and why.
type SteeringShare struct {
	Origin   string  `json:"origin"`
	Share    float64 `json:"share"`
	Target   float64 `json:"target"`
	Load     float64 `json:"load"`
	Capacity float64 `json:"capacity"`
	RTTMs    float64 `json:"rtt_ms"`
	Reason   string  `json:"reason"`
}

// SteeringStatus is the body of GET /api/v1/steering: the shares of every service that
// has them, by service name, and the site of the node that answers.
type SteeringStatus struct {
	Site     string     `json:"site"`
	Services []Steering `json:"services"`
}
