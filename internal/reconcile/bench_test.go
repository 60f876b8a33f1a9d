package reconcile

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
)

// nopDP is a data plane that takes every write and keeps nothing: the controller's own
// cost, without the kernel's.
type nopDP struct{ writes int }

func (d *nopDP) PutServices(keys []datapath.ServiceKey, _ []datapath.Service) (int, error) {
	d.writes += len(keys)
	return len(keys), nil
}
func (d *nopDP) DeleteService(datapath.ServiceKey) error { d.writes++; return nil }
func (d *nopDP) PutVIPAddrs(addrs []netip.Addr, _ []uint32) error {
	d.writes += len(addrs)
	return nil
}
func (d *nopDP) DeleteVIPAddr(netip.Addr) error { d.writes++; return nil }
func (d *nopDP) PutRings(rings map[uint32][]uint32) error {
	d.writes += len(rings)
	return nil
}
func (d *nopDP) DeleteRing(uint32) error { d.writes++; return nil }
func (d *nopDP) PutBackends(ids []uint32, _ []datapath.Backend) (int, error) {
	d.writes += len(ids)
	return len(ids), nil
}
func (d *nopDP) DeleteBackend(uint32) error            { d.writes++; return nil }
func (d *nopDP) ResetServiceCounters(uint32) error     { return nil }
func (d *nopDP) PutSettings(datapath.Settings) error   { return nil }
func (d *nopDP) Capacity() (services, backends uint32) { return 1 << 20, 1 << 21 }

// The controller's part of one weight change among n services (BGP on, every service
// announced, health checked): "whole", the update carrying every service (as every
// source did before Update.Delta, and as the config file still does), and "delta",
// the update naming the one service. Both in the same run: their ratio is the
// figure, the machine's load aside.
func BenchmarkSubmitOneChangeAmong(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		services := make([]config.Service, n)
		for i := range n {
			services[i] = withCheck(svc(fmt.Sprintf("svc-%06d", i), fmt.Sprintf("10.%d.%d.%d", 100+i>>16, i>>8&255, i&255), 80, "10.0.1.1", "10.0.1.2"))
		}
		for _, mode := range []string{"whole", "delta"} {
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				c := NewController(Options{Dataplane: &nopDP{}, Health: &fakeHealth{down: map[netip.Addr]bool{}}, Neighbours: &fakeNeighbours{},
					Speaker: newFakeSpeaker(), BGP: &config.BGP{}, Log: slog.New(slog.DiscardHandler)})
				if err := c.Submit(Update{Source: "fleet", Services: slices.Clone(services)}); err != nil {
					b.Fatal(err)
				}
				c.Attached()
				b.ResetTimer()
				for i := range b.N {
					changed := services[0]
					changed.Backends = slices.Clone(changed.Backends)
					changed.Backends[1].Weight = uint32(2 + i%100)
					u := Update{Source: "fleet", Services: []config.Service{changed}, Delta: true}
					if mode == "whole" {
						all := slices.Clone(services)
						all[0] = changed
						u = Update{Source: "fleet", Services: all}
					}
					if err := c.Submit(u); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
