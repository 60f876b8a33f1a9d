package lab

// Lab tests of the operator surface: the REST API of a live node (its OpenAPI
// document, auth, errors), durability of API changes across restarts and kill -9,
// /metrics (promtool, and counts of what the client sent), and manifold ctl.

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/apitest"
	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/metrics"
	"github.com/manifoldlb/manifold/internal/testenv"
)

const apiToken = "lab-t0ken-5e3c-of-the-api-tests"

const apiBase = "http://127.0.0.1:9100"

// apiLab is a lab whose node lb1 runs with an API token (from a file).
type apiLab struct {
	*testLab
	lb       *Host
	api      *http.Client // to lb1's API
	restarts int
}

func startAPILab(t *testing.T) *apiLab {
	t.Helper()
	tl := startLab(t, []string{"lb1"}, nil)
	al := &apiLab{testLab: tl, lb: tl.Host("lb1"), api: HTTPClient(tl.Host("lb1").NS, 10*time.Second)}
	if err := tl.nodes["lb1"].Stop(); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(tl.Dir, "api-token")
	if err := os.WriteFile(tokenFile, []byte(apiToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(nodeConfig(al.lb, tl.backends, nil).YAML()), "  api: 127.0.0.1:9100\n",
		"  api: 127.0.0.1:9100\n  api_token_file: "+tokenFile+"\n", 1)
	if err := writeFileAtomic(tl.nodes["lb1"].ConfigPath, []byte(y)); err != nil {
		t.Fatal(err)
	}
	al.restart(t)
	return al
}

// restart starts `manifold run` on lb1's config file again (after Stop or a kill) and
// waits until XDP is attached and the API answers.
func (al *apiLab) restart(t *testing.T) *Node {
	t.Helper()
	al.restarts++
	old := al.nodes["lb1"]
	p, err := al.Start(al.lb, fmt.Sprintf("manifold-lb1-run%d", al.restarts), hostprog.Built(manifoldBin), "run", "--config", old.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Process: p, ConfigPath: old.ConfigPath}
	al.nodes["lb1"] = n
	err = p.WaitReady(15*time.Second, func() error {
		if id, err := al.lb.XDPProgID(HostLink); err != nil || id == 0 {
			return fmt.Errorf("no XDP program (%v)", err)
		}
		_, err := al.get("/api/v1/status")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// call sends one API request with the token and returns the status and body.
func (al *apiLab) call(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, apiBase+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := al.api.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (al *apiLab) get(path string) ([]byte, error) {
	code, body, err := al.call("GET", path, "")
	if err == nil && code != 200 {
		err = fmt.Errorf("GET %s: %d %s", path, code, body)
	}
	return body, err
}

func (al *apiLab) service(t *testing.T, name string) wire.ServiceStatus {
	t.Helper()
	body, err := al.get("/api/v1/services/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var s wire.ServiceStatus
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// backendOf is the backend of addr in s, nil when s has none.
func backendOf(s wire.ServiceStatus, addr string) *wire.BackendStatus {
	b, _ := s.Backend(addr)
	return b
}

// TestAPIOperatorSurface drives a live node through its API: every exchange matches
// the OpenAPI document; auth; refused writes change nothing; a drain takes a backend
// out of new connections and survives a restart; /metrics passes promtool and counts
// the client's packets; manifold ctl shows it all.
func TestAPIOperatorSurface(t *testing.T) {
	al := startAPILab(t)
	check, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	v4 := families[0]
	be3 := al.backends[2]
	be3v4 := be3.Addr4.String()

	exchange := func(method, path, body, auth string) *apitest.Exchange {
		t.Helper()
		req, err := http.NewRequest(method, apiBase+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		x, err := check.Do(al.api, req, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	bearer := "Bearer " + apiToken

	t.Run("conformance and auth", func(t *testing.T) {
		fileBefore, _ := os.ReadFile(al.nodes["lb1"].ConfigPath)
		steps := []struct {
			method, path, body, auth string
			want                     int
		}{
			{"GET", "/api/v1/status", "", "", 200}, // reads are open on loopback
			{"GET", "/api/v1/services", "", "", 200},
			{"GET", "/api/v1/services/web-ipv6", "", "", 200},
			{"GET", "/api/v1/config", "", "", 200},
			{"GET", "/api/v1/openapi.json", "", "", 200},
			{"GET", "/metrics", "", "", 200},
			{"GET", "/api/v1/services/nope", "", "", 404},
			{"POST", "/api/v1/services/web-ipv4/backends/" + be3v4 + "/drain", "", "", 401},
			{"POST", "/api/v1/services/web-ipv4/backends/" + be3v4 + "/drain", "", "Bearer nope", 403},
			{"DELETE", "/api/v1/services/web-ipv4", "", "", 401},
			{"PUT", "/api/v1/services/web-ipv4", `{"vip": "198.51.100.10", "port": 80, "backends": [{"address": "2001:db8::1"}]}`, bearer, 400},
			{"PUT", "/api/v1/services/other", `{"vip": "198.51.100.10", "port": 80}`, bearer, 409},
			{"POST", "/api/v1/services/web-ipv4/backends/" + be3v4 + "/weight", `{"weight": -3}`, bearer, 400},
			{"POST", "/api/v1/services/web-ipv4/backends/10.9.9.9/drain", "", bearer, 404},
			{"DELETE", "/api/v1/services/nope", "", bearer, 404},
		}
		for _, s := range steps {
			x := exchange(s.method, s.path, s.body, s.auth)
			if x.Status != s.want {
				t.Errorf("%s %s: %d, want %d\n%s", s.method, s.path, x.Status, s.want, x.Body)
			}
			if x.Status >= 400 {
				var e wire.Error
				if err := json.Unmarshal(x.Body, &e); err != nil || e.Status != x.Status || e.Message == "" {
					t.Errorf("%s %s: error body %s is not an wire.Error", s.method, s.path, x.Body)
				}
			}
		}
		if after, _ := os.ReadFile(al.nodes["lb1"].ConfigPath); string(after) != string(fileBefore) {
			t.Errorf("refused requests changed the config file")
		}
		tl := al.testLab
		tl.waitReaches(t, v4, roles(al.backends)) // and the data plane: every backend still serves
		log := al.nodes["lb1"].Log()
		if strings.Contains(log, apiToken) {
			t.Errorf("the API token appears in the daemon's log")
		}
	})

	t.Run("drain, restart, undrain", func(t *testing.T) {
		x := exchange("POST", "/api/v1/services/web-ipv4/backends/"+be3v4+"/drain", "", bearer)
		if x.Status != 200 {
			t.Fatalf("drain: %d %s", x.Status, x.Body)
		}
		al.waitAvoids(t, v4, be3.Role)
		if b := backendOf(al.service(t, "web-ipv4"), be3v4); b == nil || b.Weight != 0 || b.State != "draining" {
			t.Fatalf("after drain: %+v", b)
		}
		if _, err := al.nodes["lb1"].WaitLog(5*time.Second, func(l string) bool {
			return strings.Contains(l, "config changed through the API") && strings.Contains(l, "drained")
		}); err != nil {
			t.Errorf("the change is not logged: %v", err)
		}

		if err := al.nodes["lb1"].Stop(); err != nil {
			t.Fatal(err)
		}
		out, err := al.lb.Output(hostprog.Built(manifoldBin), "ctl", "status")
		if err == nil || !strings.Contains(out, "cannot reach the node API at http://127.0.0.1:9100") {
			t.Errorf("ctl status with the daemon stopped: %v\n%s", err, out)
		}
		al.restart(t)
		if b := backendOf(al.service(t, "web-ipv4"), be3v4); b == nil || b.Weight != 0 || b.State != "draining" {
			t.Fatalf("the drain did not survive a restart: %+v", b)
		}
		al.waitAvoids(t, v4, be3.Role)

		x = exchange("POST", "/api/v1/services/web-ipv4/backends/"+be3v4+"/undrain", "", bearer)
		if x.Status != 200 {
			t.Fatalf("undrain: %d %s", x.Status, x.Body)
		}
		al.waitReaches(t, v4, roles(al.backends))
	})

	t.Run("metrics", func(t *testing.T) {
		if err := hostprog.Check(hostprog.Promtool); err != nil {
			testenv.Missing(t, err)
		}
		before := al.counters(t, al.lb)
		fwdBefore := forwarded(t, al.lb)
		const conns = 100
		for i := range conns {
			if _, err := HTTPGet(al.client.NS, v4.url(), 0); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
		d := al.counters(t, al.lb).minus(before)
		fwd := forwarded(t, al.lb) - fwdBefore
		slack := d.clientTx/20 + 20 // ARP and the like
		if fwd > d.clientTx || fwd+slack < d.clientTx {
			t.Errorf("manifold_packets_total grew by %d; the client sent %d packets", fwd, d.clientTx)
		}
		exchange("POST", "/api/v1/services/web-ipv4/backends/"+be3v4+"/drain", "", "") // counted as a 401
		body, err := al.get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if err := metrics.Promtool(string(body)); err != nil {
			t.Error(err)
		}
		for _, want := range []string{
			`manifold_backend_weight{backend="` + be3v4 + `",service="web-ipv4"} 1`,
			`manifold_api_requests_total{code="401",method="POST"}`,
			`manifold_flow_table_size 262144`,
			`manifold_xdp_attached{interface="eth0",mode="native"} 1`,
			`manifold_drops_total{reason=`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics has no %s", want)
			}
		}
	})

	t.Run("flows", func(t *testing.T) {
		for i := range 5 {
			if _, err := HTTPGet(al.client.NS, v4.url(), 0); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
		backends := map[string]bool{}
		for _, b := range al.backends {
			backends[b.Addr4.String()] = true
		}
		x := exchange("GET", "/api/v1/flows?service=web-ipv4&limit=10000", "", "")
		var v wire.FlowsView
		if x.Status != 200 || json.Unmarshal(x.Body, &v) != nil {
			t.Fatalf("flows: %d %s", x.Status, x.Body)
		}
		if v.Total < 5 || len(v.Flows) != v.Total || v.Size != 262144 {
			t.Errorf("after 5 connections the table lists %d of %d flows (size %d)", len(v.Flows), v.Total, v.Size)
		}
		for _, f := range v.Flows {
			client, err := netip.ParseAddrPort(f.Client)
			if err != nil || client.Addr() != al.client.Addr4 || f.VIP != "198.51.100.10:80" || f.Service != "web-ipv4" ||
				f.Protocol != "tcp" || !backends[f.Backend] || f.IdleSeconds == nil || *f.IdleSeconds > 600 {
				t.Errorf("a flow of web-ipv4 listed as %+v", f)
			}
		}
		if x := exchange("GET", "/api/v1/flows?service=nope", "", ""); x.Status != 404 {
			t.Errorf("flows of an unknown service: %d %s", x.Status, x.Body)
		}
		if x := exchange("GET", "/api/v1/flows?limit=0", "", ""); x.Status != 400 {
			t.Errorf("flows with limit 0: %d %s", x.Status, x.Body)
		}
		out, err := al.lb.Output(hostprog.Built(manifoldBin), "ctl", "flows", "web-ipv4")
		if err != nil || !strings.Contains(out, al.client.Addr4.String()+":") || !strings.Contains(out, "flows shown") {
			t.Errorf("ctl flows: %v\n%s", err, out)
		}
		t.Logf("manifold ctl flows web-ipv4:\n%s", out)
	})

	t.Run("ctl", func(t *testing.T) {
		out, err := al.lb.Output(hostprog.Built(manifoldBin), "ctl", "status")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("manifold ctl status:\n%s", out)
		for _, want := range []string{"Node        lb1", "eth0 (XDP native)", "web-ipv4", "198.51.100.10:80/tcp", be3v4, "[2001:db8:100::10]:80/tcp", "Drops:"} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl status has no %q", want)
			}
		}
		if _, err := al.lb.Output(hostprog.Built(manifoldBin), "ctl", "drain", "web-ipv4", be3v4); err == nil {
			t.Error("ctl drain without MANIFOLD_API_TOKEN succeeded")
		}
		t.Setenv("MANIFOLD_API_TOKEN", apiToken)
		out, err = al.lb.Output(hostprog.Built(manifoldBin), "ctl", "weight", "web-ipv4", be3v4, "4")
		if err != nil || !strings.Contains(out, "backend "+be3v4+" is up, weight 4") {
			t.Errorf("ctl weight: %v\n%s", err, out)
		}
		out, err = al.lb.Output(hostprog.Built(manifoldBin), "ctl", "config")
		if err != nil || !strings.Contains(out, "weight: 4") || !strings.Contains(out, "in sync") {
			t.Errorf("ctl config does not show the change: %v\n%s", err, out)
		}
		for _, args := range [][]string{{"services"}, {"backends", "web-ipv4"}, {"drain", "web-ipv4", be3v4}, {"undrain", "web-ipv4", be3v4}, {"config"}, {"status"}} {
			out, err := al.lb.Output(hostprog.Built(manifoldBin), append([]string{"ctl"}, args...)...)
			if err != nil {
				t.Errorf("ctl %v: %v", args, err)
			}
			t.Logf("manifold ctl %s:\n%s", strings.Join(args, " "), out)
		}
		out, err = al.lb.Output(hostprog.Built(manifoldBin), "ctl", "backends", "web-ipv4", "-o", "json")
		var s wire.ServiceStatus
		if err != nil || json.Unmarshal([]byte(out), &s) != nil || backendOf(s, be3v4).Weight != 4 {
			t.Errorf("ctl backends -o json: %v\n%s", err, out)
		}
	})
}

// TestAPIKill9 streams API writes at a node and kills it with SIGKILL at random
// moments: after every restart the node starts, the config file is valid, and each
// change is all there or not at all — exactly the last acknowledged one, or the one in
// flight when the node died.
func TestAPIKill9(t *testing.T) {
	al := startAPILab(t)
	be1 := al.backends[0].Addr4.String()
	const rounds = 12

	type result struct{ acked, tried int }
	var weight, churn result // churn: the number of backends of service "churn"
	next := 1
	for round := range rounds {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var mu sync.Mutex
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				i := next
				next++
				weight.tried = i
				mu.Unlock()
				code, _, err := al.call("POST", "/api/v1/services/web-ipv4/backends/"+be1+"/weight", fmt.Sprintf(`{"weight": %d}`, i))
				if err != nil {
					return // the node died
				}
				if code == 200 {
					mu.Lock()
					weight.acked = i
					mu.Unlock()
				}
				k := i%5 + 1
				var bes []string
				for j := range k {
					bes = append(bes, fmt.Sprintf(`{"address": "10.0.99.%d"}`, j+1))
				}
				mu.Lock()
				churn.tried = k
				mu.Unlock()
				code, _, err = al.call("PUT", "/api/v1/services/churn", `{"vip": "198.51.100.99", "port": 8080, "backends": [`+strings.Join(bes, ", ")+`]}`)
				if err != nil {
					return
				}
				if code == 200 || code == 201 {
					mu.Lock()
					churn.acked = k
					mu.Unlock()
				}
			}
		}()
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		n := al.nodes["lb1"]
		if err := n.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		n.Wait(5 * time.Second)
		close(stop)
		wg.Wait()

		// the file is a valid config, and a restart runs it
		if _, err := config.Load(n.ConfigPath); err != nil {
			data, _ := os.ReadFile(n.ConfigPath)
			t.Fatalf("round %d: the config file is broken after kill -9: %v\n%s", round, err, data)
		}
		al.restart(t)
		w := backendOf(al.service(t, "web-ipv4"), be1)
		if w == nil || (int(w.Weight) != weight.acked && int(w.Weight) != weight.tried) {
			t.Fatalf("round %d: weight %+v after kill -9, want the last acknowledged %d or the one in flight %d", round, w, weight.acked, weight.tried)
		}
		if churn.acked > 0 {
			c := al.service(t, "churn")
			if got := len(c.Backends); got != churn.acked && got != churn.tried {
				t.Fatalf("round %d: service churn has %d backends, want the last acknowledged %d or the one in flight %d", round, got, churn.acked, churn.tried)
			}
		}
		t.Logf("round %d: writes up to %d, weight %d (acked %d), churn backends acked %d", round, weight.tried, w.Weight, weight.acked, churn.acked)
		// what the node runs now is the base of the next round
		weight.acked = int(w.Weight)
		if code, body, err := al.call("GET", "/api/v1/services/churn", ""); err == nil && code == 200 {
			var c wire.ServiceStatus
			if err := json.Unmarshal(body, &c); err != nil {
				t.Fatal(err)
			}
			churn.acked = len(c.Backends)
		}
	}
	if weight.tried < rounds*2 {
		t.Errorf("only %d writes in %d rounds: the test did not exercise much", weight.tried, rounds)
	}
	// the node still forwards after all that, to every backend once be1's weight is
	// back to theirs (at hundreds to one, as fast writes leave it, the others' share
	// of the ring is too small for a client to find in a few connections)
	if code, body, err := al.call("POST", "/api/v1/services/web-ipv4/backends/"+be1+"/weight", `{"weight": 1}`); err != nil || code != 200 {
		t.Fatalf("be1's weight back to 1: %d %s %v", code, body, err)
	}
	al.waitReaches(t, families[0], roles(al.backends))
}
