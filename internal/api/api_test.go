package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/api/apitest"
	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/steer"
	"github.com/manifoldlb/manifold/internal/store"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

const token = "t0ken-for-the-tests"

// fakeNode is the daemon without a kernel: writes go through the real store (the
// file, its validation and its durability); the data plane is a switch that refuses.
type fakeNode struct {
	st *store.Store

	mu       sync.Mutex
	refuse   bool // the "kernel" refuses the next change
	stopping bool
	// fleet is what Fleet returns: nil for a node without a fleet section;
	// fleetDown makes the store unreachable.
	fleet     *wire.FleetStatus
	fleetDown bool
	// warn is the warning of the next change, made as the node's file source makes a
	// change whose directory fsync failed after the rename (store.Committed).
	warn string
}

func (f *fakeNode) Fleet(context.Context) (wire.FleetStatus, error) {
	switch {
	case f.fleet == nil:
		return wire.FleetStatus{}, api.ErrNoFleet
	case f.fleetDown:
		return wire.FleetStatus{}, store.Unavailable("the fleet store cannot be reached: context deadline exceeded")
	}
	return *f.fleet, nil
}

func (f *fakeNode) Status() wire.Status {
	cfg := f.st.Config()
	st := wire.Status{Node: cfg.Node.Name, Interfaces: []wire.InterfaceStatus{{Name: "eth0", XDPMode: "native"}},
		Services: f.services(), FlowTableSize: cfg.Node.FlowTableSize, Drops: map[string]uint64{"truncated": 0},
		Config: api.Info(f.st)}
	if b := cfg.BGP; b != nil {
		st.BGP = &wire.BGPStatus{ASN: b.ASN, RouterID: b.RouterID.String(), Peers: []wire.PeerStatus{}}
		for _, p := range b.Peers {
			st.BGP.Peers = append(st.BGP.Peers, wire.PeerStatus{Address: p.Address.String(), ASN: p.ASN, State: "idle"})
		}
	}
	return st
}

func (f *fakeNode) Services() []wire.ServiceStatus { return f.services() }

func (f *fakeNode) Service(name string) (wire.ServiceStatus, bool) {
	for _, s := range f.services() {
		if s.Name == name {
			return s, true
		}
	}
	return wire.ServiceStatus{}, false
}

func (f *fakeNode) services() []wire.ServiceStatus {
	out := []wire.ServiceStatus{}
	for _, s := range f.st.Config().Services {
		ss := wire.ServiceStatus{Name: s.Name, VIP: s.VIP.String(), Port: s.Port, Protocol: string(s.Protocol),
			Forwarding: string(s.Forwarding), Scheduler: string(s.Scheduler), Backends: []wire.BackendStatus{}, Spec: api.SpecOf(&s)}
		for _, b := range s.Backends {
			state := wire.BackendUp
			if b.Weight == 0 {
				state = wire.BackendDraining
			}
			ss.Backends = append(ss.Backends, wire.BackendStatus{Address: b.Address.String(), Weight: b.Weight, State: state,
				Health: wire.BackendHealth{Check: "none", Up: true}})
		}
		out = append(out, ss)
	}
	return out
}

