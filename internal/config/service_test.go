package config

import (
	"reflect"
	"strings"
	"testing"
)

// ParseService reads one service document with the walkers, defaults and checks of a
// config file: the service it gives is the one Parse gives for the same mapping in a
// file's services list, and its errors have lines and the service's own fields.
func TestParseServiceIsParseForOneService(t *testing.T) {
	const node = "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\n"
	const doc = "name: web\nvip: 198.51.100.10\nport: 80\nbackends:\n  - address: 10.0.1.1 # rack 1\n    weight: 3\n  - {address: 10.0.1.2}\nhealth: {kind: http}\n"
	file, err := Parse("node.yaml", []byte(node+"services:\n  - "+strings.ReplaceAll(strings.TrimSuffix(doc, "\n"), "\n", "\n    ")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := ParseService("/manifold/services/web", []byte(doc), file)
	if err != nil || !reflect.DeepEqual(*svc, file.Services[0]) {
		t.Fatalf("ParseService: %v\n%+v\n%+v", err, svc, file.Services[0])
	}
	// the format version: absent or 1 is read; a newer one is refused, named
	if _, err := ParseService("k", []byte("v: 1\n"+doc), file); err != nil {
		t.Fatalf("v: 1: %v", err)
	}
	for _, c := range []struct{ doc, want string }{
		{"v: 2\n" + doc, "k:1: v: format version 2 is newer than this node reads (1)"},
		{"v: one\n" + doc, "k:1: v: the document's format version must be a positive integer"},
		{"name: web\nvip: 198.51.100.10\nbackends:\n  - address: 10.0.1.1\n    weight: -1\n", "k:5: backends[0].weight: "},
		{"name: web\nbackends: [{address: 10.0.1.1}]\n", "k:1: vip: required"},
		{"name: web\nvip: 2001:db8::10\nbackends: [{address: 2001:db8::1}]\n", "k:2: vip: IPv6 VIP needs an IPv6 node address (node.address6)"},
		{"name: web\nvip: 198.51.100.10\nforwarding: tunnel\n", "k:3: forwarding: a tunnel service needs the node's tunnels section"},
		{"name: 'a b'\nvip: 198.51.100.10\n", "k:1: name: \"a b\" is not a valid name"},
		{"- name: web\n", "k:1: top level must be a mapping"},
	} {
		_, err := ParseService("k", []byte(c.doc), file)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.doc, err, c.want)
		}
	}
}

// Clash is the rule between two services of a node, for the file and the fleet alike.
func TestClash(t *testing.T) {
	cfg, err := Parse("f", []byte("node: {name: lb1, interfaces: [eth0], address: 10.0.0.11}\ntunnels: {cert_file: c, key_file: k, tokens_file: t}\nservices:\n"+
		"  - {name: a, vip: 198.51.100.10, port: 80}\n  - {name: b, vip: 198.51.100.10, port: 81}\n  - {name: c, vip: 198.51.100.10, port: 80, protocol: udp}\n  - {name: d, vip: 198.51.100.11, port: 80, forwarding: tunnel}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Services
	if _, why := Clash(&s[0], &s[1], "b"); why != "" {
		t.Errorf("other port: %s", why)
	}
	if _, why := Clash(&s[0], &s[2], "c"); why != "" {
		t.Errorf("other protocol: %s", why)
	}
	same := s[0]
	if field, why := Clash(&same, &s[0], "a"); field != "" || why != "duplicate service: same vip/port/protocol as a" {
		t.Errorf("same key: %q %q", field, why)
	}
	tunnel := s[3]
	tunnel.VIP, tunnel.Port = s[0].VIP, 443
	if field, why := Clash(&tunnel, &s[0], "a"); field != "forwarding" || !strings.Contains(why, "tunnel and other services do not share a vip") {
		t.Errorf("tunnel beside a service: %q %q", field, why)
	}
}
