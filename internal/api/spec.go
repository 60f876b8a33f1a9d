package api

import (
	"fmt"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
)

// SpecOf is the API's view of a service of the config. A tunnel service shows no
// backends and no health: it has neither, and the parser refuses them of it, so that
// GET then PUT of its spec is a round trip too.
func SpecOf(s *config.Service) wire.ServiceSpec {
	out := wire.ServiceSpec{
		Name: s.Name, VIP: s.VIP.String(), Port: s.Port, Protocol: string(s.Protocol),
		Forwarding: string(s.Forwarding), GUEPort: s.GUEPort, BackendPort: s.BackendPort, ProxyProtocol: string(s.ProxyProtocol), Scheduler: string(s.Scheduler), TableSize: s.TableSize,
		Backends: make([]wire.BackendSpec, 0, len(s.Backends)),
		Health: wire.HealthSpec{
			Kind: string(s.Health.Kind), Port: s.Health.Port, Path: s.Health.Path,
			Interval: s.Health.Interval.String(), Timeout: s.Health.Timeout.String(), Rise: s.Health.Rise, Fall: s.Health.Fall,
		},
	}
	out.BGP = wire.BGPSpec{Communities: texts(s.BGP.Communities), LargeCommunities: texts(s.BGP.LargeCommunities),
		MED: s.BGP.MED, Prepend: s.BGP.Prepend}
	for _, o := range s.Origins {
		spec := wire.OriginSpec{Name: o.Name, Capacity: o.Capacity, Tunnel: o.Tunnel}
		if o.Tunnel {
			spec.Weight = &o.Weight
		}
		out.Origins = append(out.Origins, spec)
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, wire.BackendSpec{Address: b.Address.String(), Weight: b.Weight, Origin: b.Origin})
	}
	if s.Forwarding == config.Tunnel {
		out.Backends, out.Health = nil, wire.HealthSpec{}
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