func (f *fakeNode) ChangeOwn(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error {
	return f.Change(ctx, edit)
}

func (f *fakeNode) Change(ctx context.Context, edit func(*store.Store) (*store.Change, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping {
		return context.Canceled
	}
	ch, err := edit(f.st)
	if err != nil {
		return err
	}
	if err := f.st.Commit(ch); err != nil {
		return err
	}
	if f.refuse {
		f.refuse = false
		if err := f.st.Revert(ch); err != nil {
			return err
		}
		return &store.Error{Kind: store.Failed, Problems: []store.Problem{{Message: "the kernel refused the change"}}}
	}
	if w := f.warn; w != "" {
		f.warn = ""
		return &store.Committed{Warning: w}
	}
	return nil
}

const nodeFile = `# the node of the API tests
node:
  name: lb1
  interfaces: [eth0]
  address: 10.0.0.11
  address6: 2001:db8::11
  api_token: t0ken-for-the-tests
bgp:
  asn: 65001
  router_id: 10.0.0.11
  peers:
    - address: 10.0.0.1
      asn: 65000
services:
  - name: web
    vip: 198.51.100.10
    port: 80
    backends:
      - address: 10.0.1.1 # rack 1
        weight: 3
      - address: 10.0.1.2
  - name: dns6
    vip: 2001:db8:100::53
    port: 53
    protocol: udp
    backends:
      - address: 2001:db8:1::1
  - name: nat # every forwarding that a status shows in another way
    vip: 198.51.100.12
    port: 8080
    forwarding: nat
    backend_port: 80
    backends:
      - address: 10.0.2.1
`

type env struct {
	t      *testing.T
	node   *fakeNode
	srv    *api.Server
	http   *httptest.Server
	check  *apitest.Checker
	client *http.Client
}

func newEnv(t *testing.T, check *apitest.Checker, openReads bool) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lb1.yaml")
	if err := os.WriteFile(path, []byte(nodeFile), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, node: &fakeNode{st: st}, check: check, client: &http.Client{}}
	e.srv = &api.Server{Node: e.node, Store: st, Token: token, OpenReads: openReads,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "manifold_up 1") }),
		Log:     slog.New(slog.DiscardHandler)}
	e.http = httptest.NewServer(e.srv.Handler())
	t.Cleanup(e.http.Close)
	return e
}

// do sends one request with the token unless auth says otherwise ("" for none), and
// checks the exchange against the document.
func (e *env) do(method, path, body string, auth ...string) *apitest.Exchange {
	e.t.Helper()
	a := "Bearer " + token
	if len(auth) > 0 {
		a = auth[0]
	}
	return e.doHeaders(method, path, body, map[string]string{"Authorization": a})
}

// doHeaders is do with the token, a JSON content type when there is a body, and the
// headers of h over them ("" removes one; "Host" sets the request's Host).
func (e *env) doHeaders(method, path, body string, h map[string]string) *apitest.Exchange {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	x, err := e.check.Do(e.client, req, []byte(body))
	if err != nil {
		e.t.Fatal(err)
	}
	return x
}

func (e *env) file() string {
	b, err := os.ReadFile(e.node.st.Path())
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func decode[T any](t *testing.T, x *apitest.Exchange) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(x.Body, &v); err != nil {
		t.Fatalf("body: %v\n%s", err, x.Body)
	}
	return v
}

