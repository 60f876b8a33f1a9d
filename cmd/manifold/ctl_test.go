package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/steer"
	"github.com/manifoldlb/manifold/internal/tunnel"
)

var update = flag.Bool("update", false, "rewrite the golden files of manifold ctl")

// fixture is a node's status as the API gives it: two services, one of each family,
// a backend down, one draining, BGP with two peers, some drops.
func fixture() wire.Status {
	web := wire.ServiceStatus{
		Name: "web", VIP: "198.51.100.10", Port: 80, Protocol: "tcp", Forwarding: "ipip", Scheduler: "maglev",
		Announced: true, Reason: "1 healthy backend", Packets: 1515, Bytes: 101808, PacketsPerSecond: 151.5, BytesPerSecond: 10180.8,
		Backends: []wire.BackendStatus{
			{Address: "10.0.1.1", Weight: 3, State: "up", Packets: 1000, Bytes: 67000, PacketsPerSecond: 100, BytesPerSecond: 6700,
				Health: wire.BackendHealth{Check: "tcp://10.0.1.1:80", Up: true, LastCheck: "2026-11-21T03:50:00Z", LatencySeconds: 0.00042, Checks: 120}},
			{Address: "10.0.1.2", Weight: 0, State: "draining", Packets: 515, Bytes: 34808, PacketsPerSecond: 51.5, BytesPerSecond: 3480.8,
				Health: wire.BackendHealth{Check: "tcp://10.0.1.2:80", Up: true, LastCheck: "2026-11-21T03:50:00Z", LatencySeconds: 0.00051, Checks: 120}},
			{Address: "10.0.1.3", Weight: 1, State: "down",
				Health: wire.BackendHealth{Check: "tcp://10.0.1.3:80", LastCheck: "2026-11-21T03:50:00Z", LastError: "dial tcp 10.0.1.3:80: connect: connection refused",
					LatencySeconds: 0.00012, Checks: 120, Failures: 17}},
		},
		Spec: wire.ServiceSpec{Name: "web", VIP: "198.51.100.10", Port: 80, Protocol: "tcp", Forwarding: "ipip", GUEPort: 6080,
			Scheduler: "maglev", TableSize: 65537,
			Backends: []wire.BackendSpec{{Address: "10.0.1.1", Weight: 3}, {Address: "10.0.1.2", Weight: 0}, {Address: "10.0.1.3", Weight: 1}},
			Health:   wire.HealthSpec{Kind: "tcp", Port: 80, Interval: "1s", Timeout: "500ms", Rise: 2, Fall: 2}},
	}
	dns := wire.ServiceStatus{
		Name: "dns6", VIP: "2001:db8:100::53", Port: 53, Protocol: "udp", Forwarding: "ipip", Scheduler: "maglev-source",
		Reason: "no healthy backend",
		Backends: []wire.BackendStatus{
			{Address: "2001:db8:1::1", Weight: 1, State: "up", Health: wire.BackendHealth{Check: "none", Up: true}},
		},
		Spec: wire.ServiceSpec{Name: "dns6", VIP: "2001:db8:100::53", Port: 53, Protocol: "udp", Forwarding: "ipip", GUEPort: 6080,
			Scheduler: "maglev-source", TableSize: 65537, Backends: []wire.BackendSpec{{Address: "2001:db8:1::1", Weight: 1}},
			Health: wire.HealthSpec{Kind: "none", Port: 53, Interval: "1s", Timeout: "500ms", Rise: 2, Fall: 2}},
	}
	return wire.Status{
		Node: "lb1", Interfaces: []wire.InterfaceStatus{{Name: "eth0", XDPMode: "native"}},
		BGP: &wire.BGPStatus{ASN: 65001, RouterID: "10.0.0.11", Peers: []wire.PeerStatus{
			{Address: "10.0.0.1", ASN: 65000, State: "established", Up: true, UpSince: "2026-11-21T03:40:00Z", UpdatesSent: 3, UpdatesReceived: 1},
			{Address: "10.0.0.2", ASN: 65000, State: "active"},
		}},
		Services:         []wire.ServiceStatus{dns, web},
		FlowTableEntries: 303, FlowTableSize: 262144,
		Drops:   map[string]uint64{"truncated": 2, "no_backend": 0, "fragment": 1},
		Reloads: 2, ReloadFailures: 1,
		Config: wire.ConfigInfo{File: "/etc/manifold/lb1.yaml", Revision: "3f2a9c1b7d5e8f00112233445566778899aabbccddeeff00112233445566778", InSync: true},
	}
}

