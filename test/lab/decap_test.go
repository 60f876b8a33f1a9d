package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// TestBackendXDPDecap: backends whose agents decapsulate with backend.hook: xdp serve
// real HTTP through a node in both families, with IPIP (lb1) and GUE (lb2); an agent
// asked for XDP on an interface that already has an XDP program refuses to start and
// leaves that program in place; the XDP program is gone once the agents exit.
func TestBackendXDPDecap(t *testing.T) {
	requireManifold(t)
	tl := &testLab{Lab: newLab(t, "lb1", "lb2"), nginx: map[string]*Process{}, agents: map[string]*Process{}, nodes: map[string]*Node{}}
	tl.client = tl.Host("client")
	tl.backends = tl.HostsOf(Backend)
	progs := map[string]uint32{}
	for _, be := range tl.backends {
		p, err := tl.StartNginx(be)
		if err != nil {
			t.Fatal(err)
		}
		tl.nginx[be.Role] = p
		if tl.agents[be.Role], err = tl.StartBackendAgentHook(manifoldBin, be, "xdp", vip4, vip6); err != nil {
			t.Fatal(err)
		}
		id, err := be.XDPProgID(HostLink)
		if err != nil || id == 0 {
			t.Fatalf("%s:%s: XDP program id %d (%v) while the agent runs with hook xdp, want one", be.NS, HostLink, id, err)
		}
		progs[be.Role] = id
		if tcx, err := be.TCXIngress(HostLink); err != nil || len(tcx) > 0 {
			t.Errorf("%s:%s: tcx ingress programs %v (%v) with hook xdp, want none", be.NS, HostLink, tcx, err)
		}
	}
	for _, role := range []string{"lb1", "lb2"} {
		h := tl.Host(role)
		cfg := nodeConfig(h, tl.backends, nil)
		if role == "lb2" {
			for i := range cfg.Services {
				cfg.Services[i].Forwarding = "gue"
			}
		}
		n, err := tl.StartNode(manifoldBin, h, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tl.nodes[role] = n
	}
	// IPIP, then GUE: every backend answers through each node, in both families, and
	// it was the XDP program that stripped them
	tl.routeVIPs(t, tl.Host("lb1"))
	tl.routeVIPs(t, tl.Host("lb2"))
	stripped := make([]uint64, 4)
	for _, be := range tl.backends {
		counts, err := decapCounts(progs[be.Role])
		if err != nil {
			t.Fatalf("%s: %v", be.Role, err)
		}
		for i := range stripped {
			stripped[i] += counts[i]
		}
	}
	for i, kind := range []string{"IPIP over IPv4", "IPIP over IPv6", "GUE over IPv4", "GUE over IPv6"} {
		if stripped[i] == 0 {
			t.Errorf("no packet of %s counted as stripped by the backends' XDP programs (%v)", kind, stripped)
		}
	}

	// a second agent on a backend whose interface has our XDP program: it must fail
	// with the reason, and the first one's program must stay
	be := tl.backends[0]
	path := filepath.Join(tl.Dir, "backend-second.yaml")
	conf := "backend:\n  interface: " + HostLink + "\n  hook: xdp\n  vips: [" + vip4.String() + "]\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := tl.Start(be, "backend-second-"+be.Role, hostprog.Built(manifoldBin), "backend", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(15 * time.Second); err == nil || !strings.Contains(second.Log(), "already has an XDP program") {
		t.Errorf("a second agent with hook xdp on %s:%s: exit %v, log:\n%s", be.NS, HostLink, err, second.Log())
	}
	if id, err := be.XDPProgID(HostLink); err != nil || id != progs[be.Role] {
		t.Errorf("%s:%s after the second agent: XDP program id %d (%v), want the first agent's %d", be.NS, HostLink, id, err, progs[be.Role])
	}
	if local, err := be.IsLocal(vip4); err != nil || !local {
		t.Errorf("%s: the failed agent took VIP %s off lo (%v)", be.NS, vip4, err)
	}
	tl.waitReaches(t, families[0], roles(tl.backends))

	for _, be := range tl.backends {
		if err := tl.agents[be.Role].Stop(); err != nil {
			t.Errorf("manifold backend on %s: %v", be.Role, err)
		}
		if id, err := be.XDPProgID(HostLink); err != nil || id != 0 {
			t.Errorf("%s:%s after manifold backend exited: XDP program id %d (%v), want none", be.NS, HostLink, id, err)
		}
		for _, f := range families {
			if local, err := be.IsLocal(f.vip); err != nil || local {
				t.Errorf("%s: VIP %s still local after manifold backend exited (%v)", be.NS, f.vip, err)
			}
		}
	}
}

// decapCounts reads lb_decap_stats of the decapsulation program with id prog, summed
// over CPUs, indexed by enum lb_decap_counter (bpf/lib/types.h: IPIP4, IPIP6, GUE4,
// GUE6, NOT_VIP, ERROR).
func decapCounts(prog uint32) ([]uint64, error) {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(prog))
	if err != nil {
		return nil, fmt.Errorf("program %d: %w", prog, err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return nil, err
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			return nil, err
		}
		mi, err := m.Info()
		if err != nil || mi.Name != "lb_decap_stats" {
			m.Close()
			continue
		}
		defer m.Close()
		counts := make([]uint64, mi.MaxEntries)
		for i := range counts {
			var per []uint64
			if err := m.Lookup(uint32(i), &per); err != nil {
				return nil, fmt.Errorf("lb_decap_stats %d: %w", i, err)
			}
			for _, v := range per {
				counts[i] += v
			}
		}
		return counts, nil
	}
	return nil, fmt.Errorf("program %d has no map lb_decap_stats", prog)
}