// TestConformance runs every operation through its documented responses (success and
// every error) and checks each exchange against the OpenAPI document, then checks
// that no documented response went unexercised: the document describes exactly what
// the handlers do.
func TestConformance(t *testing.T) {
	check, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, check, false)
	const svc = `{"vip": "198.51.100.20", "port": 443, "backends": [{"address": "10.0.2.1", "weight": 2}], "health": {"kind": "tcp"}}`
	const peer = `{"asn": 65000, "bfd": {"min_rx": "100ms", "min_tx": "100ms", "multiplier": 3}}`
	steps := []struct {
		method, path, body string
		auth               []string
		want               int
	}{
		{"GET", "/api/v1/openapi.json", "", nil, 200},
		{"GET", "/", "", nil, 200},
		{"GET", "/api/v1/status", "", nil, 200},
		{"GET", "/api/v1/services", "", nil, 200},
		{"GET", "/api/v1/services/web", "", nil, 200},
		{"GET", "/api/v1/services/nope", "", nil, 404},
		{"GET", "/api/v1/config", "", nil, 200},
		{"GET", "/metrics", "", nil, 200},
		{"PUT", "/api/v1/services/api", svc, nil, 201},
		{"PUT", "/api/v1/services/api", svc, nil, 200},
		{"PUT", "/api/v1/services/api2", `{"vip": "198.51.100.20", "port": 443, "backends": []}`, nil, 409},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "port": "443"}`, nil, 400},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "backends": [{"address": "10.0.2.1", "weight": -1}]}`, nil, 400},
		{"PUT", "/api/v1/services/api", `{"vip": 7}`, nil, 400},
		{"PUT", "/api/v1/services/api", `[]`, nil, 400},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "colour": "blue"}`, nil, 400},
		{"PUT", "/api/v1/services/api", `{"name": "other", "vip": "198.51.100.20"}`, nil, 400},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "backends": [{"address": "2001:db8::1"}]}`, nil, 400},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "table_size": 100}`, nil, 400},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "names": ` + strings.Repeat(" ", 1<<20) + `"x"}`, nil, 413},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/drain", "", nil, 200},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/drain", "", nil, 200},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/undrain", "", nil, 200},
		{"POST", "/api/v1/services/web/backends/10.0.1.9/drain", "", nil, 404},
		{"POST", "/api/v1/services/nope/backends/10.0.1.1/undrain", "", nil, 404},
		{"POST", "/api/v1/services/web/backends/10.0.1/drain", "", nil, 400},
		{"POST", "/api/v1/services/web/backends/10.0.1/undrain", "", nil, 400},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{"weight": 5}`, nil, 200},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{"weight": 70000}`, nil, 400},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{"weight": "5"}`, nil, 400},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{}`, nil, 400},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{"weight": 1, "x": 1}`, nil, 400},
		{"POST", "/api/v1/services/web/backends/10.0.1.9/weight", `{"weight": 5}`, nil, 404},
		{"POST", "/api/v1/services/web/backends/2001:db8:1::1/weight", `{"weight": 5}`, nil, 404},
		{"POST", "/api/v1/services/dns6/backends/2001:db8:1::1/weight", `{"weight": 5}`, nil, 200},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{"weight": 1}` + strings.Repeat(" ", 1<<20), nil, 413},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/drain", strings.Repeat(" ", 1<<20+1), nil, 413},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/undrain", strings.Repeat(" ", 1<<20+1), nil, 413},
		{"DELETE", "/api/v1/services/api", "", nil, 204},
		{"DELETE", "/api/v1/services/api", "", nil, 404},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", peer, nil, 201},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", `{"asn": 65000, "hold_time": "6s"}`, nil, 200},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", `{"asn": 65000, "bfd": {"min_rx": "5ms"}}`, nil, 400},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", `{"address": "10.0.0.3", "asn": 65000}`, nil, 400},
		{"PUT", "/api/v1/bgp/peers/10.0.0", peer, nil, 400},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", `{"asn": 65000, "x": "` + strings.Repeat(" ", 1<<20) + `"}`, nil, 413},
		{"DELETE", "/api/v1/bgp/peers/10.0.0.2", "", nil, 204},
		{"DELETE", "/api/v1/bgp/peers/10.0.0.2", "", nil, 404},
		{"DELETE", "/api/v1/bgp/peers/10.0.0", "", nil, 400},
		{"DELETE", "/api/v1/bgp/peers/10.0.0.1", "", nil, 409},
	}
	// every operation: without a token, and with a wrong one
	for _, op := range []struct{ method, path, body string }{
		{"GET", "/api/v1/openapi.json", ""}, {"GET", "/", ""}, {"GET", "/api/v1/status", ""}, {"GET", "/api/v1/services", ""},
		{"GET", "/api/v1/services/web", ""}, {"GET", "/api/v1/config", ""}, {"GET", "/metrics", ""},
		{"PUT", "/api/v1/services/api", svc}, {"DELETE", "/api/v1/services/web", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/drain", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/undrain", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/weight", `{"weight": 2}`},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", peer}, {"DELETE", "/api/v1/bgp/peers/10.0.0.1", ""},
	} {
		steps = append(steps,
			struct {
				method, path, body string
				auth               []string
				want               int
			}{op.method, op.path, op.body, []string{""}, 401},
			struct {
				method, path, body string
				auth               []string
				want               int
			}{op.method, op.path, op.body, []string{"Bearer wrong"}, 403})
	}
	// every operation: for a name that is not the API's (421); every write: from
	// another site (403), with a body that is not JSON (415)
	for _, op := range []struct{ method, path, body string }{
		{"GET", "/api/v1/openapi.json", ""}, {"GET", "/", ""}, {"GET", "/api/v1/status", ""}, {"GET", "/api/v1/services", ""},
		{"GET", "/api/v1/services/web", ""}, {"GET", "/api/v1/config", ""}, {"GET", "/metrics", ""}, {"GET", "/api/v1/fleet", ""},
		{"GET", "/api/v1/steering", ""}, {"GET", "/api/v1/tunnels", ""}, {"GET", "/api/v1/flows", ""},
		{"PUT", "/api/v1/services/api", svc}, {"DELETE", "/api/v1/services/web", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/drain", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/undrain", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/weight", `{"weight": 2}`},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", peer}, {"DELETE", "/api/v1/bgp/peers/10.0.0.1", ""},
	} {
		before := e.file()
		if x := e.doHeaders(op.method, op.path, op.body, map[string]string{"Host": "rebind.example:9100"}); x.Status != 421 {
			t.Errorf("%s %s for Host rebind.example: %d %s, want 421", op.method, op.path, x.Status, x.Body)
		}
		if op.method == "GET" {
			continue
		}
		if x := e.doHeaders(op.method, op.path, op.body, map[string]string{"Origin": "http://evil.example"}); x.Status != 403 {
			t.Errorf("%s %s from another site: %d %s, want 403", op.method, op.path, x.Status, x.Body)
		}
		body := op.body
		if body == "" {
			body = "{}"
		}
		if x := e.doHeaders(op.method, op.path, body, map[string]string{"Content-Type": "text/plain"}); x.Status != 415 {
			t.Errorf("%s %s with a text/plain body: %d %s, want 415", op.method, op.path, x.Status, x.Body)
		}
		if e.file() != before {
			t.Errorf("%s %s: refused but the file changed", op.method, op.path)
		}
	}
	for _, s := range steps {
		before := e.file()
		x := e.do(s.method, s.path, s.body, s.auth...)
		if x.Status != s.want {
			t.Errorf("%s %s %.60s: status %d, want %d\n%s", s.method, s.path, s.body, x.Status, s.want, x.Body)
		}
		if x.Status >= 400 {
			if e.file() != before {
				t.Errorf("%s %s %.60s: refused with %d but the file changed", s.method, s.path, s.body, x.Status)
			}
		}
		// what the document refuses, the handler refuses
		if !x.DocAccepts && x.Status < 400 {
			t.Errorf("%s %s %.60s: the document refuses it (%v) but the handler answered %d", s.method, s.path, s.body, x.RequestProblem, x.Status)
		}
	}

	// 409: the file was edited on disk and not reloaded
	edited := strings.Replace(e.file(), "weight: 3", "weight: 4", 1)
	if err := os.WriteFile(e.node.st.Path(), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range [][3]string{
		{"PUT", "/api/v1/services/api", svc}, {"DELETE", "/api/v1/services/web", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/drain", ""}, {"POST", "/api/v1/services/web/backends/10.0.1.1/undrain", ""},
		{"POST", "/api/v1/services/web/backends/10.0.1.1/weight", `{"weight": 2}`},
		{"PUT", "/api/v1/bgp/peers/10.0.0.2", peer}, {"DELETE", "/api/v1/bgp/peers/10.0.0.1", ""},
	} {
		if x := e.do(s[0], s[1], s[2]); x.Status != 409 || !strings.Contains(string(x.Body), "SIGHUP") {
			t.Errorf("%s %s with the file edited on disk: %d %s, want 409 saying to SIGHUP", s[0], s[1], x.Status, x.Body)
		}
	}
	if e.file() != edited {
		t.Fatal("the operator's edit was overwritten")
	}
	ch, err := e.node.st.Reread()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.node.st.Commit(ch); err != nil {
		t.Fatal(err)
	}

	if x := e.do("PUT", "/api/v1/bgp/peers/10.0.0.2", peer); x.Status != 201 {
		t.Fatalf("a second peer for the deletes below: %d %s", x.Status, x.Body)
	}
	// 500: the kernel refuses; 503: the node is stopping. Nothing changes either way.
	for _, fault := range []struct {
		set  func()
		want int
	}{
		{func() { e.node.refuse = true }, 500},
		{func() { e.node.stopping = true }, 503},
	} {
		for _, s := range [][3]string{
			{"PUT", "/api/v1/services/api", svc}, {"DELETE", "/api/v1/services/web", ""},
			{"POST", "/api/v1/services/web/backends/10.0.1.1/drain", ""}, {"POST", "/api/v1/services/web/backends/10.0.1.1/weight", `{"weight": 2}`},
			{"POST", "/api/v1/services/web/backends/10.0.1.1/drain", ""}, {"POST", "/api/v1/services/web/backends/10.0.1.1/undrain", ""},
			{"PUT", "/api/v1/bgp/peers/10.0.0.2", peer}, {"DELETE", "/api/v1/bgp/peers/10.0.0.2", ""},
		} {
			if s[1] == "/api/v1/services/web/backends/10.0.1.1/undrain" && fault.want == 500 {
				continue // weight 4 now: nothing to undo, nothing for the kernel to refuse
			}
			before, cfg := e.file(), e.node.st.Config()
			fault.set()
			x := e.do(s[0], s[1], s[2])
			e.node.refuse, e.node.stopping = false, false
			if x.Status != fault.want {
				t.Errorf("%s %s: %d %s, want %d", s[0], s[1], x.Status, x.Body, fault.want)
			}
			if e.file() != before || e.node.st.Config() != cfg {
				t.Errorf("%s %s → %d changed the file or the config", s[0], s[1], x.Status)
			}
		}
	}
	// undrain refused by the kernel: drain first
	e.do("POST", "/api/v1/services/web/backends/10.0.1.1/drain", "")
	e.node.refuse = true
	if x := e.do("POST", "/api/v1/services/web/backends/10.0.1.1/undrain", ""); x.Status != 500 {
		t.Errorf("undrain refused by the kernel: %d", x.Status)
	}

	// the fleet: none on this node (404), then one (200), then its store gone (503)
	if x := e.do("GET", "/api/v1/fleet", ""); x.Status != 404 {
		t.Errorf("fleet of a file node: %d %s", x.Status, x.Body)
	}
	e.node.fleet = &wire.FleetStatus{Prefix: "/manifold", Endpoints: []string{"http://10.0.0.5:2379"}, Revision: 7, Reachable: true,
		Nodes: []wire.FleetNode{{NodeRecord: wire.NodeRecord{Name: "lb1", Site: "ams1", Addresses: []string{"10.0.0.11"}, AppliedRevision: 7,
			AppliedAt: "2026-11-23T15:00:00Z", UpdatedAt: "2026-11-23T15:00:01Z", BGP: []wire.FleetPeer{{Address: "10.0.0.1", Up: true}},
			Services: []wire.ServiceLoad{{Name: "web", Announced: true, PacketsPerSecond: 10, Backends: []wire.BackendLoad{
				{Address: "10.0.1.1", State: wire.BackendUp, Healthy: true, PacketsPerSecond: 10}}}}}, Alive: true, Agrees: true}}}
	if x := e.do("GET", "/api/v1/fleet", ""); x.Status != 200 || decode[wire.FleetStatus](t, x).Nodes[0].Site != "ams1" {
		t.Errorf("fleet: %d %s", x.Status, x.Body)
	}
	e.node.fleetDown = true
	if x := e.do("GET", "/api/v1/fleet", ""); x.Status != 503 {
		t.Errorf("fleet with its store down: %d %s", x.Status, x.Body)
	}
	for _, a := range []string{"", "Bearer wrong"} {
		e.do("GET", "/api/v1/fleet", "", a)
	}

	// steering: none without a fleet (404), then the shares the node read (200)
	if x := e.do("GET", "/api/v1/steering", ""); x.Status != 404 {
		t.Errorf("steering of a file node: %d %s", x.Status, x.Body)
	}
	d := steer.Manifold{}.Decide(time.Time{}, steer.Observation{
		Origins: []steer.Origin{{Name: "us", Capacity: 200, Load: 400, Healthy: true}, {Name: "eu", Capacity: 1000, Healthy: true}},
		Sites:   []steer.Site{{Name: "sjc", Demand: 400, RTT: map[string]time.Duration{"us": 10 * time.Millisecond, "eu": 150 * time.Millisecond}}},
	}, steer.Shares{"sjc": {"us": 1, "eu": 0}})
	e.srv.Steering = func() wire.SteeringStatus {
		return wire.SteeringStatus{Site: "sjc", Services: []wire.Steering{{Service: "web", Round: 3, At: "2026-11-23T15:00:00Z", Leader: "steer1",
			Shares: wire.Shares(d.Shares()), Decision: steer.WireDecision(d)}}}
	}
	if x := e.do("GET", "/api/v1/steering", ""); x.Status != 200 || decode[wire.SteeringStatus](t, x).Services[0].Shares["sjc"]["us"] != 0.75 {
		t.Errorf("steering: %d %s", x.Status, x.Body)
	}
	for _, a := range []string{"", "Bearer wrong"} {
		e.do("GET", "/api/v1/steering", "", a)
	}

	// tunnels: none without a tunnels section (404), then the edge (200)
	if x := e.do("GET", "/api/v1/tunnels", ""); x.Status != 404 {
		t.Errorf("tunnels of a node without an edge: %d %s", x.Status, x.Body)
	}
	e.srv.Tunnels = func() wire.TunnelsStatus {
		return wire.TunnelsStatus{Listen: "0.0.0.0:7443",
			Services: []wire.TunnelService{{Name: "home", VIP: "198.51.100.20", Port: 443, Connectors: 1, Capacity: 100, Open: 3, Announced: true}},
			Tunnels: []wire.Tunnel{{ID: 1, Connector: "nas", Remote: "203.0.113.9:40000", Token: "sha256:0123456789ab", Transport: "tcp",
				Services: []wire.TunnelShare{{Name: "home", Capacity: 100, Open: 3}}, StreamsOpen: 3, StreamLimit: 10000, Streams: 40,
				BytesToOrigin: 1000, BytesFromOrigin: 90000, RTT: 3 * time.Millisecond, Since: time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)}},
			Counters: wire.TunnelCounters{Attached: 2, Refused: map[string]uint64{tunnel.RefusedUnknownToken: 1}, Streams: 40}}
	}
	if x := e.do("GET", "/api/v1/tunnels", ""); x.Status != 200 || decode[wire.TunnelsStatus](t, x).Tunnels[0].Services[0].Open != 3 {
		t.Errorf("tunnels: %d %s", x.Status, x.Body)
	}
	for _, a := range []string{"", "Bearer wrong"} {
		e.do("GET", "/api/v1/tunnels", "", a)
	}

	// flows: the node's flow table, of one service or all, up to a limit
	if x := e.do("GET", "/api/v1/flows", ""); x.Status != 404 {
		t.Errorf("flows of a node without a data plane: %d %s", x.Status, x.Body)
	}
	var asked []string
	e.srv.Flows = func(service string, limit int) (wire.FlowsView, error) {
		asked = append(asked, fmt.Sprintf("%s/%d", service, limit))
		if service != "" && service != "web" {
			return wire.FlowsView{}, api.ErrNoSuchService
		}
		idle := 2.0
		return wire.FlowsView{Total: 7, Size: 262144, Flows: []wire.FlowStatus{{Protocol: "tcp", Client: "203.0.113.7:40000",
			VIP: "198.51.100.10:80", Service: "web", Backend: "10.0.1.1", IdleSeconds: &idle}}}, nil
	}
	if x := e.do("GET", "/api/v1/flows", ""); x.Status != 200 || decode[wire.FlowsView](t, x).Flows[0].Backend != "10.0.1.1" {
		t.Errorf("flows: %d %s", x.Status, x.Body)
	}
	if x := e.do("GET", "/api/v1/flows?service=web&limit=5", ""); x.Status != 200 || decode[wire.FlowsView](t, x).Total != 7 {
		t.Errorf("flows of web: %d %s", x.Status, x.Body)
	}
	if x := e.do("GET", "/api/v1/flows?service=nope", ""); x.Status != 404 {
		t.Errorf("flows of an unknown service: %d %s", x.Status, x.Body)
	}
	for _, bad := range []string{"0", "10001", "ten"} {
		if x := e.do("GET", "/api/v1/flows?limit="+bad, ""); x.Status != 400 {
			t.Errorf("flows with limit %s: %d %s", bad, x.Status, x.Body)
		}
	}
	if want := []string{"/100", "web/5", "nope/100"}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("the node was asked for %v, want %v (a bad limit asks nothing)", asked, want)
	}
	for _, a := range []string{"", "Bearer wrong"} {
		e.do("GET", "/api/v1/flows", "", a)
	}

	if unseen := check.Unseen(); len(unseen) > 0 {
		t.Errorf("documented responses never produced (document them only if the handlers can give them):\n%s", strings.Join(unseen, "\n"))
	}
}

