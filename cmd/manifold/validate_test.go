package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\nservices:\n  - name: web\n    vip: 198.51.100.10\n    port: 80\n    backends:\n      - address: 10.0.1.1\n")
	bad := write("bad.yaml", "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\nservices:\n  - name: web\n    vip: 198.51.100.10\n    table_size: 100\n    backends:\n      - address: 2001:db8::1\n")
	backend := write("backend.yaml", "backend:\n  interface: eth0\n  vips: [198.51.100.10]\n")
	badBackend := write("badbackend.yaml", "backend:\n  interface: eth0\n  vips: [198.51.100.300]\n")
	steer := write("steer.yaml", "steer:\n  name: c1\nfleet:\n  etcd:\n    endpoints: [http://10.0.0.5:2379]\n")
	badSteer := write("badsteer.yaml", "steer:\n  name: c1\nfleet:\n  etcd:\n    endpoints: [10.0.0.5]\n")
	linkFile := "link:\n  name: dc1-dc2\n  local: {address: 192.0.2.1, prefixes: [10.1.0.0/16]}\n  remote: {address: 192.0.2.2, prefixes: [10.2.0.0/16]}\n" +
		"  private_key_file: dc1.key\n  peer_public_key: ThxgqOncpcA21h5JzqGQLqMx880sOzNM5Hg8TQMpNkk=\n"
	// the files the configs name, as validate checks them: there, readable, PEM where
	// the field takes PEM (one certificate and key pair stands for each)
	etc := t.TempDir()
	namedFiles(t, etc)
	for name, from := range map[string]string{"dc1.key": "dc1.key", "api-token": "api-token", "api.crt": "edge.crt", "api.key": "edge.key"} {
		data, err := os.ReadFile(filepath.Join(etc, from))
		if err != nil {
			t.Fatal(err)
		}
		write(name, string(data))
	}
	link := write("link.yaml", linkFile)
	badLink := write("badlink.yaml", strings.Replace(linkFile, "10.2.0.0/16", "10.1.2.0/24", 1))
	// the node's API beyond loopback: open, without TLS, with a short token; and allowed
	node := "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\n"
	openAPI := write("open-api.yaml", node+"  api: 0.0.0.0:9100\n")
	clearAPI := write("clear-api.yaml", node+"  api: 10.0.0.11:9100\n  api_token_file: api-token\n")
	shortToken := write("short-token.yaml", node+"  api: 10.0.0.11:9100\n  api_token: s3cret\n  api_cert_file: api.crt\n  api_key_file: api.key\n")
	tlsAPI := write("tls-api.yaml", node+"  api: 10.0.0.11:9100\n  api_token_file: api-token\n  api_cert_file: api.crt\n  api_key_file: api.key\n")
	insecureAPI := write("insecure-api.yaml", node+"  api: 0.0.0.0:9100\n  api_insecure_remote: true\n")
	const beyond = "anyone who reaches or watches the port could change the node; add them, listen on 127.0.0.1, or set api_insecure_remote: true to accept that"
	// issue 25, finding 3: 10-way merge keys nested 5 levels, which de322de called ok
	bombFile, err := os.ReadFile("../../internal/config/testdata/invalid-merge-bomb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bomb := write("bomb.yaml", string(bombFile))

	// files named that are not what their fields take: each named at its line
	write("empty-token", "\n")
	if err := os.Mkdir(filepath.Join(dir, "certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	badFiles := write("bad-files.yaml", node+"  api: 10.0.0.11:9100\n  api_token_file: empty-token\n  api_cert_file: api.key\n  api_key_file: api.crt\n"+
		"fleet:\n  etcd:\n    endpoints: [https://10.0.0.5:2379]\n    ca_file: certs\n    cert_file: /nonexistent/etcd-client.crt\n    key_file: "+filepath.Join(etc, "etcd-client.key")+"\n")
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherDER, err := x509.MarshalPKCS8PrivateKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	write("other.key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: otherDER})))
	wrongKey := write("wrong-key.yaml", node+"  api: 10.0.0.11:9100\n  api_token_file: api-token\n  api_cert_file: api.crt\n  api_key_file: other.key\n")
	missingKubeconfig := write("kube-backend.yaml", "backend:\n  interface: eth0\nkubernetes:\n  kubeconfig: /nonexistent/kubeconfig\n")
	cases := []struct {
		path  string
		code  int
		lines []string
	}{
		{good, 0, []string{good + ": ok"}},
		{backend, 0, []string{backend + ": ok"}},
		{steer, 0, []string{steer + ": ok"}},
		{link, 0, []string{link + ": ok"}},
		{badLink, 1, []string{badLink + ":4: link.remote.prefixes[0]: 10.1.2.0/24 overlaps 10.1.0.0/16 (link.local.prefixes[0])"}},
		{bad, 1, []string{
			bad + ":8: services[0].table_size: 100 is not prime (try 101)",
			bad + ":10: services[0].backends[0].address: 2001:db8::1 is IPv6 but the vip is IPv4 (backends must be of the vip's family)",
		}},
		{badBackend, 1, []string{badBackend + `:3: backend.vips[0]: "198.51.100.300" is not an IPv4 or IPv6 address`}},
		{badSteer, 1, []string{badSteer + `:5: fleet.etcd.endpoints[0]: "10.0.0.5" must start with http:// or https://`}},
		{openAPI, 1, []string{openAPI + `:5: node.api: "0.0.0.0:9100" listens beyond loopback without a token (api_token_file or api_token) and without TLS (api_cert_file and api_key_file): ` + beyond}},
		{clearAPI, 1, []string{clearAPI + `:5: node.api: "10.0.0.11:9100" listens beyond loopback without TLS (api_cert_file and api_key_file): ` + beyond}},
		{shortToken, 1, []string{shortToken + ":6: node.api_token: the token has 6 characters; it needs at least 16 (e.g. openssl rand -hex 16)"}},
		{tlsAPI, 0, []string{tlsAPI + ": ok"}},
		{insecureAPI, 0, []string{insecureAPI + ": ok"}},
		{wrongKey, 1, []string{wrongKey + ":8: node.api_key_file: " + filepath.Join(dir, "other.key") + " is not the key of " +
			filepath.Join(dir, "api.crt") + " (node.api_cert_file): tls: private key does not match public key"}},
		{missingKubeconfig, 1, []string{missingKubeconfig + ":4: kubernetes.kubeconfig: /nonexistent/kubeconfig does not exist"}},
		{badFiles, 1, []string{
			badFiles + ":6: node.api_token_file: " + filepath.Join(dir, "empty-token") + " is empty",
			badFiles + ":7: node.api_cert_file: " + filepath.Join(dir, "api.key") + " holds no PEM certificate (a DER file? openssl x509 -in " +
				filepath.Join(dir, "api.key") + " -out " + filepath.Join(dir, "api.key") + ".pem makes it PEM)",
			badFiles + ":8: node.api_key_file: " + filepath.Join(dir, "api.crt") + " holds no PEM private key",
			badFiles + ":12: fleet.etcd.ca_file: " + filepath.Join(dir, "certs") + " is a directory, not a file",
			badFiles + ":13: fleet.etcd.cert_file: /nonexistent/etcd-client.crt does not exist",
		}},
		{bomb, 1, []string{bomb + ":10: too many aliases: they expand to more than 65536 nodes beyond those written (the limit), at alias *d"}},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := validate([]string{"--config", c.path}, &out, &errOut)
		got := strings.Split(strings.TrimSpace(out.String()), "\n")
		if code != c.code || strings.Join(got, "\n") != strings.Join(c.lines, "\n") {
			t.Errorf("validate %s: exit %d, output\n%s\nwant exit %d, output\n%s", filepath.Base(c.path), code, out.String(), c.code, strings.Join(c.lines, "\n"))
		}
	}
	if code := validate([]string{"--config", filepath.Join(dir, "missing.yaml")}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("missing file: exit %d, want 1", code)
	}
	if code := validate(nil, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("no --config: exit %d, want 2", code)
	}
}