// fakeAPI answers like a node; it records the last request.
type fakeAPI struct {
	st       wire.Status
	inSync   bool
	lastReq  string
	lastBody string
	lastAuth string
	lastType string // Content-Type
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.lastReq, f.lastBody, f.lastAuth, f.lastType = r.Method+" "+r.URL.Path, string(body), r.Header.Get("Authorization"), r.Header.Get("Content-Type")
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	web := f.st.Services[1]
	switch {
	case r.URL.Path == "/api/v1/status":
		reply(200, f.st)
	case r.URL.Path == "/api/v1/services":
		reply(200, f.st.Services)
	case r.URL.Path == "/api/v1/services/web":
		reply(200, web)
	case r.URL.Path == "/api/v1/fleet":
		reply(200, wire.FleetStatus{Prefix: "/manifold", Endpoints: []string{"http://10.0.0.5:2379", "http://10.0.0.6:2379"}, Revision: 42, Reachable: true,
			Nodes: []wire.FleetNode{
				{NodeRecord: wire.NodeRecord{Name: "lb1", Site: "ams1", AppliedRevision: 42, UpdatedAt: "2026-11-23T15:00:01Z",
					BGP: []wire.FleetPeer{{Address: "10.0.0.1", Up: true}}, Services: []wire.ServiceLoad{{Name: "web", Announced: true}}}, Alive: true, Agrees: true},
				{NodeRecord: wire.NodeRecord{Name: "lb2", Site: "ams1", AppliedRevision: 40, UpdatedAt: "2026-11-23T14:58:30Z",
					StaleSince: "2026-11-23T14:58:31Z", BGP: []wire.FleetPeer{{Address: "10.0.0.1", Up: false}}, Services: []wire.ServiceLoad{{Name: "web"}}}, Lag: 2},
			}})
	case r.URL.Path == "/api/v1/steering":
		d := steer.Manifold{}.Decide(time.Time{}, steer.Observation{
			Origins: []steer.Origin{{Name: "us", Capacity: 200, Load: 400, Healthy: true}, {Name: "eu", Capacity: 1000, Healthy: true}},
			Sites: []steer.Site{{Name: "sjc", Demand: 400, RTT: map[string]time.Duration{"us": 10 * time.Millisecond, "eu": 150 * time.Millisecond}},
				{Name: "ams", Demand: 100, RTT: map[string]time.Duration{"us": 140 * time.Millisecond, "eu": 12 * time.Millisecond}}},
		}, steer.Shares{"sjc": {"us": 1, "eu": 0}, "ams": {"us": 0, "eu": 1}})
		reply(200, wire.SteeringStatus{Site: "sjc", Services: []wire.Steering{{Service: "web", Round: 7, At: "2026-11-23T15:00:01Z", Leader: "steer1",
			Shares: wire.Shares(d.Shares()), Decision: steer.WireDecision(d)}}})
	case r.URL.Path == "/api/v1/tunnels":
		reply(200, wire.TunnelsStatus{Listen: "0.0.0.0:7443",
			Services: []wire.TunnelService{{Name: "home", VIP: "198.51.100.20", Port: 443, Connectors: 1, Capacity: 100, Open: 2, Announced: true}},
			Tunnels: []wire.Tunnel{
				{ID: 3, Connector: "nas", Remote: "203.0.113.9:40000", Token: "sha256:0123456789ab", Transport: "quic", Services: []wire.TunnelShare{{Name: "home", Capacity: 100, Open: 2}},
					StreamsOpen: 2, StreamLimit: 10000, Streams: 41, BytesToOrigin: 5300, BytesFromOrigin: 7 << 20, RTT: 3200 * time.Microsecond,
					Since: time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)},
				{ID: 4, Connector: "vm2", Remote: "203.0.113.10:50000", Token: "sha256:ba9876543210", Transport: "tcp", Services: []wire.TunnelShare{{Name: "home", Origin: "vm", Capacity: 200, Open: 3}},
					StreamsOpen: 3, StreamLimit: 10000, Streams: 80, BytesToOrigin: 900, BytesFromOrigin: 3 << 30, RTT: 12 * time.Millisecond, Draining: true,
					Since: time.Date(2026, 11, 23, 15, 1, 0, 0, time.UTC)}},
			Counters: wire.TunnelCounters{Attached: 5, Gone: 1, Streams: 121, StreamRetries: 1, ClientsRefused: 0,
				Refused: map[string]uint64{tunnel.RefusedUnknownToken: 2, tunnel.RefusedOutOfScope: 1, tunnel.RefusedTunnelLimit: 0, tunnel.RefusedTLS: 0, tunnel.RefusedProtocol: 0, tunnel.RefusedHelloLimit: 0,
					tunnel.RefusedNoOrigin: 0, tunnel.RefusedUnknownOrigin: 0, tunnel.RefusedNoProxyProtocol: 0}}})
	case r.URL.Path == "/api/v1/config":
		reply(200, wire.ConfigView{ConfigInfo: wire.ConfigInfo{File: f.st.Config.File, Revision: f.st.Config.Revision, InSync: f.inSync},
			YAML: "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\n  api_token: <redacted>\nservices:\n  - name: web\n    vip: 198.51.100.10\n"})
	case r.URL.Path == "/api/v1/services/web/backends/10.0.1.1/drain":
		web.Backends[0].Weight, web.Backends[0].State = 0, "draining"
		reply(200, web)
	case r.URL.Path == "/api/v1/services/web/backends/10.0.1.1/weight":
		web.Backends[0].Weight, web.Backends[0].State = 5, "up"
		reply(200, web)
	case strings.HasPrefix(r.URL.Path, "/api/v1/services/web/backends/10.0.9.9/"):
		reply(404, wire.Error{Status: 404, Field: "address", Message: `service "web" has no backend 10.0.9.9`})
	case r.URL.Path == "/api/v1/services/locked/backends/10.0.1.1/drain":
		reply(401, wire.Error{Status: 401, Field: "Authorization", Message: "this request needs the API token: Authorization: Bearer TOKEN"})
	default:
		reply(404, wire.Error{Status: 404, Message: "no such endpoint"})
	}
}

