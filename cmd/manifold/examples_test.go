package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
)

type example struct {
	file string
	kind config.Kind
	role string
}

// examples is every file of deploy/examples: one per role, each a whole file that the
// docs' quick starts copy to /etc/manifold and `manifold validate` accepts.
var examples = []example{
	{"node.yaml", config.NodeFile, "a node of one site: BGP, a service over three backends"},
	{"backend.yaml", config.BackendFile, "a backend: decapsulation, the VIP on lo"},
	{"fleet-node.yaml", config.NodeFile, "a node of a fleet: services in etcd over TLS"},
	{"edge.yaml", config.NodeFile, "an edge: a node with tunnels and a tunnel service"},
	{"connect.yaml", config.ConnectFile, "a connector on an origin behind NAT"},
	{"link.yaml", config.LinkFile, "a site-to-site link's gateway"},
	{"steer.yaml", config.SteerFile, "the steering controller"},
}

// etcManifold is where the examples name their certificates, keys and tokens.
var etcManifold = regexp.MustCompile(`/etc/manifold/[A-Za-z0-9._-]+`)

// TestExamples runs `manifold validate` on every example, with the files it names
// under /etc/manifold made in a temporary directory (the paths rewritten to it), each
// of the kind its name says: what a user has after the quick start of its guide.
func TestExamples(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "examples")
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if info, err := os.Stat(f); err == nil && info.IsDir() {
			continue // kubernetes/: manifests, which cmd/manifold-connect's tests apply
		}
		if !slices.ContainsFunc(examples, func(e example) bool { return e.file == filepath.Base(f) }) {
			t.Errorf("deploy/examples/%s is in no row of the examples table: add it, with its role", filepath.Base(f))
		}
	}
	etc := t.TempDir()
	made := namedFiles(t, etc)
	for _, e := range examples {
		t.Run(e.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, e.file))
			if err != nil {
				t.Fatalf("%s (%s): %v", e.file, e.role, err)
			}
			if got := config.KindOf(data); got != e.kind {
				t.Errorf("manifold validate takes %s for a %s file, want %s", e.file, got, e.kind)
			}
			for _, name := range etcManifold.FindAllString(withoutComments(string(data)), -1) {
				if _, ok := made[filepath.Base(name)]; !ok {
					t.Errorf("%s names %s, which this test cannot make: add it to namedFiles", e.file, name)
				}
			}
			// beside the files it names: a relative path in a config is relative to its file
			path := filepath.Join(etc, e.file)
			body := strings.ReplaceAll(string(data), "/etc/manifold/", etc+"/")
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if code := validate([]string{"--config", path}, &out, &out); code != 0 {
				t.Errorf("manifold validate deploy/examples/%s exits %d:\n%s", e.file, code, out.String())
			}
		})
	}
}

// namedFiles makes in dir every file the examples and the docs' snippets name under
// /etc/manifold, under the names the docs give them, and returns them by name.
func namedFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "example"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.ParseIP("10.0.0.11"), net.ParseIP("10.0.0.5")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// One certificate stands for each certificate and CA, and its key for each key:
	// whichever pair a file names then matches.
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	token := make([]byte, 32)
	wgKey := make([]byte, 32)
	rand.Read(token)
	rand.Read(wgKey)
	files := map[string][]byte{
		"etcd-ca.crt":        certPEM,
		"etcd-client.crt":    certPEM,
		"etcd-client.key":    keyPEM,
		"edge-ca.crt":        certPEM,
		"edge.crt":           certPEM,
		"edge.key":           keyPEM,
		"connect.token":      []byte(hex.EncodeToString(token) + "\n"),
		"tunnel-tokens.yaml": []byte("- {token: " + hex.EncodeToString(token) + ", services: [web]}\n"),
		"relay-token":        []byte(hex.EncodeToString(token) + "\n"),
		"dc1.key":            []byte(base64.StdEncoding.EncodeToString(wgKey) + "\n"),
		"etcd.pass":          []byte("a-password\n"),
		"api-token":          []byte(hex.EncodeToString(token) + "\n"),
	}
	made := map[string]bool{}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		made[name] = true
	}
	return made
}

// withoutComments is a YAML file without its comments, which name files too (the
// example's own place, say) that the config does not read.
func withoutComments(yaml string) string {
	var b strings.Builder
	for _, line := range strings.Split(yaml, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
