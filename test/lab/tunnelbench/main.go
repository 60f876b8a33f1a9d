// Command tunnelbench measures reverse tunnels on loopback: manifold's (an edge and
// `manifold connect`), rathole's and bore's, side by side in the same rounds (as
// root or not, after `make build` and `make bench-deps`):
//
//	go run ./test/lab/tunnelbench -connect bin/manifold-connect -json bench/results/parts/tunnel.json
//
// Each tool carries two services from its public port to an origin on loopback: an
// iperf3 server (one TCP stream's throughput) and a small HTTP server (latency at a
// fixed, open-loop offered rate of 1000 and 4000 requests/s: see openLoop; and new
// connections per second, one request each: conns.go). Every round measures every
// tool once; figures are min/median/max over the rounds, and manifold's are compared
// with rathole's run by run. After the rounds, once, each tool started again: the
// memory of 1000 idle client connections and of 10 idle tunnels (conns.go). Targets are printed, never asserted.
// Each latency run also prints the CPU time the tool's processes spent per request.
// TUNNELBENCH_KEEP=1 keeps the tools' logs; TUNNELBENCH_TIMELINE=file appends every
// request of the latency runs to file (openloop.go).
//
// The tools as configured: manifold, QUIC with TLS 1.3; manifold (TCP), its TLS 1.3
// over TCP transport (the streams multiplexed over one connection); rathole,
// its default TCP transport without encryption (as in its own published benchmark,
// and the reference); rathole again with its Noise transport (encrypted, as
// manifold is: the like-for-like reference, without a target); bore, plain TCP (it has
// no encryption).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/bench"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/tunnel"
	"github.com/manifoldlb/manifold/test/lab"
)

const section = "tunnel"

// Loopback ports: the origins', and each tool's public ports for them.
const (
	originHTTP  = 18000
	originIperf = 15201
	token       = "tunnelbench-token-0123456789abcdef"
)

type tool struct {
	name      string
	http      int // public port of the HTTP service
	iperf     int // public port of the iperf3 service
	processes []*exec.Cmd
	// broken says why the tool stopped serving; it is not measured after that
	broken string
	// idleTunnel starts the i-th client of one more idle tunnel (its log file's path
	// returned), which says tunnelUp in its log once its tunnel is up; nil: not measured
	idleTunnel func(dir string, i int) (*exec.Cmd, string, error)
	tunnelUp   string
}

// rates are the open-loop request rates of the latency runs (-rates).
var rates []int

// edgeEnv makes this binary the manifold edge of the benchmark (a process of its own,
// as rathole's and bore's servers are); its value is the edge's config, JSON.
const edgeEnv = "TUNNELBENCH_EDGE"

type edgeConfig struct {
	Listen, Cert, Key, Tokens string
	Services                  map[string]string // name → public listen address
}