// Without a token configured nothing needs one; with one, reads on loopback are open.
func TestAuth(t *testing.T) {
	check, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, check, true)
	for _, path := range []string{"/", "/api/v1/status", "/api/v1/services", "/api/v1/services/web", "/api/v1/config", "/metrics", "/api/v1/openapi.json"} {
		if x := e.do("GET", path, "", ""); x.Status != 200 {
			t.Errorf("GET %s without a token on loopback: %d, want 200", path, x.Status)
		}
	}
	x := e.do("POST", "/api/v1/services/web/backends/10.0.1.1/drain", "", "")
	if x.Status != 401 || x.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("write without a token: %d (WWW-Authenticate %q), want 401 with the header", x.Status, x.Header.Get("WWW-Authenticate"))
	}
	for _, bad := range []string{"Basic " + token, "Bearer", "bearer " + token + "x", token} {
		if x := e.do("POST", "/api/v1/services/web/backends/10.0.1.1/drain", "", bad); x.Status != 401 && x.Status != 403 {
			t.Errorf("write with Authorization %q: %d, want 401 or 403", bad, x.Status)
		}
	}
	if x := e.do("POST", "/api/v1/services/web/backends/10.0.1.1/drain", "", "bearer "+token); x.Status != 200 {
		t.Errorf("the scheme is case-insensitive: %d", x.Status)
	}
	body := decode[wire.Error](t, e.do("PUT", "/api/v1/services/x", "{}", "Bearer nope"))
	if body.Status != 403 || body.Field != "Authorization" || strings.Contains(body.Message, token) {
		t.Errorf("403 body: %+v", body)
	}

	e.srv.Token = ""
	if x := e.do("POST", "/api/v1/services/web/backends/10.0.1.1/undrain", "", ""); x.Status != 200 {
		t.Errorf("no token configured: write answered %d, want 200", x.Status)
	}
}

