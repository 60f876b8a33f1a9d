package fleet

import (
	"maps"
	"math"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
)

// Steering on a node: the controller (controller.go) writes each service's shares to
// P/steering/<service>; every node watches them and gives the backends of a service
// with origins the weights that send its site's new flows to each origin in its share.
// The reconciler sees only weights: steering is a transformation of what this source
// submits, and nothing else in the node knows of it.

// weightScale is what a backend's weight is scaled to when its origin takes the whole
// site: fine enough that a share of 0.01 % still weighs, within config.MaxWeight.
const weightScale = 10000

// steered returns services with the weights of the backends of every service with
// origins set from the shares of site: a backend weighs its origin's share times its
// part of the origin's own weights, so that the origin takes its share of the site's
// new flows (while its backends are up). A backend of weight 0 stays 0 (draining), and
// so does one whose origin has no share; one with a share gets at least 1. An origin
// reached by tunnel (of a routed service) weighs its share alone, on the same scale:
// the weight of the node's local pseudo-backend (reconcile.backendsOf), whose flows
// the tunnel edge hands to that origin's connectors. A service without origins, or
// without shares for site, keeps its weights. services is the caller's own copy
// (desired.list): it is changed in place, the backends and origins of a service are
// copied before their weights change.
func steered(services []config.Service, site string, steering map[string]wire.Steering) []config.Service {
	out := services
	for i := range out {
		s := &out[i]
		shares := steering[s.Name].Shares[site]
		if len(s.Origins) == 0 || !coversAny(shares, s.Origins) {
			continue
		}
		own := map[string]float64{}
		for _, b := range s.Backends {
			own[b.Origin] += float64(b.Weight)
		}
		s.Backends = slices.Clone(s.Backends)
		for j := range s.Backends {
			b := &s.Backends[j]
			share := max(shares[b.Origin], 0)
			if b.Weight == 0 || share == 0 {
				b.Weight = 0
				continue
			}
			b.Weight = shareWeight(share * float64(b.Weight) / own[b.Origin])
		}
		if s.TunnelledOrigins() {
			s.Origins = slices.Clone(s.Origins)
			for j := range s.Origins {
				if o := &s.Origins[j]; o.Tunnel {
					o.Weight = 0
					if share := shares[o.Name]; share > 0 {
						o.Weight = shareWeight(share)
					}
				}
			}
		}
	}
	return out
}

// shareWeight is the weight of a part of the site's new flows (0 < part <= 1): at
// least 1, so that a share of 0.01 % still weighs.
func shareWeight(part float64) uint32 {
	return uint32(min(max(math.Round(part*weightScale), 1), config.MaxWeight))
}

// SharesOf is the node's site's shares of a tunnel service with origins, by which its
// tunnel edge picks the origin of each new stream (as steered gives a routed
// service's backends the weights of them); nil when they give none of origins
// anything: the service is not steered here.
func (s *Source) SharesOf(service string, origins []config.Origin) map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	shares := s.steering[service].Shares[s.site]
	if !coversAny(shares, origins) {
		return nil
	}
	return maps.Clone(shares)
}

// coversAny tells whether shares give some flows to one of origins: shares naming
// only origins the service no longer has would drain it whole.
func coversAny(shares map[string]float64, origins []config.Origin) bool {
	for _, o := range origins {
		if shares[o.Name] > 0 {
			return true
		}
	}
	return false
}

// sameShares tells whether a and b give site the same shares for every service.
func sameShares(a, b map[string]wire.Steering, site string) bool {
	if len(a) != len(b) {
		return false
	}
	for name, sa := range a {
		sb, ok := b[name]
		if !ok || !maps.Equal(sa.Shares[site], sb.Shares[site]) {
			return false
		}
	}
	return true
}

// steeringOf decodes the steering keys of a read; a value that is not a steering
// record is left out (the controller writes only good ones).
func (s *Source) steeringOf(kvs []*mvccpb.KeyValue) map[string]wire.Steering {
	out := map[string]wire.Steering{}
	for _, kv := range kvs {
		if name, st, ok := s.decodeSteering(kv); ok {
			out[name] = st
		}
	}
	return out
}

func (s *Source) decodeSteering(kv *mvccpb.KeyValue) (string, wire.Steering, bool) {
	name := strings.TrimPrefix(string(kv.Key), s.keys.steering())
	var st wire.Steering
	if err := decode.JSONInto(kv.Value, decode.MaxFileSize, &st); err != nil {
		s.log.Warn("steering record ignored: not JSON of a steering record", "service", name, "err", err)
		return name, st, false
	}
	return name, st, true
}

// Steering returns the shares the node has read, by service name.
func (s *Source) Steering() []wire.Steering {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]wire.Steering, 0, len(s.steering))
	for _, name := range slices.Sorted(maps.Keys(s.steering)) {
		out = append(out, s.steering[name])
	}
	return out
}

// Site is the node's site, whose shares it applies.
func (s *Source) Site() string { return s.site }

// steeringChanged takes the watch's events on the steering keys, and tells whether
// this node's site has new shares (then the services are submitted again).
func (s *Source) steeringChanged(events []*clientv3.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(s.steering)
	for _, ev := range events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(next, strings.TrimPrefix(string(ev.Kv.Key), s.keys.steering()))
		} else if name, st, ok := s.decodeSteering(ev.Kv); ok {
			next[name] = st
		}
	}
	changed := !sameShares(s.steering, next, s.site)
	s.steering = next
	return changed
}
