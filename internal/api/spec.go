package api

import (
	"fmt"

	"github.com/manifoldlb/manifold/internal/config"
)

// ServiceSpec is a service as the API shows it: every field of the config file's
// service, defaults filled in. PUT /api/v1/services/{name} accepts it back as is (the
// body of a PUT is read by the config parser, with the file's field names), so
// `GET … | jq .spec | PUT` is a faithful round trip. spec_test.go keeps it so: its keys
// are those of a service in the config schema (config.NodeSchema), and a spec written
// as YAML parses back into the service it shows.
type ServiceSpec struct {
	Name       string `json:"name" yaml:"name"`
	VIP        string `json:"vip" yaml:"vip"`
	Port       uint16 `json:"port" yaml:"port"`
	Protocol   string `json:"protocol" yaml:"protocol"`
	Forwarding string `json:"forwarding" yaml:"forwarding"`
	GUEPort    uint16 `json:"gue_port" yaml:"gue_port"`
	// BackendPort is the NAT backends' port; absent: the service's port.
	BackendPort uint16        `json:"backend_port,omitempty" yaml:"backend_port,omitempty"`
	Scheduler   string        `json:"scheduler" yaml:"scheduler"`
	TableSize   uint32        `json:"table_size" yaml:"table_size"`
	Origins     []OriginSpec  `json:"origins,omitempty" yaml:"origins,omitempty"` // none: no steering
	Backends    []BackendSpec `json:"backends" yaml:"backends"`
	Health      HealthSpec    `json:"health" yaml:"health"`
	BGP         BGPSpec       `json:"bgp" yaml:"bgp,omitempty"`
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

// SpecOf is the API's view of a service of the config.
func SpecOf(s *config.Service) ServiceSpec {
	out := ServiceSpec{
		Name: s.Name, VIP: s.VIP.String(), Port: s.Port, Protocol: string(s.Protocol),
		Forwarding: string(s.Forwarding), GUEPort: s.GUEPort, BackendPort: s.BackendPort, Scheduler: string(s.Scheduler), TableSize: s.TableSize,
		Backends: make([]BackendSpec, 0, len(s.Backends)),
		Health: HealthSpec{
			Kind: string(s.Health.Kind), Port: s.Health.Port, Path: s.Health.Path,
			Interval: s.Health.Interval.String(), Timeout: s.Health.Timeout.String(), Rise: s.Health.Rise, Fall: s.Health.Fall,
		},
	}
	out.BGP = BGPSpec{Communities: texts(s.BGP.Communities), LargeCommunities: texts(s.BGP.LargeCommunities),
		MED: s.BGP.MED, Prepend: s.BGP.Prepend}
	for _, o := range s.Origins {
		out.Origins = append(out.Origins, OriginSpec{Name: o.Name, Capacity: o.Capacity})
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, BackendSpec{Address: b.Address.String(), Weight: b.Weight, Origin: b.Origin})
	}
	return out
}

func texts[T fmt.Stringer](in []T) []string {
	var out []string
	for _, v := range in {
		out = append(out, v.String())
	}
	return out
}