// Error bodies name the field at fault, relative to the request.
func TestErrorBodies(t *testing.T) {
	check, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, check, true)
	cases := []struct {
		method, path, body string
		status             int
		field, msg         string
	}{
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "backends": [{"address": "10.0.2.1"}, {"address": "10.0.2.1", "weight": -2}]}`, 400, "backends[1].address", "duplicate backend: same address as backends[0]"},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.10", "port": 80, "backends": []}`, 409, "vip", `served by service "web"`},
		{"PUT", "/api/v1/services/api", `{"vip": "198.51.100.20"`, 400, "", "not valid JSON"},
		{"POST", "/api/v1/services/web/backends/10.0.1.2/weight", `{"weight": -1}`, 400, "weight", "must not be negative (accepted: 0..65535)"},
		{"POST", "/api/v1/services/web/backends/10.0.9.9/drain", ``, 404, "address", `service "web" has no backend 10.0.9.9`},
		{"DELETE", "/api/v1/services/nope", ``, 404, "name", `no service "nope"`},
	}
	for _, c := range cases {
		x := e.do(c.method, c.path, c.body)
		b := decode[wire.Error](t, x)
		if x.Status != c.status || b.Status != c.status || b.Field != c.field || !strings.Contains(b.Message, c.msg) || len(b.Problems) == 0 {
			t.Errorf("%s %s %s: %d %+v, want %d field %q message with %q", c.method, c.path, c.body, x.Status, b, c.status, c.field, c.msg)
		}
	}
	// two problems at once are both reported
	b := decode[wire.Error](t, e.do("PUT", "/api/v1/services/api", `{"vip": "198.51.100.20", "port": -1, "backends": [{"address": "10.0.2.1", "weight": -2}]}`))
	if len(b.Problems) != 2 {
		t.Errorf("problems %+v, want both the port and the weight", b.Problems)
	}
	// unknown endpoints and methods answer JSON too
	for _, r := range [][2]string{{"GET", "/api/v1/nope"}, {"PATCH", "/api/v1/services/web"}} {
		req, _ := http.NewRequest(r[0], e.http.URL+r[1], nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb wire.Error
		err = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if err != nil || eb.Status != resp.StatusCode || (resp.StatusCode != 404 && resp.StatusCode != 405) {
			t.Errorf("%s %s: %d %+v %v, want a JSON 404/405", r[0], r[1], resp.StatusCode, eb, err)
		}
	}
}

