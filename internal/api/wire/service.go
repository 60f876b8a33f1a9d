package wire

// ServiceSpec is a service as the API shows it: every field of the config file's
// service, defaults filled in. PUT /api/v1/services/{name} accepts it back as is (the
// body of a PUT is read by the config parser, with the file's field names), so
// `GET … | jq .spec | PUT` is a faithful round trip. internal/api's spec_test.go keeps it
// so: its keys are those of a service in the config schema (config.NodeSchema), and a
// spec written as YAML parses back into the service it shows. The yaml tags are for
// the fleet, whose controller reads the services' documents in etcd as ServiceSpecs.
type ServiceSpec struct {
	Name       string `json:"name" yaml:"name"`
	VIP        string `json:"vip" yaml:"vip"`
	Port       uint16 `json:"port" yaml:"port"`
	Protocol   string `json:"protocol" yaml:"protocol"`
	Forwarding string `json:"forwarding" yaml:"forwarding"`
	GUEPort    uint16 `json:"gue_port" yaml:"gue_port"`
	// BackendPort is the NAT backends' port; absent: the service's port.
	BackendPort uint16 `json:"backend_port,omitempty" yaml:"backend_port,omitempty"`
	// ProxyProtocol is the PROXY header version, v1 or v2, of a tunnel service's or a
	// routed service's tunnelled origins' connectors; absent: none.
	ProxyProtocol string       `json:"proxy_protocol,omitempty" yaml:"proxy_protocol,omitempty"`
	Scheduler     string       `json:"scheduler" yaml:"scheduler"`
	TableSize     uint32       `json:"table_size" yaml:"table_size"`
	Origins       []OriginSpec `json:"origins,omitempty" yaml:"origins,omitempty"` // none: no steering
	// Backends and Health are absent from a tunnel service, which has neither (its
	// connectors are its backends); a service of another kind shows both, backends: []
	// when it has none.
	Backends []BackendSpec `json:"backends,omitzero" yaml:"backends,omitempty"`
	Health   HealthSpec    `json:"health,omitzero" yaml:"health,omitempty"`
	BGP      BGPSpec       `json:"bgp" yaml:"bgp,omitempty"`
}

// BGPSpec is what a service adds to its VIP's announcement.
type BGPSpec struct {
	Communities      []string `json:"communities,omitempty" yaml:"communities,omitempty"`
	LargeCommunities []string `json:"large_communities,omitempty" yaml:"large_communities,omitempty"`
	MED              *uint32  `json:"med,omitempty" yaml:"med,omitempty"`
	Prepend          uint8    `json:"prepend,omitempty" yaml:"prepend,omitempty"`
}

type BackendSpec struct {
	Address string `json:"address" yaml:"address"`
	Weight  uint32 `json:"weight" yaml:"weight"`
	Origin  string `json:"origin,omitempty" yaml:"origin,omitempty"`
}

type OriginSpec struct {
	Name     string `json:"name" yaml:"name"`
	Capacity uint32 `json:"capacity" yaml:"capacity"`
	// Tunnel: an origin of a routed service reached by the tunnel edge's connectors;
	// Weight (set for those only) weighs it while steering gives no shares.
	Tunnel bool    `json:"tunnel,omitempty" yaml:"tunnel,omitempty"`
	Weight *uint32 `json:"weight,omitempty" yaml:"weight,omitempty"`
}

type HealthSpec struct {
	Kind     string `json:"kind" yaml:"kind"`
	Port     uint16 `json:"port,omitempty" yaml:"port,omitempty"` // 0: a service of every port without a check
	Path     string `json:"path,omitempty" yaml:"path,omitempty"` // http only
	Interval string `json:"interval" yaml:"interval"`
	Timeout  string `json:"timeout" yaml:"timeout"`
	Rise     int    `json:"rise" yaml:"rise"`
	Fall     int    `json:"fall" yaml:"fall"`
}
