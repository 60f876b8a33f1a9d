package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/maglev"
)

var addr = netip.MustParseAddr

func TestParseFull(t *testing.T) {
	got, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Node: Node{
			Name:              "lb1",
			Site:              "lb1",
			Interfaces:        []string{"eth0", "eth1"},
			XDPMode:           XDPNative,
			Address:           addr("10.0.0.11"),
			Address6:          addr("2001:db8::11"),
			API:               "0.0.0.0:9200",
			APIToken:          "s3cret-t0ken-of-full-yaml",
			APIHosts:          []string{"lb1.example.net"},
			APICertFile:       "/etc/manifold/api.crt",
			APIKeyFile:        "/etc/manifold/api.key",
			APIInsecureRemote: true,
			FlowTableSize:     1048576,
			MaxServices:       200000,
			MaxBackends:       800000,
			NewFlowRate:       DefaultNewFlowRate,
		},
		BGP: &BGP{
			ASN:      65001,
			RouterID: addr("10.0.0.11"),
			Peers: []Peer{
				{Address: addr("10.0.0.1"), ASN: 65000, Port: 1179, HoldTime: 30 * time.Second, Password: "hunter2", EBGPMultihop: 4},
				{Address: addr("2001:db8::1"), ASN: 65000, Port: 179, HoldTime: 0, Password: ""},
			},
			DrainTime: 5 * time.Second,
		},
		Services: []Service{
			{
				Name:       "web",
				VIP:        addr("198.51.100.10"),
				Port:       80,
				Protocol:   TCP,
				Forwarding: IPIP,
				GUEPort:    6081,
				Scheduler:  MaglevSource,
				TableSize:  251,
				Origins:    []Origin{{Name: "us-west", Capacity: 200}, {Name: "eu-central", Capacity: 1000}},
				Backends: []Backend{
					{Address: addr("10.0.1.1"), Weight: 3, Origin: "us-west"},
					{Address: addr("10.0.1.2"), Weight: 0, Origin: "eu-central"},
				},
				Health: Health{
					Kind:     HealthHTTP,
					Port:     8080,
					Path:     "/healthz",
					Interval: 2 * time.Second,
					Timeout:  1500 * time.Millisecond,
					Rise:     3,
					Fall:     5,
				},
			},
			{
				Name:       "dns.v6",
				VIP:        addr("2001:db8:100::53"),
				Port:       53,
				Protocol:   UDP,
				Forwarding: IPIP,
				GUEPort:    6080,
				Scheduler:  Maglev,
				TableSize:  65537,
				Backends:   []Backend{{Address: addr("2001:db8:1::1"), Weight: 1}},
				Health: Health{
					Kind:     HealthTCP,
					Port:     53,
					Interval: time.Second,
					Timeout:  time.Second,
					Rise:     1,
					Fall:     100,
				},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseDefaults(t *testing.T) {
	defaultHealth := func(port uint16) Health {
		return Health{Kind: HealthNone, Port: port, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}
	}
	node := Node{
		Name:          "lb1",
		Site:          "lb1",
		Interfaces:    []string{"eth0"},
		XDPMode:       XDPAuto,
		Address:       addr("10.0.0.11"),
		API:           "127.0.0.1:9100",
		FlowTableSize: 262144,
		MaxServices:   16384,
		MaxBackends:   65536,
		NewFlowRate:   16384,
	}
	svc := func(name, vip string, port uint16) Service {
		return Service{
			Name: name, VIP: addr(vip), Port: port, Protocol: TCP, Forwarding: IPIP, GUEPort: 6080,
			Scheduler: Maglev, TableSize: 509, Health: defaultHealth(port),
		}
	}
	web := svc("web", "198.51.100.10", 0)
	web.Backends = []Backend{{Address: addr("10.0.1.1"), Weight: 1}, {Address: addr("10.0.1.2"), Weight: 1}}
	api := svc("api", "198.51.100.11", 443)
	// backends: [] gives no backends (nil)
	api.Health.Kind, api.Health.Path = HealthHTTP, "/"
	slow := svc("slow", "198.51.100.12", 8080)
	slow.Health.Kind, slow.Health.Interval, slow.Health.Timeout = HealthTCP, 200*time.Millisecond, 200*time.Millisecond

	web2 := svc("web", "198.51.100.10", 80)
	web2.Backends = []Backend{{Address: addr("10.0.1.1"), Weight: 1}, {Address: addr("10.0.1.2"), Weight: 2}}
	web2.Health.Kind, web2.Health.Interval = HealthTCP, 2*time.Second
	webTLS := web2
	webTLS.Name, webTLS.Port, webTLS.Health.Port = "web-tls", 443, 443
	dns := svc("dns", "198.51.100.53", 53)
	dns.Protocol, dns.Backends, dns.Health = UDP, web2.Backends, web2.Health
	dns.Health.Port = 53

	for _, tc := range []struct {
		file string
		want *Config
	}{
		{"minimal.yaml", &Config{Node: node}},
		{"defaults.yaml", &Config{
			Node: node,
			BGP: &BGP{ASN: 65001, RouterID: addr("10.0.0.11"), Peers: []Peer{
				{Address: addr("10.0.0.1"), ASN: 65000, Port: 179, HoldTime: 9 * time.Second},
			}, DrainTime: 2 * time.Second},
			Services: []Service{web, api, slow},
		}},
		{"anchors.yaml", &Config{Node: node, Services: []Service{web2, webTLS, dns}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Load(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestTunnels(t *testing.T) {
	got, err := Parse("t.yaml", []byte(hdr+tunnelsSection+"services:\n  - {name: web, vip: 198.51.100.10, port: 80, forwarding: tunnel}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Tunnels{Listen: DefaultTunnelListen, CertFile: "edge.crt", KeyFile: "edge.key", TokensFile: "tokens.yaml",
		IdleTimeout: DefaultTunnelIdleTimeout, MaxConnsPerSource: DefaultTunnelMaxConnsPerSource, MaxPendingHellos: DefaultTunnelMaxPendingHellos}
	if !reflect.DeepEqual(got.Tunnels, want) {
		t.Errorf("tunnels: got %+v, want %+v", got.Tunnels, want)
	}
	if s := got.Services[0]; s.Forwarding != Tunnel || s.Port != 80 || s.Protocol != TCP || len(s.Backends) != 0 || s.ProxyProtocol != "" {
		t.Errorf("service: got %+v (no PROXY header by default)", s)
	}
	for _, v := range []ProxyProtocol{ProxyV1, ProxyV2} {
		got, err = Parse("t.yaml", []byte(hdr+tunnelsSection+"services:\n  - {name: web, vip: 198.51.100.10, port: 80, forwarding: tunnel, proxy_protocol: "+string(v)+"}\n"))
		if err != nil || got.Services[0].ProxyProtocol != v {
			t.Errorf("proxy_protocol: %s: got %+v, %v", v, got, err)
		}
	}

	// A tunnel service may have origins: its connectors name the one they serve it for.
	got, err = Parse("t.yaml", []byte(hdr+tunnelsSection+"services:\n  - {name: web, vip: 198.51.100.10, port: 80, forwarding: tunnel, origins: [{name: home, capacity: 100}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o := got.Services[0].Origins; !reflect.DeepEqual(o, []Origin{{Name: "home", Capacity: 100}}) {
		t.Errorf("origins of a tunnel service: got %+v", o)
	}

	// A routed service may mix origins with backends and origins reached by tunnel; a
	// tunnelled origin weighs 1 until steering gives shares.
	got, err = Parse("t.yaml", []byte(hdr+tunnelsSection+"services:\n  - {name: web, vip: 198.51.100.10, port: 443, origins: [{name: dc, capacity: 100}, {name: home, capacity: 50, tunnel: true}, {name: pi, capacity: 5, tunnel: true, weight: 0}], backends: [{address: 10.0.1.1, origin: dc}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := got.Services[0]
	if want := []Origin{{Name: "dc", Capacity: 100}, {Name: "home", Capacity: 50, Tunnel: true, Weight: 1}, {Name: "pi", Capacity: 5, Tunnel: true}}; !reflect.DeepEqual(s.Origins, want) {
		t.Errorf("origins of a mixed service: got %+v, want %+v", s.Origins, want)
	}
	if !s.TunnelledOrigins() {
		t.Errorf("a service with a tunnel origin: TunnelledOrigins false")
	}

	// Its tunnelled origins' connectors may write the PROXY header (the routed
	// origins' backends see the client's address on the packets).
	got, err = Parse("t.yaml", []byte(hdr+tunnelsSection+"services:\n  - {name: web, vip: 198.51.100.10, port: 443, proxy_protocol: v2, origins: [{name: dc, capacity: 100}, {name: home, capacity: 50, tunnel: true}], backends: [{address: 10.0.1.1, origin: dc}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Services[0].ProxyProtocol; p != ProxyV2 {
		t.Errorf("proxy_protocol of a mixed service: got %q, want v2", p)
	}
}

// The errors of a service mixing routed and tunnelled origins, each at its line.
func TestMixedServiceErrors(t *testing.T) {
	const mixed = hdr + tunnelsSection + "services:\n  - name: web\n    vip: 198.51.100.10\n" // line 10 on
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"a backend of a tunnelled origin", mixed + "    port: 443\n    origins: [{name: home, capacity: 5, tunnel: true}]\n    backends: [{address: 10.0.1.1, origin: home}]\n",
			[]string{`t.yaml:14: services[0].backends[0].origin: "home" is reached by tunnel (tunnel: true): its connectors serve it, it has no backends`}},
		{"weight of a routed origin", mixed + "    port: 443\n    origins: [{name: dc, capacity: 5, weight: 2}]\n",
			[]string{"t.yaml:13: services[0].origins[0].weight: only with tunnel: true (an origin with backends weighs by its backends' weights)"}},
		{"tunnel: on a tunnel service", mixed + "    port: 443\n    forwarding: tunnel\n    origins: [{name: home, capacity: 5, tunnel: true}]\n",
			[]string{"t.yaml:14: services[0].origins[0].tunnel: a tunnel service's origins are all reached by tunnel: tunnel: true is for an origin of an ipip, gue or nat service"}},
		{"udp, every port", mixed + "    port: 0\n    protocol: udp\n    origins: [{name: home, capacity: 5, tunnel: true}]\n",
			[]string{"t.yaml:12: services[0].port: a service with an origin reached by tunnel needs a port (the tunnel edge listens on vip:port)",
				"t.yaml:13: services[0].protocol: a service with an origin reached by tunnel carries tcp only, not udp (the tunnel edge joins tcp connections)"}},
		{"a backend at the vip", mixed + "    port: 443\n    origins: [{name: dc, capacity: 5}, {name: home, capacity: 5, tunnel: true}]\n    backends: [{address: 198.51.100.10, origin: dc}]\n",
			[]string{"t.yaml:14: services[0].backends[0].address: 198.51.100.10 is the vip: in a service with an origin reached by tunnel, the vip's address stands for the node's own stack"}},
		{"PROXY header, every origin routed", mixed + "    port: 443\n    proxy_protocol: v2\n    origins: [{name: dc, capacity: 5}]\n    backends: [{address: 10.0.1.1, origin: dc}]\n",
			[]string{"t.yaml:13: services[0].proxy_protocol: only with forwarding: tunnel or an origin reached by tunnel (the connector writes it; ipip and gue backends see the client's address on its packets)"}},
		{"no tunnels section", svc + "    port: 443\n    origins: [{name: home, capacity: 5, tunnel: true}]\n",
			[]string{"t.yaml:9: services[0].origins: an origin reached by tunnel needs the node's tunnels section (the edge that serves it)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.yaml))
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// hdr is a valid node section, lines 1-4: cases append from line 5.
const hdr = "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\n"

// tunnelsSection is a valid tunnels section of 4 lines.
const tunnelsSection = "tunnels:\n  cert_file: edge.crt\n  key_file: edge.key\n  tokens_file: tokens.yaml\n"

// svc starts a valid service at line 6 (after hdr and "services:").
const svc = hdr + "services:\n  - name: web\n    vip: 198.51.100.10\n"

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown top-level field", hdr + "colour: blue\n",
			[]string{"t.yaml:5: colour: unknown field (accepted: node, bgp, fleet, kubernetes, tunnels, services)"}},
		{"misspelt top-level field", hdr + "service: []\n",
			[]string{"t.yaml:5: service: unknown field (did you mean services?)"}},
		{"unknown node field", hdr + "  mtu: 1500\n",
			[]string{"t.yaml:5: node.mtu: unknown field (accepted: name, interfaces, xdp_mode, site, address, address6, api, api_token, api_token_file, api_hosts, api_cert_file, api_key_file, api_insecure_remote, flow_table_size, max_services, max_backends, entropy_source, entropy_prefix4, entropy_prefix6, new_flow_rate, forward_transit)"}},
		{"backend port without NAT", svc + "    forwarding: gue\n    backend_port: 8080\n",
			[]string{"t.yaml:9: services[0].backend_port: only with forwarding: nat (encapsulated packets keep the client's port)"}},
		{"PROXY header without a tunnel", svc + "    forwarding: gue\n    proxy_protocol: v1\n",
			[]string{"t.yaml:9: services[0].proxy_protocol: only with forwarding: tunnel or an origin reached by tunnel (the connector writes it; ipip and gue backends see the client's address on its packets)"}},
		{"PROXY header of an unknown version", hdr + tunnelsSection + "services:\n  - {name: web, vip: 198.51.100.10, port: 80, forwarding: tunnel, proxy_protocol: v3}\n",
			[]string{"t.yaml:10: services[0].proxy_protocol: \"v3\" is not valid (accepted: v1, v2)"}},
		{"unknown service field", svc + "    weight: 1\n",
			[]string{"t.yaml:8: services[0].weight: unknown field (accepted: name, vip, port, protocol, forwarding, gue_port, backend_port, proxy_protocol, scheduler, table_size, origins, backends, health, bgp)"}},
		{"entropy prefix of the wrong length and family", hdr + "  entropy_source: true\n  entropy_prefix4: 172.16.0.0/12\n  entropy_prefix6: 10.1.0.0/16\n", []string{
			"t.yaml:6: node.entropy_prefix4: 172.16.0.0/12: must be a /16 (the flow hash picks the other 16 bits)",
			"t.yaml:7: node.entropy_prefix6: 10.1.0.0/16 is not an IPv6 prefix"}},
		{"entropy prefix with host bits", hdr + "  entropy_source: true\n  entropy_prefix4: 172.16.1.0/16\n",
			[]string{"t.yaml:6: node.entropy_prefix4: \"172.16.1.0/16\" has host bits set (did you mean 172.16.0.0/16?)"}},
		{"entropy source without a prefix", hdr + "  entropy_source: true\n",
			[]string{"t.yaml:2: node.entropy_prefix4: required when entropy_source is true and the node has an IPv4 address"}},
		{"entropy prefix without entropy source", hdr + "  entropy_prefix6: fd00:e::/64\n",
			[]string{"t.yaml:5: node.entropy_prefix6: only used with entropy_source: true"}},
		{"entropy source not a boolean", hdr + "  entropy_source: yes\n  entropy_prefix4: 172.16.0.0/16\n",
			[]string{"t.yaml:5: node.entropy_source: must be true or false, got string \"yes\""}},
		{"new flow rate out of range", hdr + "  new_flow_rate: -1\n",
			[]string{"t.yaml:5: node.new_flow_rate: must not be negative (accepted: 0..4294967295)"}},
		{"tunnel service without a tunnels section", svc + "    port: 80\n    forwarding: tunnel\n",
			[]string{"t.yaml:9: services[0].forwarding: a tunnel service needs the node's tunnels section (the edge that serves it)"}},
		{"tunnels section incomplete", hdr + "tunnels:\n  listen: 7443\n  cert_file: \"\"\n", []string{
			"t.yaml:6: tunnels.listen: \"7443\" is not host:port (e.g. 0.0.0.0:7443)",
			"t.yaml:6: tunnels.key_file: required",
			"t.yaml:6: tunnels.tokens_file: required",
			"t.yaml:7: tunnels.cert_file: must not be empty"}},
		{"relay without a CA", hdr + tunnelsSection + "  relay_token_file: relay\n", []string{
			"t.yaml:6: tunnels.ca_file: required with tunnels.relay_token_file: a relay sends its token only to edges whose certificate it checked"}},
		{"tunnel service with what only other services have", hdr + tunnelsSection + "services:\n  - name: web\n    vip: 198.51.100.10\n    protocol: udp\n    forwarding: tunnel\n" +
			"    backends: [{address: 10.0.1.1}]\n    health: {kind: tcp, port: 80}\n  - name: api\n    vip: 198.51.100.10\n    port: 443\n", []string{
			"t.yaml:10: services[0].port: a tunnel service needs a port (the edge listens on vip:port)",
			"t.yaml:12: services[0].protocol: a tunnel service carries tcp only, not udp",
			"t.yaml:14: services[0].backends: a tunnel service has no backends: its connectors serve it (manifold connect)",
			"t.yaml:15: services[0].health: a tunnel service has no health: its connectors serve it (manifold connect)",
			"t.yaml:16: services[1].forwarding: vip 198.51.100.10 is also the vip of services[0], and a tunnel service's vip is the edge's alone: tunnel and other services do not share a vip"}},
		{"unknown backend field", svc + "    backends:\n      - address: 10.0.1.1\n        port: 8080\n",
			[]string{"t.yaml:10: services[0].backends[0].port: unknown field (accepted: address, weight, origin)"}},
		{"unknown health field", svc + "    health:\n      kind: tcp\n      retries: 3\n",
			[]string{
				"t.yaml:9: services[0].health.port: required when kind is tcp and the service port is 0 (all ports)",
				"t.yaml:10: services[0].health.retries: unknown field (accepted: kind, port, path, interval, timeout, rise, fall)",
			}},
		{"unknown bgp peer field", hdr + "bgp:\n  asn: 65001\n  router_id: 10.0.0.11\n  peers:\n    - address: 10.0.0.1\n      asn: 65000\n      holdtime: 9s\n",
			[]string{"t.yaml:11: bgp.peers[0].holdtime: unknown field (did you mean hold_time?)"}},
		{"bad communities", hdr + "bgp:\n  asn: 65001\n  router_id: 10.0.0.11\n  communities: [\"65001:100\", \"65536:1\", no-export, bogus]\n  large_communities: [\"65001:1\"]\n  peers:\n    - address: 10.0.0.1\n      asn: 65000\n", []string{
			`t.yaml:8: bgp.communities[1]: "65536:1" is not a community (ASN:value, each 0..65535, or one of no-export, no-advertise, no-peer, blackhole)`,
			`t.yaml:8: bgp.communities[3]: "bogus" is not a community (ASN:value, each 0..65535, or one of no-export, no-advertise, no-peer, blackhole)`,
			`t.yaml:9: bgp.large_communities[0]: "65001:1" is not a large community (global:local1:local2, each 0..4294967295)`}},
		{"bad service bgp", svc + "    bgp:\n      large_communities: [\"1:2:4294967296\"]\n      med: -1\n      prepend: 11\n", []string{
			`t.yaml:9: services[0].bgp.large_communities[0]: "1:2:4294967296" is not a large community (global:local1:local2, each 0..4294967295)`,
			"t.yaml:10: services[0].bgp.med: must not be negative (accepted: 0..4294967295)",
			"t.yaml:11: services[0].bgp.prepend: 11 is out of range (accepted: 0..10)"}},
		{"bfd out of range", hdr + "bgp:\n  asn: 65001\n  router_id: 10.0.0.11\n  peers:\n    - address: 10.0.0.1\n      asn: 65000\n      bfd: {min_rx: 5ms, multiplier: 0}\n", []string{
			"t.yaml:11: bgp.peers[0].bfd.multiplier: 0 is out of range (accepted: 1..255)",
			"t.yaml:11: bgp.peers[0].bfd.min_rx: 5ms is out of range (accepted: 10ms..10s)"}},
		{"strange key", hdr + "\"a b\": 1\n",
			[]string{`t.yaml:5: "a b": unknown field (accepted: node, bgp, fleet, kubernetes, tunnels, services)`}},
		{"duplicate key", hdr + "  name: lb2\n",
			[]string{"t.yaml:5: node.name: duplicate key (first at line 2)"}},
		{"bad vip", hdr + "services:\n  - name: web\n    vip: 198.51.100.300\n",
			[]string{`t.yaml:7: services[0].vip: "198.51.100.300" is not an IPv4 or IPv6 address`}},
		{"vip with prefix", hdr + "services:\n  - name: web\n    vip: 198.51.100.1/32\n",
			[]string{`t.yaml:7: services[0].vip: "198.51.100.1/32" is a prefix, not an IP address`}},
		{"vip with zone", hdr + "  address6: fe80::1\nservices:\n  - name: web\n    vip: fe80::10%eth0\n",
			[]string{`t.yaml:8: services[0].vip: "fe80::10%eth0": zones are not allowed`}},
		{"vip 4in6", hdr + "services:\n  - name: web\n    vip: ::ffff:198.51.100.1\n",
			[]string{`t.yaml:7: services[0].vip: "::ffff:198.51.100.1" is IPv4-mapped; write it as 198.51.100.1`}},
		{"vip unspecified", hdr + "services:\n  - name: web\n    vip: 0.0.0.0\n",
			[]string{"t.yaml:7: services[0].vip: 0.0.0.0 is unspecified; must be a unicast address"}},
		{"vip multicast", hdr + "services:\n  - name: web\n    vip: 239.1.1.1\n",
			[]string{"t.yaml:7: services[0].vip: 239.1.1.1 is multicast; must be a unicast address"}},
		{"vip loopback", hdr + "services:\n  - name: web\n    vip: 127.0.0.2\n",
			[]string{"t.yaml:7: services[0].vip: 127.0.0.2 is a loopback address; a VIP must be reachable from the network"}},
		{"vip missing", hdr + "services:\n  - name: web\n    port: 80\n",
			[]string{"t.yaml:6: services[0].vip: required"}},
		{"family mismatch vip backend", svc + "    backends:\n      - address: 10.0.1.1\n      - address: 2001:db8::1\n",
			[]string{"t.yaml:10: services[0].backends[1].address: 2001:db8::1 is IPv6 but the vip is IPv4 (backends must be of the vip's family)"}},
		{"table size not prime", svc + "    table_size: 65536\n",
			[]string{"t.yaml:8: services[0].table_size: 65536 is not prime (try 65537)"}},
		{"table size out of range", svc + "    table_size: 2000000\n",
			[]string{"t.yaml:8: services[0].table_size: 2000000 is out of range (accepted: 7..1048573)"}},
		{"table size too small", svc + "    table_size: 7\n    backends:\n" +
			"      - address: 10.0.1.1\n      - address: 10.0.1.2\n      - address: 10.0.1.3\n      - address: 10.0.1.4\n" +
			"      - address: 10.0.1.5\n      - address: 10.0.1.6\n      - address: 10.0.1.7\n",
			[]string{"t.yaml:8: services[0].table_size: 7 is too small for 7 backends (must be greater than the number of backends; try 11)"}},
		{"duplicate service name", svc + "  - name: web\n    vip: 198.51.100.11\n",
			[]string{"t.yaml:8: services[1].name: duplicate service name: same as services[0]"}},
		{"bad service name", hdr + "services:\n  - name: my web\n    vip: 198.51.100.10\n",
			[]string{`t.yaml:6: services[0].name: "my web" is not a valid name (1..63 of a-z A-Z 0-9 . _ -)`}},
		{"duplicate vip port protocol", svc + "    port: 80\n  - name: web2\n    vip: 198.51.100.10\n    port: 80\n    protocol: tcp\n",
			[]string{"t.yaml:9: services[1]: duplicate service: same vip/port/protocol as services[0]"}},
		{"same vip, all ports and one port, or other protocol", svc + "  - name: web80\n    vip: 198.51.100.10\n    port: 80\n" +
			"  - name: web80u\n    vip: 198.51.100.10\n    port: 80\n    protocol: udp\n",
			nil},
		{"duplicate backend", svc + "    backends:\n      - address: 10.0.1.1\n      - address: 10.0.1.2\n      - address: 10.0.1.1\n",
			[]string{"t.yaml:11: services[0].backends[2].address: duplicate backend: same address as services[0].backends[0]"}},
		{"backend address missing", svc + "    backends:\n      - weight: 2\n",
			[]string{"t.yaml:9: services[0].backends[0].address: required"}},
		{"negative weight", svc + "    backends:\n      - address: 10.0.1.1\n        weight: -1\n",
			[]string{"t.yaml:10: services[0].backends[0].weight: must not be negative (accepted: 0..65535)"}},
		{"weight too big", svc + "    backends:\n      - address: 10.0.1.1\n        weight: 65536\n",
			[]string{"t.yaml:10: services[0].backends[0].weight: 65536 is out of range (accepted: 0..65535)"}},
		{"weight as string", svc + "    backends:\n      - address: 10.0.1.1\n        weight: \"1\"\n",
			[]string{`t.yaml:10: services[0].backends[0].weight: must be an integer, got string "1"`}},
		{"origins: a backend without one", svc + "    origins:\n      - {name: us, capacity: 200}\n    backends:\n      - address: 10.0.1.1\n",
			[]string{"t.yaml:11: services[0].backends[0].origin: required: the service has origins, every backend names one"}},
		{"origins: a backend names another", svc + "    origins:\n      - {name: us, capacity: 200}\n      - {name: eu, capacity: 100}\n" +
			"    backends:\n      - {address: 10.0.1.1, origin: asia}\n",
			[]string{`t.yaml:12: services[0].backends[0].origin: "asia" is not an origin of the service (origins: us, eu)`}},
		{"origins: none but a backend names one", svc + "    backends:\n      - {address: 10.0.1.1, origin: us}\n",
			[]string{`t.yaml:9: services[0].backends[0].origin: "us" is not an origin of the service (it has no origins)`}},
		{"origins: duplicate, zero capacity, no capacity", svc + "    origins:\n      - {name: us, capacity: 0}\n      - {name: us, capacity: 5}\n      - {name: eu}\n",
			[]string{"t.yaml:9: services[0].origins[0].capacity: 0 is out of range (accepted: 1..4294967295)",
				"t.yaml:10: services[0].origins[1].name: duplicate origin name: same as services[0].origins[0].name",
				"t.yaml:11: services[0].origins[2].capacity: required"}},
		{"origins: bad name", svc + "    origins:\n      - {name: us west, capacity: 5}\n",
			[]string{`t.yaml:9: services[0].origins[0].name: "us west" is not a valid name (1..63 of a-z A-Z 0-9 . _ -)`}},
		{"port as float", svc + "    port: 80.0\n",
			[]string{"t.yaml:8: services[0].port: must be an integer, got float 80.0"}},
		{"port as list", svc + "    port: [80]\n",
			[]string{"t.yaml:8: services[0].port: must be an integer, got list"}},
		{"huge integer", svc + "    port: 123456789012345678901234567890\n",
			[]string{"t.yaml:8: services[0].port: 123456789012345678901234567890 is out of range (accepted: 0..65535)"}},
		{"missing interfaces", "node:\n  name: lb1\n  address: 10.0.0.11\n",
			[]string{"t.yaml:2: node.interfaces: required"}},
		{"empty interfaces", "node:\n  name: lb1\n  interfaces: []\n  address: 10.0.0.11\n",
			[]string{"t.yaml:3: node.interfaces: must list at least one interface, e.g. [eth0]"}},
		{"interfaces not a list", "node:\n  name: lb1\n  interfaces: eth0\n  address: 10.0.0.11\n",
			[]string{`t.yaml:3: node.interfaces: must be a list, got string "eth0"`}},
		{"bad interface names", "node:\n  name: lb1\n  interfaces:\n    - eth0\n    - averyveryverylongname\n    - eth/0\n    - eth0\n  address: 10.0.0.11\n",
			[]string{
				`t.yaml:5: node.interfaces[1]: "averyveryverylongname" is not a valid interface name (1..15 bytes, no '/', ':', whitespace or control characters, not . or ..)`,
				`t.yaml:6: node.interfaces[2]: "eth/0" is not a valid interface name (1..15 bytes, no '/', ':', whitespace or control characters, not . or ..)`,
				"t.yaml:7: node.interfaces[3]: duplicate interface: same as node.interfaces[0]",
			}},
		{"bad xdp_mode", hdr + "  xdp_mode: fast\n",
			[]string{`t.yaml:5: node.xdp_mode: "fast" is not valid (accepted: native, generic, auto)`}},
		{"bad duration", svc + "    health:\n      interval: 1 second\n",
			[]string{`t.yaml:9: services[0].health.interval: "1 second" is not a duration (use e.g. 500ms, 9s, 1m30s)`}},
		{"duration without unit", hdr + "bgp:\n  asn: 65001\n  router_id: 10.0.0.11\n  peers:\n    - address: 10.0.0.1\n      asn: 65000\n      hold_time: 9\n",
			[]string{`t.yaml:11: bgp.peers[0].hold_time: "9" has no unit (did you mean 9s?)`}},
		{"address6 same family", hdr + "  address6: 10.0.0.12\n",
			[]string{"t.yaml:5: node.address6: 10.0.0.12 is IPv4 like node.address; address6 must be the other family (IPv6)"}},
		{"IPv6 VIP without IPv6 node address", hdr + "services:\n  - name: web6\n    vip: 2001:db8:100::10\n",
			[]string{"t.yaml:7: services[0].vip: IPv6 VIP needs an IPv6 node address (node.address6)"}},
		{"IPv4 VIP without IPv4 node address", "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 2001:db8::11\nservices:\n  - name: web\n    vip: 198.51.100.10\n",
			[]string{"t.yaml:7: services[0].vip: IPv4 VIP needs an IPv4 node address (node.address6)"}},
		{"path with kind tcp", svc + "    port: 80\n    health:\n      kind: tcp\n      path: /healthz\n",
			[]string{"t.yaml:11: services[0].health.path: only valid with kind http (kind is tcp)"}},
		{"path without slash", svc + "    port: 80\n    health:\n      kind: http\n      path: healthz\n",
			[]string{`t.yaml:11: services[0].health.path: "healthz" must start with '/'`}},
		{"health port needed", svc + "    health:\n      kind: http\n",
			[]string{"t.yaml:9: services[0].health.port: required when kind is http and the service port is 0 (all ports)"}},
		{"timeout longer than interval", svc + "    port: 80\n    health:\n      interval: 1s\n      timeout: 2s\n      rise: 0\n",
			[]string{
				"t.yaml:11: services[0].health.timeout: 2s is longer than the interval (1s)",
				"t.yaml:12: services[0].health.rise: 0 is out of range (accepted: 1..100)",
			}},
		{"interval too short", svc + "    port: 80\n    health:\n      interval: 50ms\n",
			[]string{"t.yaml:10: services[0].health.interval: 50ms is too short (at least 100ms)"}},
		{"bgp incomplete", hdr + "bgp:\n  peers: []\n",
			[]string{
				"t.yaml:6: bgp.asn: required",
				"t.yaml:6: bgp.router_id: required",
				"t.yaml:6: bgp.peers: must list at least one peer",
			}},
		{"bgp bad values", hdr + "bgp:\n  asn: 4294967295\n  router_id: 2001:db8::1\n  peers:\n" +
			"    - address: 10.0.0.1\n      asn: 65000\n      hold_time: 2s\n      password: " + strings.Repeat("x", 81) + "\n" +
			"    - address: 10.0.0.1\n      asn: 0\n      hold_time: 3500ms\n",
			[]string{
				"t.yaml:6: bgp.asn: 4294967295 is out of range (accepted: 1..4294967294)",
				"t.yaml:7: bgp.router_id: 2001:db8::1 is not a valid router id (a non-zero IPv4 address)",
				"t.yaml:11: bgp.peers[0].hold_time: 2s is out of range (accepted: 0s for no keepalives, or 3s..65535s)",
				"t.yaml:12: bgp.peers[0].password: too long: 81 bytes (TCP MD5 keys are at most 80 bytes)",
				"t.yaml:13: bgp.peers[1].address: duplicate peer: same address as bgp.peers[0]",
				"t.yaml:14: bgp.peers[1].asn: 0 is out of range (accepted: 1..4294967294)",
				"t.yaml:15: bgp.peers[1].hold_time: 3.5s is not a whole number of seconds",
			}},
		{"bgp peer options", hdr + "bgp:\n  asn: 65001\n  router_id: 10.0.0.11\n  drain_time: 6m\n  peers:\n" +
			"    - address: 10.0.0.1\n      asn: 65001\n      port: 0\n      ebgp_multihop: 2\n" +
			"    - address: 10.0.0.2\n      asn: 65000\n      ebgp_multihop: 256\n",
			[]string{
				"t.yaml:8: bgp.drain_time: 6m0s is out of range (accepted: 0s..5m0s)",
				"t.yaml:12: bgp.peers[0].port: 0 is out of range (accepted: 1..65535)",
				"t.yaml:13: bgp.peers[0].ebgp_multihop: only for eBGP peers: this peer has the node's own ASN 65001 (iBGP)",
				"t.yaml:16: bgp.peers[1].ebgp_multihop: 256 is out of range (accepted: 1..255)",
			}},
		{"bad api", hdr + "  api: localhost\n  flow_table_size: 100\n",
			[]string{
				`t.yaml:5: node.api: "localhost" is not host:port (e.g. 127.0.0.1:9100)`,
				"t.yaml:6: node.flow_table_size: 100 is out of range (accepted: 1024..16777216)",
			}},
		{"api port 0", hdr + "  api: \"[::1]:0\"\n",
			[]string{`t.yaml:5: node.api: "[::1]:0": port must be 1..65535`}},
		{"open api beyond loopback", hdr + "  api: 0.0.0.0:9100\n",
			[]string{`t.yaml:5: node.api: "0.0.0.0:9100" listens beyond loopback without a token (api_token_file or api_token) and without TLS (api_cert_file and api_key_file): anyone who reaches or watches the port could change the node; add them, listen on 127.0.0.1, or set api_insecure_remote: true to accept that`}},
		{"api on every address, token, no TLS", hdr + "  api: \":9100\"\n  api_token_file: /etc/manifold/api-token\n",
			[]string{`t.yaml:5: node.api: ":9100" listens beyond loopback without TLS (api_cert_file and api_key_file): anyone who reaches or watches the port could change the node; add them, listen on 127.0.0.1, or set api_insecure_remote: true to accept that`}},
		{"api by name, TLS, no token", hdr + "  api: lb1.example.net:9100\n  api_cert_file: a.crt\n  api_key_file: a.key\n",
			[]string{`t.yaml:5: node.api: "lb1.example.net:9100" listens beyond loopback without a token (api_token_file or api_token): anyone who reaches or watches the port could change the node; add them, listen on 127.0.0.1, or set api_insecure_remote: true to accept that`}},
		{"short api token", hdr + "  api_token: s3cret\n",
			[]string{"t.yaml:5: node.api_token: the token has 6 characters; it needs at least 16 (e.g. openssl rand -hex 16)"}},
		{"api certificate without its key", hdr + "  api_cert_file: a.crt\n  api_key_file: \"\"\n",
			[]string{"t.yaml:6: node.api_key_file: must not be empty (leave it out for no TLS)"}},
		{"api key without its certificate", hdr + "  api_key_file: a.key\n",
			[]string{"t.yaml:2: node.api_cert_file: required with node.api_key_file: TLS needs the certificate and its key"}},
		{"api hosts not names", hdr + "  api_hosts: [lb1.example.net, 10.0.0.11, \"evil/x\"]\n",
			[]string{`t.yaml:5: node.api_hosts[1]: "10.0.0.11" is not a host name (IP addresses and localhost need no listing)`,
				`t.yaml:5: node.api_hosts[2]: "evil/x" is not a host name (IP addresses and localhost need no listing)`}},
		{"api insecure remote not a boolean", hdr + "  api: 0.0.0.0:9100\n  api_insecure_remote: \"yes\"\n",
			[]string{`t.yaml:6: node.api_insecure_remote: must be true or false, got string "yes"`}},
		{"missing node", "services: []\n",
			[]string{"t.yaml:1: node: required"}},
		{"null node", "node:\n",
			[]string{"t.yaml:1: node: required"}},
		{"node not a mapping", "node: lb1\n",
			[]string{`t.yaml:1: node: must be a mapping, got string "lb1"`}},
		{"services not a list", hdr + "services:\n  web: {}\n",
			[]string{"t.yaml:6: services: must be a list, got mapping"}},
		{"null service", hdr + "services:\n  -\n  - name: web\n    vip: 198.51.100.10\n",
			[]string{"t.yaml:6: services[0]: must be a mapping, got null"}},
		{"syntax error", hdr + "services:\n  - name: web\n   vip: 198.51.100.10\n",
			[]string{"t.yaml:6: syntax error: did not find expected '-' indicator"}},
		{"syntax error: tab", "node:\n\tname: lb1\n",
			[]string{"t.yaml:2: syntax error: found character that cannot start any token"}},
		{"syntax error without line", hdr + "services: *nowhere\n",
			[]string{"t.yaml: syntax error: unknown anchor 'nowhere' referenced"}},
		{"empty file", "", []string{"t.yaml: empty file"}},
		{"only comments", "# nothing\n\n", []string{"t.yaml: empty file"}},
		{"two documents", hdr + "---\n" + hdr,
			[]string{"t.yaml:6: only one yaml document is allowed (found a second one)"}},
		{"trailing document marker is fine", hdr + "---\n", nil},
		{"top level list", "- node\n",
			[]string{"t.yaml:1: top level must be a mapping with keys node, bgp, fleet, kubernetes, tunnels, services, got list"}},
		{"merge of a scalar", hdr + "services:\n  - <<: 5\n    name: web\n    vip: 198.51.100.10\n",
			[]string{"t.yaml:6: services[0]: merge key (<<) must refer to a mapping or a list of mappings, got integer 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte(tc.yaml))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error:\n%v", err)
				}
				return
			}
			if c != nil {
				t.Errorf("got a config along with errors")
			}
			checkErrors(t, err, tc.want)
		})
	}
}

func checkErrors(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want:\n%s", strings.Join(want, "\n"))
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, not Errors: %v", err, err)
	}
	got := make([]string, len(errs))
	for i, e := range errs {
		got[i] = e.Error()
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err.Error() != strings.Join(want, "\n") {
		t.Errorf("Errors.Error() = %q", err.Error())
	}
}

// A file with many problems reports all of them, in line order.
func TestParseManyErrors(t *testing.T) {
	_, err := Load("testdata/invalid-many.yaml")
	const f = "testdata/invalid-many.yaml"
	checkErrors(t, err, []string{
		f + ":3: node.interfaces: must list at least one interface, e.g. [eth0]",
		f + `:4: node.xdp_mode: "fast" is not valid (accepted: native, generic, auto)`,
		f + ":6: node.colour: unknown field (accepted: name, interfaces, xdp_mode, site, address, address6, api, api_token, api_token_file, api_hosts, api_cert_file, api_key_file, api_insecure_remote, flow_table_size, max_services, max_backends, entropy_source, entropy_prefix4, entropy_prefix6, new_flow_rate, forward_transit)",
		f + ":10: services[0].table_size: 65536 is not prime (try 65537)",
		f + ":12: services[0].backends[0].address: 2001:db8::1 is IPv6 but the vip is IPv4 (backends must be of the vip's family)",
		f + ":14: services[0].backends[1].weight: must not be negative (accepted: 0..65535)",
		f + ":15: services[1].name: duplicate service name: same as services[0]",
		f + ":15: services[1]: duplicate service: same vip/port/protocol as services[0]",
		f + `:19: services[1].backends[0].weight: must be an integer, got string "1"`,
		f + ":21: services[1].health.port: required when kind is tcp and the service port is 0 (all ports)",
		f + `:22: services[1].health.interval: "1 second" is not a duration (use e.g. 500ms, 9s, 1m30s)`,
	})
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/nonexistent.yaml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want fs.ErrNotExist", err)
	}
	if want := "testdata/nonexistent.yaml: no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 {
		t.Errorf("err = %#v, want one Errors", err)
	}
}

func TestParseBackend(t *testing.T) {
	for _, tc := range []struct {
		file string
		want *BackendAgent
	}{
		{"backend.yaml", &BackendAgent{Interface: "eth0", Hook: HookXDP, VIPs: []netip.Addr{addr("198.51.100.10"), addr("2001:db8:100::10")}, GUEPort: 6081}},
		{"backend-minimal.yaml", &BackendAgent{Interface: "ens3", Hook: HookTC, VIPs: []netip.Addr{addr("198.51.100.10")}, GUEPort: 6080}},
		{"backend-kubernetes.yaml", &BackendAgent{Interface: "eth0", Hook: HookTC, GUEPort: 6080,
			Kubernetes: &Kubernetes{Kubeconfig: "/etc/manifold/kubeconfig", NodeName: "worker1"}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := LoadBackend(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseBackendErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"empty file", "", []string{"b.yaml: empty file"}},
		{"missing section", "node: {}\n", []string{
			"b.yaml:1: node: unknown field (accepted: backend, kubernetes)",
			"b.yaml:1: backend: required",
		}},
		{"missing fields", "backend:\n  gue_port: 6080\n", []string{
			"b.yaml:2: backend.interface: required",
			"b.yaml:2: backend.vips: required",
		}},
		{"unknown field", "backend:\n  interface: eth0\n  vips: [198.51.100.10]\n  port: 80\n", []string{
			"b.yaml:4: backend.port: unknown field (accepted: interface, hook, vips, gue_port)",
		}},
		{"unknown top-level field", "backend:\n  interface: eth0\n  vips: [198.51.100.10]\nbackends: {}\n", []string{
			"b.yaml:4: backends: unknown field (did you mean backend?)",
		}},
		{"bad values", "backend:\n  interface: \"eth 0\"\n  vips:\n    - 198.51.100.10\n    - 198.51.100.300\n    - 127.0.0.1\n    - 198.51.100.10\n  gue_port: 0\n", []string{
			`b.yaml:2: backend.interface: "eth 0" is not a valid interface name (1..15 bytes, no '/', ':', whitespace or control characters, not . or ..)`,
			`b.yaml:5: backend.vips[1]: "198.51.100.300" is not an IPv4 or IPv6 address`,
			"b.yaml:6: backend.vips[2]: 127.0.0.1 is a loopback address; a VIP must be reachable from the network",
			"b.yaml:7: backend.vips[3]: duplicate vip: same as backend.vips[0]",
			"b.yaml:8: backend.gue_port: 0 is out of range (accepted: 1..65535)",
		}},
		{"empty vips", "backend:\n  interface: eth0\n  vips: []\n", []string{
			"b.yaml:3: backend.vips: must list at least one VIP (or take them from a kubernetes section)",
		}},
		{"unknown hook", "backend:\n  interface: eth0\n  hook: XDP\n  vips: [198.51.100.10]\n", []string{
			`b.yaml:3: backend.hook: "XDP" is not valid (accepted: tc, xdp)`,
		}},
		{"gue_port as string", "backend:\n  interface: eth0\n  vips: [198.51.100.10]\n  gue_port: \"6080\"\n", []string{
			`b.yaml:4: backend.gue_port: must be an integer, got string "6080"`,
		}},
		{"syntax error", "backend:\n  interface: [eth0\n", []string{
			"b.yaml:2: syntax error: did not find expected ',' or ']'",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseBackend("b.yaml", []byte(tc.yaml))
			if a != nil {
				t.Errorf("got a config along with errors")
			}
			checkErrors(t, err, tc.want)
		})
	}
}

func TestNextPrime(t *testing.T) {
	if n := nextPrime(65536); n != 65537 {
		t.Errorf("nextPrime(65536) = %d", n)
	}
	if n := nextPrime(MaxTableSize - 1); n != MaxTableSize {
		t.Errorf("nextPrime(MaxTableSize-1) = %d", n)
	}
}

// A service without table_size gets the first step with 100 slots per configured
// backend, health aside; one that names its size keeps it.
func TestDefaultTableSize(t *testing.T) {
	prev := uint32(0)
	for _, size := range TableSizeSteps {
		if !maglev.IsPrime(uint64(size)) || size <= prev || size > MaxTableSize {
			t.Errorf("step %d: not a prime above %d within the bounds", size, prev)
		}
		prev = size
	}
	svcWith := func(backends int, extra string) string {
		var b strings.Builder
		b.WriteString(hdr + "services:\n  - name: s\n    vip: 198.51.100.10\n" + extra + "    backends:\n")
		for i := range backends {
			fmt.Fprintf(&b, "      - address: 10.0.%d.%d\n", i/250, i%250+1)
		}
		return b.String()
	}
	for _, c := range []struct {
		backends int
		extra    string
		want     uint32
	}{
		{0, "", 509}, {4, "", 509}, {5, "", 509}, {6, "", 1021}, {10, "", 1021}, {11, "", 4093}, {40, "", 4093},
		{41, "", 16381}, {164, "", 65537}, {700, "", 65537},
		{4, "    table_size: 65537\n", 65537}, {11, "    table_size: 251\n", 251},
	} {
		cfg, err := Parse("t.yaml", []byte(svcWith(c.backends, c.extra)))
		if err != nil {
			t.Fatalf("%d backends %q: %v", c.backends, c.extra, err)
		}
		if got := cfg.Services[0].TableSize; got != c.want {
			t.Errorf("%d backends %q: table_size %d, want %d", c.backends, c.extra, got, c.want)
		}
	}
}

// The files under testdata that are meant to be valid are.
func TestTestdata(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err1 := Parse(f, data)
		_, err2 := ParseBackend(f, data)
		invalid := strings.HasPrefix(filepath.Base(f), "invalid")
		if invalid != (err1 != nil && err2 != nil) {
			t.Errorf("%s: node: %v, backend: %v", f, err1, err2)
		}
	}
}

// Aliases let a small file stand for a huge one: the walk is bounded.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString(hdr + "services:\n  - name: s\n    vip: 198.51.100.10\n    backends: &b\n")
	for i := 0; i < 5000; i++ {
		b.WriteString("      - {address: 10.0.1.1}\n")
	}
	b.WriteString("  - &s {name: t, vip: 198.51.100.11, backends: *b}\n")
	for i := 0; i < 5000; i++ {
		b.WriteString("  - *s\n")
	}
	// Expanded, the file would be 25 million backends (minutes and gigabytes); refused,
	// it takes well under a second alone. The bound only tells the two apart: a run
	// under -race beside the other packages' tests on 2 cores once took 10 s.
	start := time.Now()
	_, err := Parse("t.yaml", []byte(b.String()))
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("took %v: the aliases were expanded", d)
	}
	if err == nil || !strings.Contains(err.Error(), "too many aliases") {
		t.Errorf("err = %.500v", err)
	}
}

// A large file without aliases is never cut short.
func TestLargeConfig(t *testing.T) {
	var b strings.Builder
	b.WriteString(hdr + "services:\n")
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, "  - name: s%d\n    vip: 198.51.%d.%d\n    table_size: 251\n    backends:\n", i, i/250, i%250+1)
		for j := 0; j < 200; j++ {
			fmt.Fprintf(&b, "      - address: 10.%d.%d.1\n", j, i%250)
		}
	}
	c, err := Parse("t.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("%.1000v", err)
	}
	if len(c.Services) != 500 || len(c.Services[499].Backends) != 200 {
		t.Errorf("got %d services", len(c.Services))
	}
}

func TestParseSteer(t *testing.T) {
	got, err := ParseSteer("s.yaml", []byte("fleet:\n  etcd:\n    endpoints: [http://10.0.0.5:2379]\nsteer:\n  name: s1\n  interval: 2s\n  metrics: 127.0.0.1:9101\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Steer{Fleet: Fleet{Endpoints: []string{"http://10.0.0.5:2379"}, Prefix: DefaultFleetPrefix}, Name: "s1",
		Interval: 2 * time.Second, Lease: DefaultSteerLease, Metrics: "127.0.0.1:9101"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, c := range []struct{ name, file, want string }{
		{"no fleet", "steer:\n  interval: 1s\n", "s.yaml:1: fleet: required"},
		{"lease not whole seconds", "fleet:\n  etcd:\n    endpoints: [http://10.0.0.5:2379]\nsteer:\n  lease: 2500ms\n",
			"s.yaml:5: steer.lease: 2.5s is not whole seconds (etcd's leases are)"},
		{"metrics not host:port", "fleet:\n  etcd:\n    endpoints: [http://10.0.0.5:2379]\nsteer:\n  metrics: 9101\n",
			`s.yaml:5: steer.metrics: "9101" is not host:port (e.g. 127.0.0.1:9100)`},
		{"services in the file", "fleet:\n  etcd:\n    endpoints: [http://10.0.0.5:2379]\nservices: []\n",
			"s.yaml:4: services: unknown field (accepted: fleet, steer)"},
	} {
		_, err := ParseSteer("s.yaml", []byte(c.file))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v, want %s", c.name, err, c.want)
		}
	}
}

// An etcd login (username, password_file) over an http:// endpoint would send the
// password in clear: refused, naming the endpoint; over https:// it is accepted. The
// node's file and the steering controller's validate the fleet section alike.
func TestEtcdLoginNeedsHTTPS(t *testing.T) {
	fleet := func(endpoints string) string {
		return "fleet:\n  etcd:\n    endpoints: " + endpoints + "\n    username: manifold\n    password_file: /etc/manifold/etcd.pass\n"
	}
	node := "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\n"
	for _, c := range []struct{ name, endpoints, want string }{
		{"http", "[http://10.0.0.5:2379]",
			`fleet.etcd.endpoints[0]: "http://10.0.0.5:2379" would carry the password of fleet.etcd.username in clear: a login needs https:// endpoints (with ca_file)`},
		{"one of two http", "[https://10.0.0.5:2379, http://10.0.0.6:2379]", `fleet.etcd.endpoints[1]: "http://10.0.0.6:2379" would carry`},
		{"https", "[https://10.0.0.5:2379, https://10.0.0.6:2379]", ""},
	} {
		_, nerr := Parse("n.yaml", []byte(node+fleet(c.endpoints)))
		_, serr := ParseSteer("s.yaml", []byte(fleet(c.endpoints)))
		for file, err := range map[string]error{"node": nerr, "steer": serr} {
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s, %s file: %v, want it accepted", c.name, file, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s, %s file: %v, want %s", c.name, file, err, c.want)
			}
		}
	}
}

// A relative path in a config file is relative to the file's directory (the systemd
// units load a config and its secrets as credentials into one directory); an absolute
// one stays as it is.
func TestRelativeFilesAreBesideTheConfig(t *testing.T) {
	s, err := ParseSteer("/run/credentials/manifold-steer.service/steer.yaml", []byte(
		"fleet:\n  etcd:\n    endpoints: [https://10.0.0.5:2379]\n    cert_file: etcd-client.crt\n    key_file: /etc/manifold/etcd-client.key\n"+
			"    ca_file: ca/etcd-ca.crt\n    username: steer\n    password_file: etcd.pass\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := "/run/credentials/manifold-steer.service/"
	if f := s.Fleet; f.CertFile != dir+"etcd-client.crt" || f.KeyFile != "/etc/manifold/etcd-client.key" || f.CAFile != dir+"ca/etcd-ca.crt" || f.PasswordFile != dir+"etcd.pass" {
		t.Errorf("fleet files %+v, want the relative ones under %s", f, dir)
	}
}
