package tunnel

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	tokens, err := ParseTokens("tokens.yaml", []byte(tokensFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 2 || tokens[1].Fingerprint() != fingerprint(tokenBoth) ||
		strings.Join(tokens[1].Services, ",") != "web,api" {
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
		{"unknown field", "- {token: " + tokenWeb + ", services: [web], scope: all}", "[0].scope: unknown field (known: token, services)"},
		{"same token twice", "- {token: " + tokenWeb + ", services: [web]}\n- {token: " + tokenWeb + ", services: [api]}",
			"tokens.yaml:2: [1].token: same token as [0].token"},
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
services:
  - {name: web, to: 127.0.0.1:8000, capacity: 30}
  - {name: api, to: "[::1]:9000"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "laptop" || len(c.Edges) != 2 || c.Token != tokenWeb || c.CAs == nil || c.DrainTime != DefaultDrainTime ||
		len(c.Services) != 2 || c.Services[0] != (ServiceConfig{"web", "127.0.0.1:8000", 30}) ||
		c.Services[1] != (ServiceConfig{"api", "[::1]:9000", DefaultCapacity}) {
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
		{"unknown field", map[string]string{"services": "services: [{name: web, to: a:1, weight: 3}]"}, "services[0].weight: unknown field (known: name, to, capacity)"},
		{"bad drain time", map[string]string{"services": valid["services"] + "\ndrain_time: 1h"}, `drain_time: "1h" is not a duration from 0s to 5m0s`},
		{"unknown top field", map[string]string{"services": valid["services"] + "\ntoken: x"}, "connect.yaml:5: token: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConnectorConfig("connect.yaml", []byte(file(tc.replace)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}

	// Every problem at once, in line order.
	_, err = ParseConnectorConfig("connect.yaml", []byte("edges: [x]\ntoken_file: /nonexistent\nca_file: /nonexistent\nservices: []\ndrain_time: -1s"))
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
	c, err := LoadConnectorConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != tokenWeb || c.TokenFile != filepath.Join(p.dir, "token") || c.CAFile != p.caFile {
		t.Errorf("token %q from %s, CA %s: want the files beside %s", c.Token, c.TokenFile, c.CAFile, conf)
	}
}
