package lab

// Lab tests of the fleet: nodes that take their services from an etcd cluster whose
// three members run on the LB nodes themselves, seeded with `manifold fleet import`.

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// convergeWithin bounds how long a change may take to be applied by every node: far
// above the benchmark's figures, for a loaded machine running -race builds.
const convergeWithin = 15 * time.Second

// fleetLab is a lab whose LB nodes run `manifold run` with a fleet section, on the
// store of an etcd cluster with one member on each of the first three LB nodes.
type fleetLab struct {
	*testLab
	etcd *Etcd
	lbs  []*Host
	api  map[string]*NodeAPI // by LB node role
}

// startFleetLab seeds the store with the services of nodeConfig (both web services,
// every backend) and starts every node on it; the VIPs are routed through the first.
func startFleetLab(t *testing.T, lbNodes ...string) *fleetLab {
	t.Helper()
	if err := hostprog.Check(hostprog.Etcd); err != nil {
		testenv.Missing(t, err)
	}
	tl := startBackends(t, lbNodes)
	fl := &fleetLab{testLab: tl, lbs: tl.HostsOf(LBNode), api: map[string]*NodeAPI{}}
	var err error
	if fl.etcd, err = tl.StartEtcd(fl.lbs[:min(3, len(fl.lbs))]...); err != nil {
		t.Fatal(err)
	}
	err = tl.FleetImport(manifoldBin, fl.lbs[0], fl.nodeConfig(fl.lbs[0]), nodeConfig(fl.lbs[0], tl.backends, nil), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range fl.lbs {
		fl.api[h.Role] = NewNodeAPI(h)
		n, err := tl.StartNode(manifoldBin, h, fl.nodeConfig(h))
		if err != nil {
			t.Fatal(err)
		}
		tl.nodes[h.Role] = n
	}
	tl.routeVIPs(t, fl.lbs[0])
	return fl
}

// nodeConfig is a fleet node's file: its own sections, no services.
func (fl *fleetLab) nodeConfig(h *Host) NodeConfig {
	return NodeConfig{Name: h.Role, Address: h.Addr4, Address6: h.Addr6, Fleet: &Fleet{Endpoints: fl.etcd.Endpoints()}}
}

// write sends one API write through a node and returns its status; a transport error
// fails the test.
func (fl *fleetLab) write(t *testing.T, via, method, path, body string) (int, []byte) {
	t.Helper()
	code, resp, err := fl.api[via].Call(method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, resp
}

// mustWrite is write that fails the test unless the write succeeded (2xx).
func (fl *fleetLab) mustWrite(t *testing.T, via, method, path, body string) {
	t.Helper()
	if code, resp := fl.write(t, via, method, path, body); code/100 != 2 {
		t.Fatalf("%s %s through %s: %d %s", method, path, via, code, resp)
	}
}

func weightPath(service string, backend netip.Addr) string {
	return "/api/v1/services/" + service + "/backends/" + backend.String() + "/weight"
}

func weightBody(w int) string { return fmt.Sprintf(`{"weight": %d}`, w) }

// waitAgree waits until every given node (every LB node if none) reaches the store,
// has applied the revision it last saw of it, the same revision as the others, and
// its status satisfies cond; it returns that revision.
func (fl *fleetLab) waitAgree(t *testing.T, what string, cond func(*wire.Status) error, roles ...string) int64 {
	t.Helper()
	if len(roles) == 0 {
		roles = fl.roles()
	}
	apis := make([]*NodeAPI, len(roles))
	for i, role := range roles {
		apis[i] = fl.api[role]
	}
	var rev int64
	err := Eventually(convergeWithin, 20*time.Millisecond, func() error {
		sts, r, err := FleetAgrees(apis)
		if err != nil {
			return err
		}
		for _, role := range roles {
			if err := cond(sts[role]); err != nil {
				return fmt.Errorf("%s at revision %d: %w", role, r, err)
			}
		}
		rev = r
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for every node to apply %s: %v", what, err)
	}
	return rev
}

func (fl *fleetLab) roles() []string { return roles(fl.lbs) }

// weights is a condition on a status: each backend of the service has that weight.
func weights(service string, want map[netip.Addr]uint32) func(*wire.Status) error {
	return func(st *wire.Status) error {
		s, ok := st.Service(service)
		if !ok {
			return fmt.Errorf("no service %s", service)
		}
		for addr, w := range want {
			b, ok := s.Backend(addr.String())
			if !ok {
				return fmt.Errorf("%s: no backend %s", service, addr)
			}
			if b.Weight != w {
				return fmt.Errorf("%s: backend %s has weight %d, want %d", service, addr, b.Weight, w)
			}
		}
		return nil
	}
}

// waitKernel waits until the ring of svc in each node's kernel maps holds exactly the
// backends of want (each with at least one slot), and returns the rings by node.
func (fl *fleetLab) waitKernel(t *testing.T, svc netip.AddrPort, want ...netip.Addr) map[string]Ring {
	t.Helper()
	rings := map[string]Ring{}
	for _, h := range fl.lbs {
		err := Eventually(5*time.Second, 20*time.Millisecond, func() error {
			services, err := h.KernelServices()
			if err != nil {
				return err
			}
			ring, ok := services[svc]
			if !ok {
				return fmt.Errorf("%s: no %s in lb_vips", h.Role, svc)
			}
			got := slices.SortedFunc(maps.Keys(ring), netip.Addr.Compare)
			if !slices.Equal(got, slices.SortedFunc(slices.Values(want), netip.Addr.Compare)) {
				return fmt.Errorf("%s: the kernel's ring of %s holds %v, want %v", h.Role, svc, ring, want)
			}
			rings[h.Role] = ring
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return rings
}

func addrs(hs []*Host, f family) []netip.Addr {
	var out []netip.Addr
	for _, h := range hs {
		out = append(out, f.addr(h))
	}
	return out
}

// TestFleetChangeReachesEveryNode: a change made through any node's API reaches every
// node's status and kernel maps, and the same flows land on the same backends through
// every node.
func TestFleetChangeReachesEveryNode(t *testing.T) {
	fl := startFleetLab(t, "lb1", "lb2", "lb3")
	v4, v6 := families[0], families[1]
	be3 := fl.backends[2]
	for _, f := range families {
		fl.waitKernel(t, netip.AddrPortFrom(f.vip, 80), addrs(fl.backends, f)...)
	}

	// a new service through lb2, a drain through lb3
	extra := netip.AddrPortFrom(vip4, 8080)
	fl.mustWrite(t, "lb2", "PUT", "/api/v1/services/extra", fmt.Sprintf(
		`{"vip": %q, "port": 8080, "table_size": 1021, "backends": [{"address": %q}, {"address": %q}]}`,
		vip4, fl.backends[0].Addr4, fl.backends[1].Addr4))
	fl.mustWrite(t, "lb3", "POST", "/api/v1/services/web-ipv4/backends/"+be3.Addr4.String()+"/drain", "")
	fl.waitAgree(t, "the new service and the drain", func(st *wire.Status) error {
		if _, ok := st.Service("extra"); !ok {
			return fmt.Errorf("no service extra")
		}
		state, err := BackendState(st, "web-ipv4", be3.Addr4)
		if err == nil && state != wire.BackendDraining {
			err = fmt.Errorf("web-ipv4: %s is %s, want draining", be3.Addr4, state)
		}
		return err
	})
	fl.waitKernel(t, extra, fl.backends[0].Addr4, fl.backends[1].Addr4)
	fl.waitKernel(t, netip.AddrPortFrom(vip4, 80), addrs(fl.backends[:2], v4)...)
	rings := fl.waitKernel(t, netip.AddrPortFrom(vip6, 80), addrs(fl.backends, v6)...)
	for _, role := range fl.roles()[1:] {
		if !reflect.DeepEqual(rings[role], rings["lb1"]) {
			t.Errorf("web-ipv6's ring: %s holds %v, lb1 %v", role, rings[role], rings["lb1"])
		}
	}

	// the records follow within a publishing period (a second)
	err := Eventually(convergeWithin, 100*time.Millisecond, func() error {
		var fleet wire.FleetStatus
		if err := fl.api["lb1"].Get("/api/v1/fleet", &fleet); err != nil {
			return err
		}
		if len(fleet.Nodes) != len(fl.lbs) {
			return fmt.Errorf("GET /api/v1/fleet lists %d nodes, want %d", len(fleet.Nodes), len(fl.lbs))
		}
		for _, n := range fleet.Nodes {
			if !n.Alive || !n.Agrees || n.Lag != 0 {
				return fmt.Errorf("GET /api/v1/fleet: %s alive %v, agrees %v, lag %d; want alive, agreeing, lag 0", n.Name, n.Alive, n.Agrees, n.Lag)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	const flows = 60
	const firstPort = 61000 // above the default ephemeral range
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			reach := roles(fl.backends)
			if f.vip.Is4() {
				reach = reach[:2] // be3 is drained
			}
			first := fl.flowsThrough(t, f, fl.lbs[0], firstPort, flows, reach)
			for _, node := range fl.lbs[1:] {
				got := fl.flowsThrough(t, f, node, firstPort, flows, reach)
				for port := firstPort; port < firstPort+flows; port++ {
					if got[port] != first[port] {
						t.Errorf("client port %d: lb1 chose %s, %s chose %s", port, first[port], node.Role, got[port])
					}
				}
			}
			per := map[string]int{}
			for _, be := range first {
				per[be]++
			}
			t.Logf("%d flows per backend: %v", flows, per)
			if !slices.Equal(keys(per), reach) {
				t.Errorf("%d flows reached %v, want %v", flows, keys(per), reach)
			}
		})
	}
}

// TestFleetConcurrentWritersLoseNothing: two operators change weights through two
// nodes at the same time; every write answered 200 is in the final state of every
// node, every 409 changed nothing and is counted.
func TestFleetConcurrentWritersLoseNothing(t *testing.T) {
	fl := startFleetLab(t, "lb1", "lb2", "lb3")
	const writes = 20
	type writer struct {
		via           string
		backend       netip.Addr
		base          int // weights base+1 … base+writes
		lastOK        int
		ok, conflicts int
		other         []string
	}
	writers := []*writer{
		{via: "lb1", backend: fl.backends[0].Addr4, base: 100, lastOK: 1},
		{via: "lb2", backend: fl.backends[1].Addr4, base: 200, lastOK: 1},
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() {
			<-start
			for i := 1; i <= writes; i++ {
				code, body, err := fl.api[w.via].Call("POST", weightPath("web-ipv4", w.backend), weightBody(w.base+i))
				switch {
				case err != nil:
					w.other = append(w.other, err.Error())
				case code == http.StatusOK:
					w.ok++
					w.lastOK = w.base + i
				case code == http.StatusConflict:
					w.conflicts++
				default:
					w.other = append(w.other, fmt.Sprintf("%d %s", code, body))
				}
			}
		})
	}
	close(start)
	wg.Wait()

	conflicts := 0
	want := map[netip.Addr]uint32{}
	for _, w := range writers {
		t.Logf("through %s, on %s: %d accepted, %d conflicts, last accepted weight %d", w.via, w.backend, w.ok, w.conflicts, w.lastOK)
		if len(w.other) > 0 {
			t.Errorf("through %s: answers other than 200 and 409: %v", w.via, w.other)
		}
		if w.ok == 0 {
			t.Errorf("through %s: none of %d writes was accepted", w.via, writes)
		}
		conflicts += w.conflicts
		want[w.backend] = uint32(w.lastOK)
	}
	fl.waitAgree(t, "the last accepted weights", weights("web-ipv4", want))

	var counted uint64
	for _, role := range []string{"lb1", "lb2"} {
		st, err := fl.api[role].Status()
		if err != nil {
			t.Fatal(err)
		}
		counted += st.Fleet.WriteConflicts
	}
	if counted < uint64(conflicts) {
		t.Errorf("the nodes count %d write conflicts; they answered %d with 409", counted, conflicts)
	}

	// the kernels agree too: the same ring, slots in the ratio of the weights
	rings := fl.waitKernel(t, netip.AddrPortFrom(vip4, 80), addrs(fl.backends, families[0])...)
	for _, role := range fl.roles()[1:] {
		if !reflect.DeepEqual(rings[role], rings["lb1"]) {
			t.Errorf("web-ipv4's ring: %s holds %v, lb1 %v", role, rings[role], rings["lb1"])
		}
	}
	a, b := writers[0], writers[1]
	got := float64(rings["lb1"][a.backend]) / float64(rings["lb1"][b.backend])
	if wantRatio := float64(a.lastOK) / float64(b.lastOK); got < 0.9*wantRatio || got > 1.1*wantRatio {
		t.Errorf("web-ipv4's ring gives %s and %s slots in the ratio %.3f; their weights %d and %d", a.backend, b.backend, got, a.lastOK, b.lastOK)
	}
}

// TestFleetEtcdMembersDown: with one member of three gone, writes and reads go on. With
// every member gone the nodes keep forwarding on their last state, say they are stale,
// and refuse writes with 503, changing nothing; when the members are back the nodes
// catch up without a restart.
func TestFleetEtcdMembersDown(t *testing.T) {
	fl := startFleetLab(t, "lb1", "lb2", "lb3")
	be := addrs(fl.backends, families[0])

	if err := fl.etcd.Kill(fl.etcd.Member("lb3")); err != nil {
		t.Fatal(err)
	}
	fl.mustWrite(t, "lb3", "POST", weightPath("web-ipv4", be[0]), weightBody(2))
	fl.waitAgree(t, "a write made while one member is down", weights("web-ipv4", map[netip.Addr]uint32{be[0]: 2}))
	var fleet wire.FleetStatus
	if err := fl.api["lb3"].Get("/api/v1/fleet", &fleet); err != nil {
		t.Fatalf("GET /api/v1/fleet with one member down: %v", err)
	}
	if !fleet.Reachable || len(fleet.Nodes) != len(fl.lbs) {
		t.Errorf("GET /api/v1/fleet with one member down: reachable %v, %d nodes", fleet.Reachable, len(fleet.Nodes))
	}

	for _, m := range []string{"lb1", "lb2"} {
		if err := fl.etcd.Kill(fl.etcd.Member(m)); err != nil {
			t.Fatal(err)
		}
	}
	for _, role := range fl.roles() {
		err := Eventually(convergeWithin, 50*time.Millisecond, func() error {
			st, err := fl.api[role].Status()
			if err != nil {
				return err
			}
			if st.Fleet == nil || st.Fleet.Reachable || st.Fleet.StaleSince == "" {
				return fmt.Errorf("%s: fleet state %+v, want unreachable with stale_since", role, st.Fleet)
			}
			if _, err := time.Parse(time.RFC3339Nano, st.Fleet.StaleSince); err != nil {
				return fmt.Errorf("%s: stale_since %q: %w", role, st.Fleet.StaleSince, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// forwarding goes on, through every node, on the last state
	for _, node := range fl.lbs[1:] {
		fl.routeVIPs(t, node)
	}
	for _, w := range []struct{ method, path, body string }{
		{"POST", weightPath("web-ipv4", be[1]), weightBody(5)},
		{"POST", "/api/v1/services/web-ipv4/backends/" + be[2].String() + "/drain", ""},
		{"DELETE", "/api/v1/services/web-ipv6", ""},
	} {
		if code, body := fl.write(t, "lb2", w.method, w.path, w.body); code != http.StatusServiceUnavailable {
			t.Errorf("%s %s with every member down: %d %s, want 503", w.method, w.path, code, body)
		}
	}

	for _, m := range fl.etcd.Members {
		if err := fl.etcd.Start(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := fl.etcd.WaitHealthy(20*time.Second, fl.etcd.Members...); err != nil {
		t.Fatal(err)
	}
	for _, role := range fl.roles() {
		err := Eventually(convergeWithin, 50*time.Millisecond, func() error {
			st, err := fl.api[role].Status()
			if err == nil && (!st.Fleet.Reachable || st.Fleet.StaleSince != "") {
				err = fmt.Errorf("%s: reachable %v, stale since %q", role, st.Fleet.Reachable, st.Fleet.StaleSince)
			}
			return err
		})
		if err != nil {
			t.Fatalf("the members are back: %v", err)
		}
	}
	fl.mustWrite(t, "lb1", "POST", weightPath("web-ipv4", be[2]), weightBody(3))
	// the refused writes changed nothing: be2 kept weight 1, web-ipv6 is still there
	fl.waitAgree(t, "a write made once the members are back", func(st *wire.Status) error {
		if _, ok := st.Service("web-ipv6"); !ok {
			return fmt.Errorf("no service web-ipv6: the refused DELETE took effect")
		}
		return weights("web-ipv4", map[netip.Addr]uint32{be[0]: 2, be[1]: 1, be[2]: 3})(st)
	})
	for _, role := range fl.roles() {
		if !fl.nodes[role].Running() {
			t.Errorf("%s: manifold run exited: %v", role, fl.nodes[role].ExitErr())
		}
	}
}

// TestFleetRestartedNodeAppliesLatestFirst: a node killed with SIGKILL while writes
// go on, restarted after more writes, serves the store's latest revision in its very
// first status that lists services.
func TestFleetRestartedNodeAppliesLatestFirst(t *testing.T) {
	fl := startFleetLab(t, "lb1", "lb2", "lb3")
	be1 := fl.backends[0].Addr4
	subject := fl.lbs[2]

	var mu sync.Mutex
	accepted, lastOK := 0, 1
	stop := make(chan struct{})
	streamDone := make(chan error, 1)
	go func() {
		for w := 2; ; w++ {
			select {
			case <-stop:
				streamDone <- nil
				return
			default:
			}
			code, body, err := fl.api["lb1"].Call("POST", weightPath("web-ipv4", be1), weightBody(w))
			if err == nil && code == http.StatusConflict {
				continue // made against a revision lb1 had not applied yet: nothing changed
			}
			if err != nil || code != http.StatusOK {
				streamDone <- fmt.Errorf("write %d through lb1: %d %s %v", w, code, body, err)
				return
			}
			mu.Lock()
			accepted, lastOK = accepted+1, w
			mu.Unlock()
		}
	}()
	waitAccepted := func(n int) {
		t.Helper()
		err := Eventually(convergeWithin, 5*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if accepted < n {
				return fmt.Errorf("%d writes accepted, waiting for %d", accepted, n)
			}
			return nil
		})
		if err != nil {
			close(stop)
			t.Fatal(err, <-streamDone)
		}
	}
	waitAccepted(5)
	if err := fl.nodes[subject.Role].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = fl.nodes[subject.Role].Wait(5 * time.Second) // exits with an error, as killed
	if fl.nodes[subject.Role].Running() {
		t.Fatalf("%s still runs after SIGKILL", subject.Role)
	}
	waitAccepted(15)
	close(stop)
	if err := <-streamDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d weight changes accepted through lb1, the last %d", accepted, lastOK)
	want := map[netip.Addr]uint32{be1: uint32(lastOK)}
	rev := fl.waitAgree(t, "the last write", weights("web-ipv4", want), "lb1", "lb2")

	p, err := fl.Start(subject, "manifold-"+subject.Role+"-restarted", hostprog.Built(manifoldBin), "run", "--config", fl.nodes[subject.Role].ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	fl.nodes[subject.Role] = &Node{Process: p, ConfigPath: fl.nodes[subject.Role].ConfigPath}
	polls := 0
	var first *wire.Status
	err = p.WaitReady(20*time.Second, func() error {
		polls++
		st, err := fl.api[subject.Role].Status()
		if err != nil {
			return err
		}
		if len(st.Services) == 0 {
			return fmt.Errorf("the status lists no services yet")
		}
		first = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s's first status listing services came at poll %d", subject.Role, polls)
	if first.Fleet == nil || first.Fleet.AppliedRevision != rev {
		t.Errorf("%s's first status with services: fleet %+v, want applied revision %d", subject.Role, first.Fleet, rev)
	}
	if err := weights("web-ipv4", want)(first); err != nil {
		t.Errorf("%s's first status with services: %v", subject.Role, err)
	}
	fl.waitAgree(t, "the last write", weights("web-ipv4", want))
}

// TestFleetBadInputAsOnFile: every bad write through a fleet node's API gets the same
// status and problems as through a node on a file, and changes nothing.
func TestFleetBadInputAsOnFile(t *testing.T) {
	if err := hostprog.Check(hostprog.Etcd); err != nil {
		testenv.Missing(t, err)
	}
	tl := startBackends(t, []string{"lb1", "lb2"})
	fleetNode, fileNode := tl.Host("lb1"), tl.Host("lb2")
	e, err := tl.StartEtcd(fleetNode)
	if err != nil {
		t.Fatal(err)
	}
	fleetCfg := NodeConfig{Name: fleetNode.Role, Address: fleetNode.Addr4, Address6: fleetNode.Addr6, Fleet: &Fleet{Endpoints: e.Endpoints()}}
	if err := tl.FleetImport(manifoldBin, fleetNode, fleetCfg, nodeConfig(fleetNode, tl.backends, nil), false); err != nil {
		t.Fatal(err)
	}
	configs := map[*Host]NodeConfig{
		fleetNode: fleetCfg,
		fileNode:  nodeConfig(fileNode, tl.backends, nil),
	}
	apis := map[*Host]*NodeAPI{}
	for h, cfg := range configs {
		n, err := tl.StartNode(manifoldBin, h, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tl.nodes[h.Role] = n
		apis[h] = NewNodeAPI(h)
	}
	state := func() (revision int64, specs []byte, file []byte) {
		t.Helper()
		var fleet wire.FleetStatus
		if err := apis[fleetNode].Get("/api/v1/fleet", &fleet); err != nil {
			t.Fatal(err)
		}
		var services []wire.ServiceStatus
		if err := apis[fleetNode].Get("/api/v1/services", &services); err != nil {
			t.Fatal(err)
		}
		var all []wire.ServiceSpec
		for _, s := range services {
			all = append(all, s.Spec)
		}
		specs, _ = json.Marshal(all)
		file, err := os.ReadFile(tl.nodes[fileNode.Role].ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		return fleet.Revision, specs, file
	}
	// wait for the fleet node to serve the imported services before reading its state
	err = Eventually(convergeWithin, 20*time.Millisecond, func() error {
		st, err := apis[fleetNode].Status()
		if err == nil && len(st.Services) != 2 {
			err = fmt.Errorf("%d services", len(st.Services))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rev0, specs0, file0 := state()

	be1, be1v6 := tl.backends[0].Addr4.String(), tl.backends[0].Addr6.String()
	bad := []struct{ method, path, body string }{
		{"PUT", "/api/v1/services/web-ipv4", `{"vip": "198.51.100.10", "port": 80, "backends": [{"address": "` + be1v6 + `"}]}`},
		{"PUT", "/api/v1/services/web-ipv4", `{"vip": "198.51.100.10", "port": 80, "backends": [{"address": "` + be1 + `", "weight": -2}, {"address": "2001:db8::7"}]}`},
		{"PUT", "/api/v1/services/web-ipv4", `{"vip": "198.51.100.10", "port": 80, "colour": "blue"}`},
		{"PUT", "/api/v1/services/web-ipv4", `{"vip": "198.51.100.10", "port": 80, "table_size": 8}`},
		{"PUT", "/api/v1/services/web-ipv4", `{"vip": `},
		{"PUT", "/api/v1/services/other", `{"vip": "198.51.100.10", "port": 80}`},
		{"PUT", "/api/v1/services/bad..name!", `{"vip": "198.51.100.30", "port": 80}`},
		{"POST", weightPath("web-ipv4", tl.backends[0].Addr4), `{"weight": -3}`},
		{"POST", weightPath("web-ipv4", tl.backends[0].Addr4), `{"weight": 70000}`},
		{"POST", "/api/v1/services/web-ipv4/backends/10.9.9.9/drain", ""},
		{"POST", "/api/v1/services/nope/backends/" + be1 + "/undrain", ""},
		{"DELETE", "/api/v1/services/nope", ""},
	}
	for _, b := range bad {
		answers := map[*Host]wire.Error{}
		for h, a := range apis {
			code, body, err := a.Call(b.method, b.path, b.body)
			if err != nil {
				t.Fatal(err)
			}
			var e wire.Error
			if err := json.Unmarshal(body, &e); err != nil || code/100 != 4 || e.Status != code {
				t.Errorf("%s %s %s through %s: %d %s, want a 4xx error body", b.method, b.path, b.body, h.Role, code, body)
			}
			answers[h] = e
		}
		if !reflect.DeepEqual(answers[fleetNode], answers[fileNode]) {
			t.Errorf("%s %s %s:\n fleet node: %+v\n file node:  %+v", b.method, b.path, b.body, answers[fleetNode], answers[fileNode])
		}
	}
	rev, specs, file := state()
	if rev != rev0 || string(specs) != string(specs0) {
		t.Errorf("the bad writes changed the fleet store: revision %d → %d, services %s → %s", rev0, rev, specs0, specs)
	}
	if string(file) != string(file0) {
		t.Errorf("the bad writes changed the file node's config file")
	}
}
