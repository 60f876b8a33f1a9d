package node

import (
	"maps"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
)

// The edge reaches all of a tunnel service's origins, and of a routed service only
// those reached by tunnel; it is given the shares of those alone.
func TestEdgeOriginsAndShares(t *testing.T) {
	origins := []config.Origin{{Name: "dc"}, {Name: "home", Tunnel: true}, {Name: "pi", Tunnel: true}}
	mixed := config.Service{Forwarding: config.IPIP, Origins: origins}
	tunnel := config.Service{Forwarding: config.Tunnel, Origins: []config.Origin{{Name: "a"}, {Name: "b"}}}
	names := func(os []config.Origin) (out []string) {
		for _, o := range os {
			out = append(out, o.Name)
		}
		return out
	}
	if got := names(edgeOrigins(&mixed)); len(got) != 2 || got[0] != "home" || got[1] != "pi" {
		t.Errorf("a mixed service's origins at the edge: %v, want [home pi]", got)
	}
	if got := names(edgeOrigins(&tunnel)); len(got) != 2 {
		t.Errorf("a tunnel service's origins at the edge: %v, want all", got)
	}
	if len(mixed.Origins) != 3 {
		t.Fatalf("edgeOrigins changed the service's origins: %v", mixed.Origins)
	}
	got := sharesAmong(map[string]float64{"dc": 0.5, "home": 0.3, "pi": 0.2}, edgeOrigins(&mixed))
	if want := map[string]float64{"home": 0.3, "pi": 0.2}; !maps.Equal(got, want) {
		t.Errorf("shares given the edge: %v, want %v (dc's share is taken in XDP)", got, want)
	}
}
