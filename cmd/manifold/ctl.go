package main

// manifold ctl: the operator CLI, a client of the node's REST API (internal/api).
// Tables for people by default, the API's JSON as is with -o json.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

const defaultAPI = "http://127.0.0.1:9100"

// ctlCommand is one row of ctl's table: its usage line, its argument count and its
// completion come from here.
type ctlCommand struct {
	name, args, summary string
	nargs               int
	optional            int // of which the last this many may be left out
}

var ctlCommands = []ctlCommand{
	{"status", "", "the node: interfaces, BGP, services and backends, flow table, drops", 0, 0},
	{"services", "", "every service, one line each", 0, 0},
	{"backends", "SERVICE", "the backends of a service: state, health, weight, traffic", 1, 0},
	{"drain", "SERVICE ADDRESS", "weight 0: the backend keeps its flows, gets no new ones", 2, 0},
	{"undrain", "SERVICE ADDRESS", "back to the weight it had before the drain", 2, 0},
	{"weight", "SERVICE ADDRESS WEIGHT", "set a backend's weight (0..65535)", 3, 0},
	{"config", "", "the config the node runs (secrets redacted)", 0, 0},
	{"fleet", "", "every node of the fleet: alive, applied revision, lag, agreement", 0, 0},
	{"steering", "", "global steering: per service, site and origin the share, target, load, RTT and why", 0, 0},
	{"tunnels", "", "the tunnel edge: services, connectors, streams, bytes, RTT, capacity in use, refusals", 0, 0},
	{"flows", "[SERVICE]", "the flow table: each flow's client, VIP, backend and idle time (the first 100)", 1, 1},
	{"link", "", "a site-to-site link (manifold link): its tunnels, state, traffic, handshakes, probe RTT", 0, 0},
}

var ctlUsage = func() string {
	var b strings.Builder
	b.WriteString("usage: manifold ctl [--api URL] [--ca-file FILE] [-o table|json] COMMAND\n")
	for _, c := range ctlCommands {
		fmt.Fprintf(&b, "  %-32s%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	b.WriteString("--api defaults to $MANIFOLD_API, else " + defaultAPI + " (for link: " + defaultLinkAPI + "); the API token,\nwhen the node has one, is read from $MANIFOLD_API_TOKEN. An https:// API's certificate is checked against\n--ca-file (PEM) when given, else against the system's CAs.")
	return b.String()
}()

// ctlWords completes after `manifold ctl`: its commands and flags.
func ctlWords() []string {
	words := []string{"--api", "--ca-file", "-o"}
	for _, c := range ctlCommands {
		words = append(words, c.name)
	}
	return words
}

// ctlClient talks to one node's API.
type ctlClient struct {
	base   string
	token  string
	http   *http.Client
	daemon string    // what serves the API, for the message when it cannot be reached
	warn   io.Writer // where the API's warnings go (a change made, with a problem)
}

func ctl(args []string, w, warn io.Writer) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	apiURL := fs.String("api", "", "node API base URL (env MANIFOLD_API)")
	caFile := fs.String("ca-file", "", "the CA (PEM) that signed an https:// API's certificate")
	output := fs.String("o", "table", "output: table | json")
	// flags may come before or after the command and its arguments
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("%v\n%s", err, ctlUsage)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o %s: accepted: table, json", *output)
	}
	if len(pos) == 0 {
		return errors.New(ctlUsage)
	}
	cmd, params := pos[0], pos[1:]
	if *apiURL == "" {
		*apiURL = envOr("MANIFOLD_API", defaultAPI)
		if cmd == "link" {
			*apiURL = envOr("MANIFOLD_API", defaultLinkAPI)
		}
	}
	client, err := ctlHTTP(*apiURL, *caFile)
	if err != nil {
		return err
	}
	c := &ctlClient{base: strings.TrimRight(*apiURL, "/"), token: os.Getenv("MANIFOLD_API_TOKEN"), http: client,
		daemon: "manifold run", warn: warn}
	if cmd == "link" {
		c.daemon = "manifold link"
	}
	n, optional := -1, 0
	for _, c := range ctlCommands {
		if c.name == cmd {
			n, optional = c.nargs, c.optional
		}
	}
	if n < 0 {
		return fmt.Errorf("unknown command %q\n%s", cmd, ctlUsage)
	}
	if len(params) > n || len(params) < n-optional {
		return fmt.Errorf("%s takes %d argument(s), got %d\n%s", cmd, n, len(params), ctlUsage)
	}
	svcPath := func(name string) string { return "/api/v1/services/" + url.PathEscape(name) }

	var raw []byte
	switch cmd {
	case "status":
		raw, err = c.call("GET", "/api/v1/status", nil)
	case "services":
		raw, err = c.call("GET", "/api/v1/services", nil)
	case "backends":
		raw, err = c.call("GET", svcPath(params[0]), nil)
	case "config":
		raw, err = c.call("GET", "/api/v1/config", nil)
	case "fleet":
		raw, err = c.call("GET", "/api/v1/fleet", nil)
	case "steering":
		raw, err = c.call("GET", "/api/v1/steering", nil)
	case "link":
		raw, err = c.call("GET", wire.LinkPath, nil)
	case "tunnels":
		raw, err = c.call("GET", "/api/v1/tunnels", nil)
	case "flows":
		path := "/api/v1/flows"
		if len(params) == 1 {
			path += "?service=" + url.QueryEscape(params[0])
		}
		raw, err = c.call("GET", path, nil)
	case "drain", "undrain":
		raw, err = c.call("POST", svcPath(params[0])+"/backends/"+url.PathEscape(params[1])+"/"+cmd, nil)
	case "weight":
		wt, perr := strconv.ParseUint(params[2], 10, 32)
		if perr != nil {
			return fmt.Errorf("weight %q: must be a whole number 0..65535", params[2])
		}
		body, _ := json.Marshal(wire.WeightRequest{Weight: uint32(wt)})
		raw, err = c.call("POST", svcPath(params[0])+"/backends/"+url.PathEscape(params[1])+"/weight", body)
	}
	if err != nil {
		return err
	}
	if *output == "json" {
		_, err := w.Write(raw)
		return err
	}

	switch cmd {
	case "status":
		var st wire.Status
		if err := json.Unmarshal(raw, &st); err != nil {
			return badAnswer(err)
		}
		printStatus(w, &st)
	case "services":
		var ss []wire.ServiceStatus
		if err := json.Unmarshal(raw, &ss); err != nil {
			return badAnswer(err)
		}
		printServices(w, ss)
	case "backends":
		var s wire.ServiceStatus
		if err := json.Unmarshal(raw, &s); err != nil {
			return badAnswer(err)
		}
		printBackends(w, &s)
	case "config":
		var cv wire.ConfigView
		if err := json.Unmarshal(raw, &cv); err != nil {
			return badAnswer(err)
		}
		printConfig(w, &cv)
	case "fleet":
		var f wire.FleetStatus
		if err := json.Unmarshal(raw, &f); err != nil {
			return badAnswer(err)
		}
		printFleet(w, &f)
	case "steering":
		var st wire.SteeringStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			return badAnswer(err)
		}
		printSteering(w, &st)
	case "link":
		var st wire.LinkStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			return badAnswer(err)
		}
		printLink(w, &st)
	case "tunnels":
		var st wire.TunnelsStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			return badAnswer(err)
		}
		printTunnels(w, &st)
	case "flows":
		var v wire.FlowsView
		if err := json.Unmarshal(raw, &v); err != nil {
			return badAnswer(err)
		}
		printFlows(w, &v)
	default: // drain, undrain, weight: the service as it is now
		var s wire.ServiceStatus
		if err := json.Unmarshal(raw, &s); err != nil {
			return badAnswer(err)
		}
		return printBackendChange(w, &s, params[1])
	}
	return nil
}