func main() {
	if cfg := os.Getenv(edgeEnv); cfg != "" {
		if err := runEdge(cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	manifold := flag.String("connect", "bin/manifold-connect", "the connector's binary, as origins run it (make build)")
	jsonPath := flag.String("json", "", "also write the results to this file (a bench.Part)")
	rounds := flag.Int("rounds", 3, "rounds; each measures every tool once")
	duration := flag.Duration("duration", 5*time.Second, "length of one measurement, whole seconds")
	only := flag.String("tools", "", "comma-separated tools to measure, by their names in the table (default: all)")
	rateList := flag.String("rates", "1000,4000", "comma-separated request rates of the latency runs, per second; the last carries the p99 target")
	flag.Parse()
	rates = nil
	for _, r := range strings.Split(*rateList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "-rates %q: positive whole numbers\n", *rateList)
			os.Exit(2)
		}
		rates = append(rates, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *manifold, *jsonPath, *rounds, *duration, *only); err != nil {
		fmt.Fprintf(os.Stderr, "\ntunnelbench failed: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, manifold, jsonPath string, rounds int, d time.Duration, only string) error {
	if d < time.Second || d%time.Second != 0 || rounds < 1 {
		return fmt.Errorf("-duration %s -rounds %d: whole seconds, at least one round", d, rounds)
	}
	abs, err := filepath.Abs(manifold)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tunnelbench-")
	if err != nil {
		return err
	}
	if os.Getenv("TUNNELBENCH_KEEP") != "" { // the tools' logs, to see why one broke
		fmt.Println("logs in", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	origin, err := startOrigins(dir)
	if err != nil {
		return err
	}
	defer origin()
	tools := []*tool{{name: "manifold", http: 21080, iperf: 21201}, {name: manifoldTCP, http: 25080, iperf: 25201},
		{name: "rathole", http: 22080, iperf: 22201}, {name: ratholeNoise, http: 24080, iperf: 24201}, {name: "bore", http: 23080, iperf: 23201}}
	starts := map[string]func(string, *tool) error{"manifold": startManifold(abs, tunnel.TransportQUIC, 21443),
		manifoldTCP: startManifold(abs, tunnel.TransportTCP, 25443), "rathole": startRathole, ratholeNoise: startRatholeNoise, "bore": startBore}
	if only != "" {
		var chosen []*tool
		for _, name := range strings.Split(only, ",") {
			name = strings.TrimSpace(name)
			i := slices.IndexFunc(tools, func(t *tool) bool { return t.name == name })
			if i < 0 {
				known := make([]string, len(tools))
				for j, t := range tools {
					known[j] = strconv.Quote(t.name)
				}
				return fmt.Errorf("-tools: no tool %q (the tools: %s)", name, strings.Join(known, ", "))
			}
			chosen = append(chosen, tools[i])
		}
		tools = chosen
	}
	// the programs of the tools chosen
	needs := map[string]hostprog.Program{"manifold": hostprog.Built(abs), manifoldTCP: hostprog.Built(abs), "rathole": hostprog.Rathole,
		ratholeNoise: hostprog.Rathole, "bore": hostprog.Bore}
	programs := []hostprog.Program{hostprog.Iperf3}
	for _, t := range tools {
		programs = append(programs, needs[t.name])
	}
	if err := hostprog.Check(programs...); err != nil {
		return err
	}
	defer func() {
		for _, t := range tools {
			stopTool(t)
		}
	}()
	for _, t := range tools {
		if err := starts[t.name](dir, t); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if err := waitServing(t, 20*time.Second); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	fmt.Printf("Tunnels benchmark on loopback: iperf3 1 stream for %s; HTTP open-loop at %v req/s for %s each; %d rounds\n", d, rates, d, rounds)

	loadBefore := loadAverage()
	results := map[string]map[string][]float64{} // tool → metric → runs
	notes := map[string][]string{}
	for round := 1; round <= rounds; round++ {
		for _, t := range tools {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if results[t.name] == nil {
				results[t.name] = map[string][]float64{}
			}
			if t.broken != "" {
				continue
			}
			gbps, err := iperf(ctx, t.iperf, d)
			if err != nil {
				t.broken = fmt.Sprintf("round %d: %v: not measured from then on", round, err)
				notes[t.name] = append(notes[t.name], t.broken)
				fmt.Printf("round %d %-8s broken: %v\n", round, t.name, err)
				continue
			}
			results[t.name][metricGbps] = append(results[t.name][metricGbps], gbps)
			line := fmt.Sprintf("round %d %-8s %6.2f Gbit/s", round, t.name, gbps)
			for _, rate := range rates {
				url := "http://127.0.0.1:" + strconv.Itoa(t.http) + "/"
				client := newOpenLoopClient()
				openLoop(ctx, client, url, rate, time.Second) // warm-up: connections open, unrecorded
				cpu := cpuTime(t)
				r := openLoop(ctx, client, url, rate, d)
				cpu = cpuTime(t) - cpu
				client.CloseIdleConnections()
				results[t.name][p50(rate)] = append(results[t.name][p50(rate)], r.P50Ms)
				results[t.name][p99(rate)] = append(results[t.name][p99(rate)], r.P99Ms)
				if r.Failed > 0 {
					notes[t.name] = append(notes[t.name], fmt.Sprintf("round %d at %d req/s: %d of %d requests failed", round, rate, r.Failed, r.Sent))
				}
				line += fmt.Sprintf("  %d/s p50 %.2f p99 %.2f ms (%d failed, %.0f µs CPU each)", rate, r.P50Ms, r.P99Ms, r.Failed,
					float64(cpu/time.Microsecond)/float64(r.Sent))
			}
			conns, failed := connsPerSecond(ctx, t.http, d)
			results[t.name][metricConns] = append(results[t.name][metricConns], conns)
			if failed > 0 {
				notes[t.name] = append(notes[t.name], fmt.Sprintf("round %d: %d new connections failed", round, failed))
			}
			line += fmt.Sprintf("  %.0f new conns/s (%d failed)", conns, failed)
			fmt.Println(line)
		}
	}
	// memory last, of each tool started again: memory freed in the rounds would hide
	// the growth, and a tool left with 1000 idle connections may not serve the rounds
	// as before (rathole's Noise transport did not)
	for _, t := range tools {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stopTool(t)
		t.broken = ""
		if err := starts[t.name](dir, t); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if err := waitServing(t, 20*time.Second); err != nil {
			return fmt.Errorf("%s started again: %w", t.name, err)
		}
		kib, err := idleConnMemory(t, idleConns)
		if err != nil {
			notes[t.name] = append(notes[t.name], fmt.Sprintf("idle connections: %v", err))
		} else {
			results[t.name][metricIdleConnKiB] = []float64{kib}
		}
		line := fmt.Sprintf("%-15s %d idle client connections: %.1f KiB each", t.name, idleConns, kib)
		if t.idleTunnel != nil {
			server, client, err := idleTunnelMemory(dir, t, idleTunnels)
			if err != nil {
				notes[t.name] = append(notes[t.name], fmt.Sprintf("idle tunnels: %v", err))
			} else {
				results[t.name][metricTunnelEdgeKiB] = []float64{server}
				results[t.name][metricTunnelConnKiB] = []float64{client}
			}
			line += fmt.Sprintf("; %d idle tunnels: %.0f KiB each at the server, %.0f KiB per client process", idleTunnels, server, client)
		}
		fmt.Println(line)
	}
	part := bench.Part{Name: "tunnel", Method: fmt.Sprintf("Loopback, one machine, every tool in the same %d rounds: iperf3 -c 127.0.0.1 -t %d "+
		"through each tunnel (one TCP stream); HTTP GET of a 13-byte answer at a fixed open-loop rate (latency counted from each request's "+
		"due time, a failed request counted as the client's 5 s timeout; keep-alive connections, 1 s unrecorded warm-up); new connections/s: "+
		"16 workers opening a connection per request, back to back. Once after the rounds, each tool started again: resident memory (VmRSS) growth of the tool's processes "+
		"per idle client connection (1000, one request each), and per idle tunnel (10 more clients) at the server, with a client process's own. "+
		"manifold: QUIC + TLS 1.3; manifold (TCP): TLS 1.3 over TCP, streams multiplexed; rathole: TCP, no encryption; "+
		"rathole (Noise): TCP with its Noise transport (Noise_NK_25519_ChaChaPoly_BLAKE2s); bore: TCP.",
		rounds, int(d.Seconds())) + fmt.Sprintf(" Machine load average (1 min) %s before, %s after: the cores are shared.", loadBefore, loadAverage()),
		Figures: figures(tools, results, notes)}
	printTable(part)
	if jsonPath != "" {
		return bench.WritePart(jsonPath, part)
	}
	return nil
}

const metricGbps = "Gbit/s"

func p50(rate int) string { return fmt.Sprintf("p50 ms at %d req/s", rate) }
func p99(rate int) string { return fmt.Sprintf("p99 ms at %d req/s", rate) }

func metrics() []string {
	out := []string{metricGbps}
	for _, r := range rates {
		out = append(out, p50(r), p99(r))
	}
	return append(out, metricConns, metricIdleConnKiB, metricTunnelEdgeKiB, metricTunnelConnKiB)
}

// figures are every tool's figures, compared with rathole's run by run; manifold's
// throughput and p99 at the top rate carry the targets.
func figures(tools []*tool, results map[string]map[string][]float64, notes map[string][]string) []bench.Figure {
	var figs []bench.Figure
	for _, t := range tools {
		for _, m := range metrics() {
			if results[t.name][m] == nil && (m == metricTunnelEdgeKiB || m == metricTunnelConnKiB) {
				continue // not measured for this tool
			}
			f := bench.NewFigure(section, t.name, m, results[t.name][m])
			f.Note = strings.Join(notes[t.name], "; ")
			figs = append(figs, f)
		}
	}
	all := bench.Part{Figures: append([]bench.Figure(nil), figs...)}
	for i := range figs {
		f := &figs[i]
		if f.Name == "rathole" {
			continue
		}
		ref, ok := all.Find(section, "rathole", f.Metric)
		if !ok {
			continue
		}
		ours := f.Name == "manifold" || f.Name == manifoldTCP
		switch {
		case ours && (f.Metric == metricGbps || f.Metric == metricConns):
			f.Compare(ref, ">=", 1)
		case ours && f.Metric == p99(rates[len(rates)-1]):
			f.Compare(ref, "<=", 1)
		default:
			f.Compare(ref, "", 0)
		}
		if ours {
			// encrypted against encrypted: the TCP transport's throughput has a target
			// (1.5×), the rest are ratios to read
			if noise, ok := all.Find(section, ratholeNoise, f.Metric); ok {
				if f.Name == manifoldTCP && f.Metric == metricGbps {
					f.Compare(noise, ">=", 1.5)
				} else {
					f.Compare(noise, "", 0)
				}
			}
		}
	}
	return figs
}

// ratholeNoise names rathole run with its Noise transport; manifoldTCP, manifold with
// its TCP transport (TLS 1.3 over TCP).
const (
	ratholeNoise = "rathole (Noise)"
	manifoldTCP  = "manifold (TCP)"
)

// startRatholeNoise runs rathole as startRathole does, over its Noise transport with a
// key pair made for the run by `rathole --genkey`.
func startRatholeNoise(dir string, t *tool) error {
	out, err := hostprog.Command(hostprog.Rathole, "--genkey").Output()
	if err != nil {
		return fmt.Errorf("rathole --genkey: %w", err)
	}
	// "Private Key:\n<key>\n\nPublic Key:\n<key>\n"
	var keys []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasSuffix(line, ":") {
			keys = append(keys, line)
		}
	}
	if len(keys) != 2 {
		return fmt.Errorf("rathole --genkey: want a private and a public key, got %q", out)
	}
	server := fmt.Sprintf("[server]\nbind_addr = %q\n[server.transport]\ntype = \"noise\"\n[server.transport.noise]\nlocal_private_key = %q\n"+
		"[server.services.web]\ntoken = %q\nbind_addr = %q\n[server.services.iperf]\ntoken = %q\nbind_addr = %q\n",
		loop(24333), keys[0], token, loop(t.http), token, loop(t.iperf)) + ratholeIdleServices(24400)
	clientHead := fmt.Sprintf("[client]\nremote_addr = %q\n[client.transport]\ntype = \"noise\"\n[client.transport.noise]\nremote_public_key = %q\n",
		loop(24333), keys[1])
	client := clientHead + fmt.Sprintf("[client.services.web]\ntoken = %q\nlocal_addr = %q\n[client.services.iperf]\ntoken = %q\nlocal_addr = %q\n",
		token, loop(originHTTP), token, loop(originIperf))
	ratholeIdleTunnel(t, "rathole-noise", clientHead)
	return startRatholeSides(dir, "rathole-noise", server, client, t)
}

func printTable(p bench.Part) {
	fmt.Println()
	for _, f := range p.Figures {
		line := fmt.Sprintf("%-9s %-22s median %8.2f (min %.2f, max %.2f)", f.Name, f.Metric, f.Value.Median, f.Value.Min, f.Value.Max)
		for _, c := range f.Compared {
			line += fmt.Sprintf("  ×%.2f of %s %s", c.Ratio.Median, c.Reference, c.TargetText())
		}
		fmt.Println(line)
	}
}

// startOrigins runs iperf3's server and the HTTP origin; the returned func stops them.
func startOrigins(dir string) (func(), error) {
	iperfd := hostprog.Command(hostprog.Iperf3, "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(originIperf))
	if err := startLogged(dir, "iperf3-server", iperfd); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(originHTTP))
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hello, world\n"))
	})}
	go srv.Serve(ln)
	return func() {
		srv.Close()
		_ = iperfd.Process.Signal(syscall.SIGTERM)
		_ = iperfd.Wait()
	}, nil
}

// stopTool ends the tool's processes.
func stopTool(t *tool) {
	for _, p := range t.processes {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
	}
	t.processes = nil
}

func startLogged(dir, name string, cmd *exec.Cmd) error {
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Start()
}

// startManifold runs an edge on loopback port edgePort and a connector of transport.
func startManifold(manifold, transport string, edgePort int) func(string, *tool) error {
	return func(dir string, t *tool) error {
		dir = filepath.Join(dir, "manifold-"+transport)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		ca, cert, key, err := lab.TunnelPKI(dir, netip.MustParseAddr("127.0.0.1"))
		if err != nil {
			return err
		}
		tokens := filepath.Join(dir, "tokens.yaml")
		if err := os.WriteFile(tokens, []byte(fmt.Sprintf("- {token: %q, services: [web, iperf, idle]}\n", token)), 0o600); err != nil {
			return err
		}
		cfg, _ := json.Marshal(edgeConfig{Listen: loop(edgePort), Cert: cert, Key: key, Tokens: tokens,
			Services: map[string]string{"web": loop(t.http), "iperf": loop(t.iperf)}})
		self, err := os.Executable()
		if err != nil {
			return err
		}
		edge := hostprog.Command(hostprog.Built(self))
		edge.Env = append(os.Environ(), edgeEnv+"="+string(cfg))
		if err := startLogged(dir, "manifold-edge", edge); err != nil {
			return err
		}
		t.processes = append(t.processes, edge)
		tokenFile := filepath.Join(dir, "token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			return err
		}
		// name, and the services of the connector's file
		connector := func(name, services string) (*exec.Cmd, string, error) {
			connect := filepath.Join(dir, name+".yaml")
			err := os.WriteFile(connect, []byte(fmt.Sprintf("name: %s\nedges: [%s]\ntoken_file: %s\nca_file: %s\ntransport: %s\nservices:\n%s",
				name, loop(edgePort), tokenFile, ca, transport, services)), 0o644)
			if err != nil {
				return nil, "", err
			}
			c := hostprog.Command(hostprog.Built(manifold), "--config", connect)
			return c, filepath.Join(dir, name+".log"), startLogged(dir, name, c)
		}
		c, _, err := connector("bench", fmt.Sprintf("  - {name: web, to: %s, capacity: 10000}\n  - {name: iperf, to: %s, capacity: 100}\n",
			loop(originHTTP), loop(originIperf)))
		if err != nil {
			return err
		}
		t.processes = append(t.processes, c)
		t.tunnelUp = "tunnel up"
		t.idleTunnel = func(_ string, i int) (*exec.Cmd, string, error) {
			return connector(fmt.Sprintf("idle%d", i), fmt.Sprintf("  - {name: idle, to: %s, capacity: 1}\n", loop(originHTTP)))
		}
		return nil
	}
}

// runEdge is the manifold edge's process: tunnel.Edge as `manifold run` runs it, with
// its services on loopback ports (a node's need XDP and a VIP, which the other tools'
// servers do not).
func runEdge(raw string) error {
	var cfg edgeConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := tunnel.NewEdge(tunnel.EdgeConfig{Listen: cfg.Listen, CertFile: cfg.Cert, KeyFile: cfg.Key, TokensFile: cfg.Tokens, Log: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errs := make(chan error, len(cfg.Services)+1)
	go func() { errs <- e.Run(ctx) }()
	for name, addr := range cfg.Services {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		go func() { errs <- e.Serve(ctx, name, ln) }()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

func startRathole(dir string, t *tool) error {
	server := fmt.Sprintf("[server]\nbind_addr = %q\n[server.services.web]\ntoken = %q\nbind_addr = %q\n[server.services.iperf]\ntoken = %q\nbind_addr = %q\n",
		loop(22333), token, loop(t.http), token, loop(t.iperf)) + ratholeIdleServices(22400)
	clientHead := fmt.Sprintf("[client]\nremote_addr = %q\n", loop(22333))
	client := clientHead + fmt.Sprintf("[client.services.web]\ntoken = %q\nlocal_addr = %q\n[client.services.iperf]\ntoken = %q\nlocal_addr = %q\n",
		token, loop(originHTTP), token, loop(originIperf))
	ratholeIdleTunnel(t, "rathole", clientHead)
	return startRatholeSides(dir, "rathole", server, client, t)
}

// ratholeIdleServices are the server's services idle0… for the idle tunnels, on
// loopback ports from base: rathole serves a service for one client at a time.
func ratholeIdleServices(base int) string {
	var b strings.Builder
	for i := range idleTunnels {
		fmt.Fprintf(&b, "[server.services.idle%d]\ntoken = %q\nbind_addr = %q\n", i, token, loop(base+i))
	}
	return b.String()
}

// ratholeIdleTunnel makes t start idle tunnels as rathole clients of clientHead's
// server, one service each.
func ratholeIdleTunnel(t *tool, name, clientHead string) {
	t.tunnelUp = "Control channel established"
	t.idleTunnel = func(dir string, i int) (*exec.Cmd, string, error) {
		side := fmt.Sprintf("%s-idle%d", name, i)
		path := filepath.Join(dir, side+".toml")
		conf := clientHead + fmt.Sprintf("[client.services.idle%d]\ntoken = %q\nlocal_addr = %q\n", i, token, loop(originHTTP))
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, "", err
		}
		c := hostprog.Command(hostprog.Rathole, "--client", path)
		return c, filepath.Join(dir, side+".log"), startLogged(dir, side, c)
	}
}

// startRatholeSides writes rathole's server and client files (name-server.toml,
// name-client.toml) and runs both.
func startRatholeSides(dir, name, server, client string, t *tool) error {
	for _, side := range []struct{ name, conf, flag string }{{"server", server, "--server"}, {"client", client, "--client"}} {
		path := filepath.Join(dir, name+"-"+side.name+".toml")
		if err := os.WriteFile(path, []byte(side.conf), 0o600); err != nil {
			return err
		}
		c := hostprog.Command(hostprog.Rathole, side.flag, path)
		if err := startLogged(dir, name+"-"+side.name, c); err != nil {
			return err
		}
		t.processes = append(t.processes, c)
	}
	return nil
}

func startBore(dir string, t *tool) error {
	server := hostprog.Command(hostprog.Bore, "server", "--bind-addr", "127.0.0.1", "--secret", token)
	if err := startLogged(dir, "bore-server", server); err != nil {
		return err
	}
	t.processes = append(t.processes, server)
	if err := waitPort(7835, 10*time.Second); err != nil {
		return err
	}
	for _, svc := range []struct {
		name          string
		local, remote int
	}{{"web", originHTTP, t.http}, {"iperf", originIperf, t.iperf}} {
		c := hostprog.Command(hostprog.Bore, "local", strconv.Itoa(svc.local), "--local-host", "127.0.0.1", "--to", "127.0.0.1",
			"--port", strconv.Itoa(svc.remote), "--secret", token)
		if err := startLogged(dir, "bore-"+svc.name, c); err != nil {
			return err
		}
		t.processes = append(t.processes, c)
	}
	return nil
}

// waitServing waits until an HTTP GET through the tool's tunnel is answered.
func waitServing(t *tool, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	return lab.Eventually(timeout, 50*time.Millisecond, func() error {
		resp, err := client.Get("http://" + loop(t.http) + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

func waitPort(port int, timeout time.Duration) error {
	return lab.Eventually(timeout, 20*time.Millisecond, func() error {
		c, err := net.Dial("tcp", loop(port))
		if err == nil {
			c.Close()
		}
		return err
	})
}

// iperf runs one iperf3 stream through the port and returns the receiver's Gbit/s.
func iperf(ctx context.Context, port int, d time.Duration) (float64, error) {
	out, err := hostprog.CommandContext(ctx, hostprog.Iperf3, "-c", "127.0.0.1", "-p", strconv.Itoa(port), "-t", strconv.Itoa(int(d.Seconds())), "-J").Output()
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if jerr := json.Unmarshal(out, &r); jerr != nil || r.Error != "" || err != nil {
		return 0, fmt.Errorf("iperf3 through port %d: %v %s %v", port, err, r.Error, jerr)
	}
	return r.End.SumReceived.BitsPerSecond / 1e9, nil
}

func loop(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// loadAverage is the machine's 1-minute load average, for the reader of the figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

// cpuTime is the CPU time t's processes have used (Linux: /proc), the tool's own cost
// of a run however loaded the machine; 0 for a process that cannot be read.
func cpuTime(t *tool) time.Duration {
	var total time.Duration
	for _, p := range t.processes {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Process.Pid))
		if err != nil {
			continue
		}
		// after the command's name in parentheses: utime and stime are fields 14 and 15
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		user, _ := strconv.ParseInt(f[11], 10, 64)
		sys, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(user+sys) * time.Second / clockTicks
	}
	return total
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100