// GET's spec, PUT back, changes nothing: the spec carries every field of a service.
func TestSpecRoundTrip(t *testing.T) {
	check, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, check, true)
	full := `{"vip": "198.51.100.30", "port": 8443, "protocol": "udp", "forwarding": "ipip", "gue_port": 6081,
		"scheduler": "maglev-source", "table_size": 251, "backends": [{"address": "10.0.3.1", "weight": 7}, {"address": "10.0.3.2", "weight": 0}],
		"health": {"kind": "http", "port": 8080, "path": "/healthz", "interval": "2s", "timeout": "1500ms", "rise": 3, "fall": 5}}`
	if x := e.do("PUT", "/api/v1/services/full", full); x.Status != 201 {
		t.Fatalf("PUT: %d %s", x.Status, x.Body)
	}
	for _, name := range []string{"full", "web", "dns6"} {
		before := e.node.st.Config()
		got := decode[wire.ServiceStatus](t, e.do("GET", "/api/v1/services/"+name, ""))
		spec, _ := json.Marshal(got.Spec)
		if x := e.do("PUT", "/api/v1/services/"+name, string(spec)); x.Status != 200 {
			t.Fatalf("PUT back %s: %d %s", name, x.Status, x.Body)
		}
		if !reflect.DeepEqual(e.node.st.Config(), before) {
			t.Errorf("PUT of the GET spec of %s changed the config: %s", name, spec)
		}
	}
	// ServiceSpec mirrors config.Service field for field: a new field must be added
	// to it (and to openapi.json), or a GET-then-PUT would reset it to its default.
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[config.Service](), reflect.TypeFor[wire.ServiceSpec]()},
		{reflect.TypeFor[config.Backend](), reflect.TypeFor[wire.BackendSpec]()},
		{reflect.TypeFor[config.Health](), reflect.TypeFor[wire.HealthSpec]()},
	} {
		var have, want []string
		for f := range pair[0].Fields() {
			want = append(want, f.Name)
		}
		for f := range pair[1].Fields() {
			have = append(have, f.Name)
		}
		if !slices.Equal(have, want) {
			t.Errorf("%v has fields %v, %v has %v: keep them in step", pair[0], want, pair[1], have)
		}
	}
}