// ctlHTTP is ctl's HTTP client: one that checks an https:// API's certificate against
// caFile when given (the system's CAs otherwise).
func ctlHTTP(apiURL, caFile string) (*http.Client, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	if caFile == "" {
		return client, nil
	}
	if !strings.HasPrefix(apiURL, "https://") {
		return nil, fmt.Errorf("--ca-file checks the certificate of an https:// API; --api %s is not one", apiURL)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	client.Transport = t
	return client, nil
}

func badAnswer(err error) error {
	return fmt.Errorf("the node's answer is not what this manifold expects (another version?): %w", err)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// call sends one request and returns the body of a 2xx answer; any other answer
// becomes an error that says what the API said.
func (c *ctlClient) call(method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("--api %s: %w", c.base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	var unknownCA x509.UnknownAuthorityError
	switch {
	case errors.As(err, &unknownCA):
		return nil, fmt.Errorf("the node API at %s has a certificate this host does not trust (--ca-file names the CA that signed it): %w", c.base, err)
	case err != nil:
		return nil, fmt.Errorf("cannot reach the node API at %s (is `%s` running there? --api or MANIFOLD_API name another node): %w", c.base, c.daemon, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		for _, h := range resp.Header.Values("Warning") {
			if text := wire.WarningText(h); text != "" {
				fmt.Fprintf(c.warn, "warning: %s\n", text)
			}
		}
		return raw, nil
	}
	var e wire.Error
	if json.Unmarshal(raw, &e) != nil || e.Message == "" {
		return nil, fmt.Errorf("%s %s: %s: %s", method, c.base+path, resp.Status, strings.TrimSpace(string(raw)))
	}
	if len(e.Problems) == 0 {
		e.Problems = []wire.Problem{{Field: e.Field, Message: e.Message}}
	}
	var lines []string
	for _, p := range e.Problems {
		if p.Field != "" {
			lines = append(lines, p.Field+": "+p.Message)
		} else {
			lines = append(lines, p.Message)
		}
	}
	msg := strings.Join(lines, "\n")
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		msg += " (set MANIFOLD_API_TOKEN)"
	case http.StatusForbidden:
		msg += " (check MANIFOLD_API_TOKEN)"
	}
	return nil, fmt.Errorf("%s (%d)", msg, resp.StatusCode)
}
