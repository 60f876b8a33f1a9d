package tunnel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTokens(t *testing.T) {
	tokens, err := ParseTokens("tokens.yaml", []byte(tokensFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 3 || tokens[1].Fingerprint() != fingerprint(tokenBoth) ||
		strings.Join(tokens[1].Services, ",") != "web,api" || tokens[1].Origins != nil ||
		strings.Join(tokens[2].Origins, ",") != "home,office" {
		t.Fatalf("tokens %+v", tokens)
	}

	for _, tc := range []struct{ name, file, want string }{
		{"empty", "", "tokens.yaml: the file is empty"},
		{"not a list", "token: x", "tokens.yaml:1: must be a list"},
		{"no entry", "[]", "tokens.yaml:1: the file lists no token"},
		{"short", `- {token: "abc", services: [web]}`, "tokens.yaml:1: [0].token: too short: at least 16 characters"},
		{"whitespace", `- {token: "0123456789abcdef 01", services: [web]}`, "[0].token: must not contain whitespace"},
		{"missing token", `- {services: [web]}`, "tokens.yaml:1: [0].token: required"},
		{"missing services", "- {token: " + tokenWeb + "}", "[0].services: required"},
		{"no service", "- {token: " + tokenWeb + ", services: []}", "[0].services: must list at least one service"},
		{"bad service", "- {token: " + tokenWeb + ", services: [we/b]}", `[0].services[0]: "we/b" is not a service name`},
		{"service twice", "- {token: " + tokenWeb + ", services: [web, web]}", "[0].services[1]: web is listed twice"},
		{"unknown field", "- {token: " + tokenWeb + ", services: [web], scope: all}", "[0].scope: unknown field (known: token, services, origins)"},
		{"no origin", "- {token: " + tokenWeb + ", services: [web], origins: []}", "[0].origins: must list at least one origin"},
		{"bad origin", "- {token: " + tokenWeb + ", services: [web], origins: [a b]}", `[0].origins[0]: "a b" is not an origin name`},
		{"origin twice", "- {token: " + tokenWeb + ", services: [web], origins: [home, home]}", "[0].origins[1]: home is listed twice"},
		{"same token twice", "- {token: " + tokenWeb + ", services: [web]}\n- {token: " + tokenWeb + ", services: [api]}",
			"tokens.yaml:2: [1].token: same token as [0].token"},
		{"same token and its hash", "- {token: " + tokenWeb + ", services: [web]}\n- {token: " + hashEntry(tokenWeb) + ", services: [api]}",
			"tokens.yaml:2: [1].token: same token as [0].token"},
		{"hash too short", `- {token: "sha256:0123abcd", services: [web]}`, "[0].token: sha256: and the token's SHA-256 in 64 hex digits"},
		{"hash not hex", "- {token: " + hashEntry(tokenWeb)[:70] + "g, services: [web]}", "[0].token: sha256: and the token's SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokens("tokens.yaml", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), tokenWeb) {
				t.Errorf("the error gives the token away: %v", err)
			}
		})
	}
}