func runCtl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := ctl(args, &out, &out)
	return out.String(), err
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "ctl", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/manifold -run TestCtl -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("manifold ctl %s differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

func TestCtlGolden(t *testing.T) {
	f := &fakeAPI{st: fixture(), inSync: true}
	srv := httptest.NewServer(f)
	defer srv.Close()
	t.Setenv("MANIFOLD_API", srv.URL)
	t.Setenv("MANIFOLD_API_TOKEN", "")
	cases := []struct {
		name string
		args []string
		req  string // the request ctl must send
		body string
	}{
		{"status", []string{"status"}, "GET /api/v1/status", ""},
		{"services", []string{"services"}, "GET /api/v1/services", ""},
		{"backends", []string{"backends", "web"}, "GET /api/v1/services/web", ""},
		{"config", []string{"config"}, "GET /api/v1/config", ""},
		{"fleet", []string{"fleet"}, "GET /api/v1/fleet", ""},
		{"steering", []string{"steering"}, "GET /api/v1/steering", ""},
		{"tunnels", []string{"tunnels"}, "GET /api/v1/tunnels", ""},
		{"drain", []string{"drain", "web", "10.0.1.1"}, "POST /api/v1/services/web/backends/10.0.1.1/drain", ""},
		{"weight", []string{"weight", "web", "10.0.1.1", "5"}, "POST /api/v1/services/web/backends/10.0.1.1/weight", `{"weight":5}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runCtl(t, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if f.lastReq != c.req || f.lastBody != c.body {
				t.Errorf("sent %s %q, want %s %q", f.lastReq, f.lastBody, c.req, c.body)
			}
			golden(t, c.name, out)
		})
	}
	f.inSync = false
	out, err := runCtl(t, "config")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "config-not-in-sync", out)
}

// -o json prints the API's answer as is, wherever the flag is.
func TestCtlJSON(t *testing.T) {
	f := &fakeAPI{st: fixture()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	for _, args := range [][]string{
		{"--api", srv.URL, "-o", "json", "backends", "web"},
		{"backends", "web", "-o", "json", "--api", srv.URL},
	} {
		out, err := runCtl(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var s wire.ServiceStatus
		if err := json.Unmarshal([]byte(out), &s); err != nil || s.Name != "web" || len(s.Backends) != 3 {
			t.Errorf("%v: not the service's JSON: %v\n%s", args, err, out)
		}
	}
}

func TestCtlErrors(t *testing.T) {
	f := &fakeAPI{st: fixture()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	// a port nobody listens on: the daemon is not running
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()

	t.Setenv("MANIFOLD_API_TOKEN", "s3cret")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--api", down, "status"}, "cannot reach the node API at " + down + " (is `manifold run` running there?"},
		{[]string{"--api", srv.URL, "drain", "web", "10.0.9.9"}, `address: service "web" has no backend 10.0.9.9 (404)`},
		{[]string{"--api", srv.URL, "drain", "locked", "10.0.1.1"}, "needs the API token: Authorization: Bearer TOKEN (set MANIFOLD_API_TOKEN) (401)"},
		{[]string{"--api", srv.URL, "weight", "web", "10.0.1.1", "heavy"}, `weight "heavy": must be a whole number 0..65535`},
		{[]string{"--api", srv.URL, "drain", "web"}, "drain takes 2 argument(s), got 1"},
		{[]string{"--api", srv.URL, "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--api", srv.URL, "-o", "yaml", "status"}, "-o yaml: accepted: table, json"},
		{[]string{}, "usage: manifold ctl"},
	}
	for _, c := range cases {
		_, err := runCtl(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ctl %v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
	if _, err := runCtl(t, "--api", srv.URL, "drain", "web", "10.0.1.1"); err != nil {
		t.Fatal(err)
	}
	if f.lastAuth != "Bearer s3cret" {
		t.Errorf("Authorization %q, want the token of MANIFOLD_API_TOKEN", f.lastAuth)
	}
}