// hashEntry is what `printf %s TOKEN | sha256sum` gives, as an entry of the tokens file.
func hashEntry(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// A tokens file may hold a token's SHA-256 instead of the token: the token then finds
// its entry (and its scope), any other does not.
func TestTokensByTheirHash(t *testing.T) {
	// sha256sum writes lower case; upper case is the same hash
	tokens, err := ParseTokens("tokens.yaml", []byte("- {token: "+hashEntry(tokenWeb)+", services: [web]}\n- {token: sha256:"+
		strings.ToUpper(hashEntry(tokenBoth)[len("sha256:"):])+", services: [web, api]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set := tokenSet(tokens)
	if got, ok := set.lookup(tokenWeb); !ok || strings.Join(got.Services, ",") != "web" || got.Fingerprint() != fingerprint(tokenWeb) {
		t.Errorf("lookup of the token whose hash is listed: %+v, %v; want its scope web and its fingerprint", got, ok)
	}
	if got, ok := set.lookup(tokenBoth); !ok || strings.Join(got.Services, ",") != "web,api" {
		t.Errorf("lookup of a token listed in plain: %+v, %v", got, ok)
	}
	for _, wrong := range []string{hashEntry(tokenWeb), "not-a-token-of-this-edge", ""} {
		if got, ok := set.lookup(wrong); ok {
			t.Errorf("lookup of %q found %+v", wrong, got)
		}
	}

	// A connector whose token's hash is listed attaches to an edge.
	e := startEdge(t, newPKI(t), "- {token: "+hashEntry(tokenWeb)+", services: [web]}\n", EdgeConfig{})
	o := startOrigin(t, "a")
	startConnector(t, e.connectorFile(t, "a", tokenWeb, web(o)))
	waitFor(t, &e.notifier, 5*time.Second, "connector a attached by its token's hash", func() bool {
		_, ok := e.tunnelOf("a")
		return ok || e.Counters().Refused[RefusedUnknownToken] > 0
	})
	if s, ok := e.tunnelOf("a"); !ok || s.Token != fingerprint(tokenWeb) {
		t.Fatalf("connector a: attached %v, status %+v; refusals %v", ok, s, e.Counters().Refused)
	}
}

// The tunnel's secret files (the edge's tokens file and key, the connector's token
// file) are warned of, by name, when others than their owner may read them.
func TestSecretFilesReadableByOthersAreWarnedOf(t *testing.T) {
	const warning = "secret file is readable by others"
	p := newPKI(t)
	e := startEdge(t, p, tokensFile, EdgeConfig{})
	o := startOrigin(t, "a")
	quiet := startConnector(t, e.connectorFile(t, "quiet", tokenWeb, web(o)))
	if strings.Contains(e.logs.String(), warning) || strings.Contains(quiet.logs.String(), warning) {
		t.Fatalf("a warning for files only their owner reads:\n%s\n%s", e.logs, quiet.logs)
	}

	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(tokensFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p.keyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	loudEdge, err := NewEdge(EdgeConfig{Listen: "127.0.0.1:0", CertFile: p.certFile, KeyFile: p.keyFile, TokensFile: tokens,
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	_ = loudEdge.Run(stopped) // frees its port
	for _, file := range []string{p.keyFile, tokens} {
		if !strings.Contains(logs.String(), warning+": chmod 600 it\" file="+file) {
			t.Errorf("no warning naming %s:\n%s", file, logs)
		}
	}

	path := e.connectorFile(t, "loud", tokenWeb, web(o))
	tokenFile := filepath.Join(filepath.Dir(path), "token")
	if err := os.Chmod(tokenFile, 0o604); err != nil {
		t.Fatal(err)
	}
	loud := startConnector(t, path)
	if !strings.Contains(loud.logs.String(), "file="+tokenFile) {
		t.Errorf("the connector did not warn of its token file:\n%s", loud.logs)
	}
}

func TestParseConnectorConfig(t *testing.T) {
	p := newPKI(t)
	tokenFile := filepath.Join(p.dir, "token")
	writeFile(t, tokenFile, "  "+tokenWeb+"\n")
	shortToken := filepath.Join(p.dir, "short")
	writeFile(t, shortToken, "abc\n")

	c, err := ParseConnectorConfig("connect.yaml", []byte(`
name: laptop
edges: [127.0.0.1:7443, "edge2.example:7443"]
token_file: `+tokenFile+`
ca_file: `+p.caFile+`
transport: tcp
services:
  - {name: web, to: 127.0.0.1:8000, capacity: 30}
  - {name: api, to: "[::1]:9000", origin: home}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "laptop" || len(c.Edges) != 2 || c.Token != tokenWeb || c.CAs == nil || c.DrainTime != DefaultDrainTime || c.Transport != TransportTCP ||
		len(c.Services) != 2 || c.Services[0] != (ServiceConfig{Name: "web", To: "127.0.0.1:8000", Capacity: 30}) ||
		c.Services[1] != (ServiceConfig{Name: "api", To: "[::1]:9000", Capacity: DefaultCapacity, Origin: "home"}) {
		t.Fatalf("config %+v", c)
	}

	valid := map[string]string{
		"edges":      "edges: [127.0.0.1:7443]",
		"token_file": "token_file: " + tokenFile,
		"ca_file":    "ca_file: " + p.caFile,
		"services":   "services: [{name: web, to: 127.0.0.1:8000}]",
	}
	file := func(replace map[string]string) string {
		var lines []string
		for _, k := range []string{"edges", "token_file", "ca_file", "services"} {
			line, ok := replace[k]
			if !ok {
				line = valid[k]
			}
			if line != "" {
				lines = append(lines, line)
			}
		}
		return strings.Join(lines, "\n")
	}
	for _, tc := range []struct {
		name    string
		replace map[string]string
		want    string
	}{
		{"no edges", map[string]string{"edges": ""}, "connect.yaml:1: edges: required"},
		{"empty edges", map[string]string{"edges": "edges: []"}, "connect.yaml:1: edges: must list at least one edge"},
		{"edge without port", map[string]string{"edges": "edges: [edge1]"}, `connect.yaml:1: edges[0]: "edge1" is not host:port`},
		{"edge port 0", map[string]string{"edges": "edges: [edge1:0]"}, `edges[0]: "edge1:0" has no port from 1 to 65535`},
		{"edge twice", map[string]string{"edges": "edges: [e:1, e:1]"}, "edges[1]: e:1 is listed twice"},
		{"no token file", map[string]string{"token_file": ""}, "token_file: required"},
		{"unreadable token file", map[string]string{"token_file": "token_file: /nonexistent/token"},
			"connect.yaml:2: token_file: cannot read /nonexistent/token: no such file or directory"},
		{"short token", map[string]string{"token_file": "token_file: " + shortToken}, "token_file: " + shortToken + " holds no token of at least 16 characters"},
		{"CA not PEM", map[string]string{"ca_file": "ca_file: " + tokenFile}, "connect.yaml:3: ca_file: " + tokenFile + " holds no PEM certificate"},
		{"no services", map[string]string{"services": ""}, "services: required"},
		{"service without name", map[string]string{"services": "services: [{to: a:1}]"}, "connect.yaml:4: services[0].name: required"},
		{"service without to", map[string]string{"services": "services: [{name: web}]"}, "services[0].to: required"},
		{"bad to", map[string]string{"services": "services: [{name: web, to: nowhere}]"}, `services[0].to: "nowhere" is not host:port`},
		{"capacity 0", map[string]string{"services": "services: [{name: web, to: a:1, capacity: 0}]"}, `services[0].capacity: "0" is not an integer from 1 to 65535`},
		{"service twice", map[string]string{"services": "services: [{name: web, to: a:1}, {name: web, to: a:2}]"}, "services[1].name: web is served twice"},
		{"unknown field", map[string]string{"services": "services: [{name: web, to: a:1, weight: 3}]"}, "services[0].weight: unknown field (known: name, to, capacity, origin)"},
		{"bad origin", map[string]string{"services": "services: [{name: web, to: a:1, origin: a/b}]"}, `services[0].origin: "a/b" is not an origin name`},
		{"origin not text", map[string]string{"services": "services: [{name: web, to: a:1, origin: [x]}]"}, `services[0].origin: must be a string`},
		{"bad drain time", map[string]string{"services": valid["services"] + "\ndrain_time: 1h"}, `drain_time: "1h" is not a duration from 0s to 5m0s`},
		{"bad transport", map[string]string{"services": valid["services"] + "\ntransport: udp"}, `connect.yaml:5: transport: "udp" is not auto, quic or tcp`},
		{"unknown top field", map[string]string{"services": valid["services"] + "\ntoken: x"}, "connect.yaml:5: token: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConnectorConfig("connect.yaml", []byte(file(tc.replace)), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}

	if c, err := ParseConnectorConfig("connect.yaml", []byte(file(nil)), nil); err != nil || c.Transport != TransportAuto {
		t.Errorf("a file without transport: %v, %v; want auto", c.Transport, err)
	}

	// Every problem at once, in line order.
	_, err = ParseConnectorConfig("connect.yaml", []byte("edges: [x]\ntoken_file: /nonexistent\nca_file: /nonexistent\nservices: []\ndrain_time: -1s"), nil)
	if err == nil || strings.Count(err.Error(), "\n") != 4 {
		t.Fatalf("error %v, want 5 problems", err)
	}
}

// A relative token_file or ca_file is beside the config file, whatever the working
// directory: the systemd unit loads the config, the token and the CA as credentials
// into one directory and runs --config %d/connect.yaml.
func TestConnectorFilesBesideTheConfig(t *testing.T) {
	p := newPKI(t)
	writeFile(t, filepath.Join(p.dir, "token"), tokenWeb+"\n")
	conf := filepath.Join(p.dir, "connect.yaml")
	writeFile(t, conf, "edges: [127.0.0.1:7443]\ntoken_file: token\nca_file: "+filepath.Base(p.caFile)+"\nservices: [{name: web, to: 127.0.0.1:8000}]\n")
	c, err := LoadConnectorConfig(conf, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != tokenWeb || c.TokenFile != filepath.Join(p.dir, "token") || c.CAFile != p.caFile {
		t.Errorf("token %q from %s, CA %s: want the files beside %s", c.Token, c.TokenFile, c.CAFile, conf)
	}
}
