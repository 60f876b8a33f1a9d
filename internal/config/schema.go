package config

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The schema: one row per key of a config file. The parser takes its accepted keys,
// integer ranges and enum values from here; the tests hold the defaults (defaults.go),
// the duration bounds (validate.go), the API's service schema (api/openapi.json and
// api.ServiceSpec) and the config reference in docs/configuration.md to it, and
// regenerate that reference from it (go test ./internal/config -run TestConfigDoc -update).

// FieldType is the kind of value a key takes.
type FieldType string

const (
	TypeString    FieldType = "string"
	TypeInt       FieldType = "integer"
	TypeBool      FieldType = "boolean"
	TypeDuration  FieldType = "duration" // a Go duration: 500ms, 9s, 1m30s
	TypeAddress   FieldType = "address"  // an IPv4 or IPv6 address
	TypePrefix    FieldType = "prefix"   // an IPv4 or IPv6 prefix in CIDR notation
	TypeEnum      FieldType = "enum"     // one of Field.Enum
	TypeStrings   FieldType = "list of strings"
	TypeAddresses FieldType = "list of addresses"
	TypePrefixes  FieldType = "list of prefixes"
	TypeMapping   FieldType = "mapping" // its keys are the rows below it
	TypeList      FieldType = "list"    // of mappings, whose keys are the rows below it
)

// Range is the inclusive range of an integer, or of a duration in nanoseconds.
type Range struct{ Min, Max int64 }

// Field is one key of a config file.
type Field struct {
	// Path names the key from the top of the file; "[]" marks the items of a list:
	// services[].health.interval.
	Path     string
	Type     FieldType
	Required bool   // when the mapping holding it is present
	Default  string // as a file would write it; "" when absent means nothing or depends on other keys (Doc says)
	// DefaultIf: Default applies only with some values of other keys (Doc says which),
	// so the API's document, which cannot say so, leaves it to the description.
	DefaultIf bool
	Enum      []string // the values of a TypeEnum
	Range     *Range   // the accepted values of a TypeInt or TypeDuration; nil: any
	OrZero    bool     // 0 is accepted besides Range (a duration that turns something off)
	Example   string   // the value the config reference's example gives
	Doc       string   // one line for users
	// File is what the file a TypeString field names holds, for `manifold validate`,
	// which checks that it is there and readable (Validate); NoFile: not a file.
	File FileKind
}

// FileKind is what a file named by the config holds.
type FileKind int

const (
	NoFile          FileKind = iota
	FileAny                  // read whole at start: a token, a password, a key of its own format, YAML
	FileCertificate          // PEM certificates: a chain, or the CAs to trust
	FilePrivateKey           // a PEM private key
)

// NodeSchema is the file of `manifold run`, in the order docs/configuration.md shows it.
var NodeSchema = []Field{
	{Path: "node", Type: TypeMapping, Required: true},
	{Path: "node.name", Type: TypeString, Required: true, Example: "lb1", Doc: "[a-zA-Z0-9._-]{1,253} (a Kubernetes Node's name fits)"},
	{Path: "node.interfaces", Type: TypeStrings, Required: true, Example: "[eth0]", Doc: "XDP attaches to each"},
	{Path: "node.xdp_mode", Type: TypeEnum, Enum: enum(XDPNative, XDPGeneric, XDPAuto), Default: def(DefaultXDPMode), Example: "auto",
		Doc: "auto: native, else generic with a warning"},
	{Path: "node.site", Type: TypeString, Example: "ams1", Doc: "default: the node's name; nodes of one site serve one edge location"},
	{Path: "node.address", Type: TypeAddress, Required: true, Example: "10.0.0.11", Doc: "this node's address: outer source of encapsulation"},
	{Path: "node.address6", Type: TypeAddress, Example: "fd00::11", Doc: "optional; an address of the other family, for services of that family"},
	{Path: "node.api", Type: TypeString, Default: def(DefaultAPI), Example: DefaultAPI, Doc: "the node API"},
	{Path: "node.api_token", Type: TypeString, Example: `""`,
		Doc: `default none; API writes need "Authorization: Bearer <token>" (reads too, off loopback); 16+ characters`},
	{Path: "node.api_token_file", Type: TypeString, File: FileAny, Example: `""`, Doc: "or: a file holding the token (not both); read at start"},
	{Path: "node.api_hosts", Type: TypeStrings, Example: "[lb1.example.net]",
		Doc: "host names the API answers to besides IP addresses and localhost (and its certificate's)"},
	{Path: "node.api_cert_file", Type: TypeString, File: FileCertificate, Example: `""`, Doc: "with api_key_file: serve the API over HTTPS (PEM)"},
	{Path: "node.api_key_file", Type: TypeString, File: FilePrivateKey, Example: `""`, Doc: "the certificate's private key (PEM)"},
	{Path: "node.api_insecure_remote", Type: TypeBool, Default: def(DefaultAPIInsecureRemote), Example: "false",
		Doc: "true: allow an api beyond loopback without a token or TLS"},
	{Path: "node.flow_table_size", Type: TypeInt, Default: def(DefaultFlowTableSize), Range: &Range{MinFlowTableSize, MaxFlowTableSize},
		Example: "262144", Doc: "entries of the flow table, and of the NAT tables up to 262144"},
	{Path: "node.max_services", Type: TypeInt, Default: def(DefaultMaxServices), Range: &Range{MinMaxServices, MaxMaxServices},
		Example: "16384", Doc: "services the node holds, plus one; each costs about 24 bytes per CPU and 150 bytes besides"},
	{Path: "node.max_backends", Type: TypeInt, Default: def(DefaultMaxBackends), Range: &Range{MinMaxBackends, MaxMaxBackends},
		Example: "65536", Doc: "(service, backend) pairs the node holds, plus one; each costs about 56 bytes per CPU and 32 bytes besides"},
	{Path: "node.entropy_source", Type: TypeBool, Default: def(DefaultEntropySource), Example: "false",
		Doc: "true: outer sources from the prefixes below, by flow hash"},
	{Path: "node.entropy_prefix4", Type: TypePrefix, Example: "172.16.0.0/16",
		Doc: fmt.Sprintf("a /%d; required with entropy_source when the node has an IPv4 address", EntropyPrefix4Bits)},
	{Path: "node.entropy_prefix6", Type: TypePrefix, Example: "fd00:e::/64",
		Doc: fmt.Sprintf("a /%d; required with entropy_source when the node has an IPv6 address", EntropyPrefix6Bits)},
	{Path: "node.new_flow_rate", Type: TypeInt, Default: def(DefaultNewFlowRate), Range: &Range{0, math.MaxUint32}, Example: "16384",
		Doc: "new flows per second the flow table takes (0: no bound), see Packets"},
	{Path: "node.forward_transit", Type: TypeBool, Default: def(DefaultForwardTransit), Example: "false",
		Doc: "true: route packets for neither a VIP nor the node in XDP (router mode), see Transit forwarding"},

	{Path: "bgp", Type: TypeMapping, Doc: "optional; without it the node forwards and routing is left to the operator"},
	{Path: "bgp.asn", Type: TypeInt, Required: true, Range: &Range{MinASN, MaxASN}, Example: "65001", Doc: "the node's AS"},
	{Path: "bgp.router_id", Type: TypeAddress, Required: true, Example: "10.0.0.11", Doc: "an IPv4 address"},
	{Path: "bgp.peers", Type: TypeList, Required: true, Doc: "at least one"},
	{Path: "bgp.peers[].address", Type: TypeAddress, Required: true, Example: "10.0.0.1", Doc: "IPv4 or IPv6, unique"},
	{Path: "bgp.peers[].asn", Type: TypeInt, Required: true, Range: &Range{MinASN, MaxASN}, Example: "65000",
		Doc: "the node's own ASN makes it iBGP, any other eBGP"},
	{Path: "bgp.peers[].port", Type: TypeInt, Default: def(DefaultPeerPort), Range: &Range{1, math.MaxUint16}, Example: "179",
		Doc: "the peer's TCP port"},
	{Path: "bgp.peers[].hold_time", Type: TypeDuration, Default: def(DefaultHoldTime), Range: durations(MinHoldTime, MaxHoldTime), OrZero: true,
		Example: "9s", Doc: "0s: no keepalives; whole seconds; keepalive = hold/3"},
	{Path: "bgp.peers[].password", Type: TypeString, Example: `""`,
		Doc: fmt.Sprintf("TCP MD5 key (RFC 2385), at most %d bytes; never logged", MaxPasswordLen)},
	{Path: "bgp.peers[].ebgp_multihop", Type: TypeInt, Range: &Range{1, math.MaxUint8}, Example: "2",
		Doc: "eBGP only: TTL for a peer that is not directly connected"},
	{Path: "bgp.peers[].bfd", Type: TypeMapping, Doc: "optional; BFD (RFC 5880, single hop, asynchronous) beside the session"},
	{Path: "bgp.peers[].bfd.min_rx", Type: TypeDuration, Default: def(DefaultBFDInterval), Range: durations(MinBFDInterval, MaxBFDInterval),
		Example: "100ms", Doc: "the slowest rate this node accepts BFD packets at"},
	{Path: "bgp.peers[].bfd.min_tx", Type: TypeDuration, Default: def(DefaultBFDInterval), Range: durations(MinBFDInterval, MaxBFDInterval),
		Example: "100ms", Doc: "the rate this node wants to send at"},
	{Path: "bgp.peers[].bfd.multiplier", Type: TypeInt, Default: def(DefaultBFDMultiplier), Range: &Range{1, math.MaxUint8},
		Example: "3", Doc: "packets missed before the session is down: detection in multiplier × interval"},
	{Path: "bgp.communities", Type: TypeStrings, Example: `["65001:100"]`,
		Doc: "standard communities on every VIP of the node: ASN:value, or no-export, no-advertise, no-peer, blackhole"},
	{Path: "bgp.large_communities", Type: TypeStrings, Example: `["65001:1:2"]`,
		Doc: "large communities on every VIP of the node: global:local1:local2"},
	{Path: "bgp.drain_time", Type: TypeDuration, Default: def(DefaultDrainTime), Range: durations(0, MaxDrainTime), Example: "2s",
		Doc: "on SIGTERM, time between withdrawing and detaching"},

	{Path: "fleet", Type: TypeMapping, Doc: "optional; services come from the fleet store (etcd), not from this file"},
	{Path: "fleet.etcd", Type: TypeMapping, Required: true},
	{Path: "fleet.etcd.endpoints", Type: TypeStrings, Required: true, Example: "[http://10.0.0.5:2379]",
		Doc: "client URLs of the etcd members (http:// or https://)"},
	{Path: "fleet.etcd.cert_file", Type: TypeString, File: FileCertificate, Example: `""`, Doc: "TLS client certificate (with key_file)"},
	{Path: "fleet.etcd.key_file", Type: TypeString, File: FilePrivateKey, Example: `""`, Doc: "its key"},
	{Path: "fleet.etcd.ca_file", Type: TypeString, File: FileCertificate, Example: `""`, Doc: "the CA of the members' certificates (default: the system's)"},
	{Path: "fleet.etcd.username", Type: TypeString, Example: `""`, Doc: "with password_file, when etcd has authentication on; https:// endpoints only"},
	{Path: "fleet.etcd.password_file", Type: TypeString, File: FileAny, Example: `""`, Doc: "a file holding the password; read at start"},
	{Path: "fleet.prefix", Type: TypeString, Default: DefaultFleetPrefix, Example: DefaultFleetPrefix,
		Doc: "the fleet's keys; one etcd serves several fleets under other prefixes"},

	{Path: "kubernetes", Type: TypeMapping,
		Doc: "optional; services also come from the Kubernetes API: one per port of each Service of type LoadBalancer with an address"},
	{Path: "kubernetes.kubeconfig", Type: TypeString, File: FileAny, Example: `""`, Doc: "default: in the cluster (the Pod's ServiceAccount)"},
	{Path: "kubernetes.default_class", Type: TypeBool, Default: def(DefaultKubeDefaultClass), Example: "false",
		Doc: "also the Services with no spec.loadBalancerClass (as kube-controller --default-class)"},
	{Path: "tunnels", Type: TypeMapping, Doc: "optional; the node is an edge of reverse tunnels (see Tunnels)"},
	{Path: "tunnels.listen", Type: TypeString, Default: def(DefaultTunnelListen), Example: DefaultTunnelListen,
		Doc: "host:port where connectors dial in, UDP (QUIC) and TCP (TLS 1.3 over TCP), the same port number"},
	{Path: "tunnels.cert_file", Type: TypeString, File: FileCertificate, Required: true, Example: "/etc/manifold/edge.crt", Doc: "the edge's certificate chain (PEM)"},
	{Path: "tunnels.key_file", Type: TypeString, File: FilePrivateKey, Required: true, Example: "/etc/manifold/edge.key", Doc: "its key (PEM)"},
	{Path: "tunnels.tokens_file", Type: TypeString, File: FileAny, Required: true, Example: "/etc/manifold/tunnel-tokens.yaml",
		Doc: "a YAML list of {token, services, origins}: what each connector may serve, and for which origins (a token, or sha256: and its hash); read at start"},
	{Path: "tunnels.relay_token_file", Type: TypeString, File: FileAny, Example: "/etc/manifold/relay-token",
		Doc: "the fleet's edges' shared secret: they relay clients to edges that have their service's connector (unused without a fleet)"},
	{Path: "tunnels.ca_file", Type: TypeString, File: FileCertificate, Example: "/etc/manifold/edge-ca.crt",
		Doc: "with relay_token_file: the CA of the other edges' certificates (a relay sends its token only to them)"},
	{Path: "tunnels.idle_timeout", Type: TypeDuration, Default: def(DefaultTunnelIdleTimeout), Range: durations(MinTunnelIdleTimeout, MaxTunnelIdleTimeout),
		OrZero: true, Example: "340s", Doc: "a client connection that carries no byte either way for this long is closed, its stream given back (0s: never)"},
	{Path: "tunnels.max_conns_per_source", Type: TypeInt, Default: def(DefaultTunnelMaxConnsPerSource), Range: &Range{0, MaxTunnelConns},
		Example: "256", Doc: "connections one client address holds open to one tunnel service; past it a new one is closed at once (0: no bound)"},
	{Path: "tunnels.max_pending_hellos", Type: TypeInt, Default: def(DefaultTunnelMaxPendingHellos), Range: &Range{1, MaxTunnelConns},
		Example: "128", Doc: "connectors' connections that have not said hello yet, at once; past it a new one is refused at its first packet"},

	{Path: "services", Type: TypeList},
	{Path: "services[].name", Type: TypeString, Required: true, Example: "web", Doc: "[a-zA-Z0-9._-]{1,63}, unique"},
	{Path: "services[].vip", Type: TypeAddress, Required: true, Example: "198.51.100.10", Doc: "IPv4 or IPv6"},
	{Path: "services[].port", Type: TypeInt, Default: def(DefaultPort), Range: &Range{0, math.MaxUint16}, Example: "80",
		Doc: "0 = every port of the VIP"},
	{Path: "services[].protocol", Type: TypeEnum, Enum: enum(TCP, UDP), Default: def(DefaultProtocol), Example: "tcp"},
	{Path: "services[].forwarding", Type: TypeEnum, Enum: enum(IPIP, GUE, NAT, Tunnel), Default: def(DefaultForwarding), Example: "ipip",
		Doc: "ipip, gue: DSR to backends that decapsulate; nat: full NAT, see NAT mode; tunnel: served by the node's tunnel edge (tcp, one port, no backends)"},
	{Path: "services[].gue_port", Type: TypeInt, Default: def(DefaultGUEPort), Range: &Range{1, math.MaxUint16}, Example: "6080",
		Doc: "UDP destination port of GUE packets (the backends' backend.gue_port)"},
	{Path: "services[].backend_port", Type: TypeInt, Range: &Range{1, math.MaxUint16}, Example: "8080",
		Doc: "nat only: the backends' port; default: the service's port (port 0: the client's)"},
	{Path: "services[].proxy_protocol", Type: TypeEnum, Enum: enum(ProxyV1, ProxyV2), Example: "v2",
		Doc: "tunnel services, and the origins reached by tunnel of a routed service: the connector opens every connection to the origin with a PROXY protocol header of this version, the client's address and port in it (see Tunnels, Client addresses); default none"},
	{Path: "services[].scheduler", Type: TypeEnum, Enum: enum(Maglev, MaglevSource), Default: def(DefaultScheduler), Example: "maglev",
		Doc: "maglev hashes the 5-tuple, maglev-source the client address only (affinity)"},
	{Path: "services[].table_size", Type: TypeInt, Range: &Range{MinTableSize, MaxTableSize}, Example: "65537",
		Doc: "a prime, larger than the number of backends; default: the first of 509, 1021, 4093, 16381, 65537 with 100 slots per backend"},
	{Path: "services[].origins", Type: TypeList, Doc: "optional; the origins (data centres) of the backends, for global steering; on a tunnel service, the origins its connectors name (origin: in the connector file; a connector naming none is refused)"},
	{Path: "services[].origins[].name", Type: TypeString, Required: true, Example: "us-west", Doc: "[a-zA-Z0-9._-]{1,63}, unique within the service"},
	{Path: "services[].origins[].capacity", Type: TypeInt, Required: true, Range: &Range{1, math.MaxUint32}, Example: "200",
		Doc: "new flows per second the origin takes, for the whole fleet"},
	{Path: "services[].origins[].tunnel", Type: TypeBool, Default: def(false), Example: "true",
		Doc: "ipip, gue, nat services: the origin has no backends; connectors of the node's tunnel edge serve it (origin: in the connector file), and its share of the flows passes to the node's stack, where the edge ends them (see Tunnels, Mixed services). Tcp and one port only"},
	{Path: "services[].origins[].weight", Type: TypeInt, Default: def(DefaultWeight), Range: &Range{0, MaxWeight}, Example: "1",
		Doc: "tunnel origins: the origin's weight against the backends' own while steering gives no shares (then its share decides); 0 = no new flows"},
	{Path: "services[].backends", Type: TypeList},
	{Path: "services[].backends[].address", Type: TypeAddress, Required: true, Example: "10.0.1.1",
		Doc: "same family as the vip, unique within the service"},
	{Path: "services[].backends[].weight", Type: TypeInt, Default: def(DefaultWeight), Range: &Range{0, MaxWeight}, Example: "1",
		Doc: "0 = draining: keeps its flows, gets no new ones"},
	{Path: "services[].backends[].origin", Type: TypeString, Example: "us-west",
		Doc: "the origin it belongs to; required when the service has origins"},
	{Path: "services[].health", Type: TypeMapping, Doc: "optional (kind none by default: every backend is up)"},
	{Path: "services[].health.kind", Type: TypeEnum, Enum: enum(HealthTCP, HealthHTTP, HealthNone), Default: def(DefaultHealthKind), Example: "tcp"},
	{Path: "services[].health.port", Type: TypeInt, Range: &Range{1, math.MaxUint16}, Example: "80",
		Doc: "default: the service port (required when the service port is 0)"},
	{Path: "services[].health.path", Type: TypeString, Default: DefaultHealthPath, DefaultIf: true, Example: "/healthz", Doc: "http only"},
	{Path: "services[].health.interval", Type: TypeDuration, Default: def(DefaultHealthInterval), Range: durations(MinHealthInterval, math.MaxInt64),
		Example: "1s"},
	{Path: "services[].health.timeout", Type: TypeDuration, Default: def(DefaultHealthTimeout), DefaultIf: true, Example: "500ms",
		Doc: "or the interval when shorter; more than 0, at most the interval"},
	{Path: "services[].health.rise", Type: TypeInt, Default: def(DefaultHealthRise), Range: &Range{1, MaxRiseFall}, Example: "2",
		Doc: "consecutive successes to come up"},
	{Path: "services[].health.fall", Type: TypeInt, Default: def(DefaultHealthFall), Range: &Range{1, MaxRiseFall}, Example: "2",
		Doc: "consecutive failures to go down"},
	{Path: "services[].bgp", Type: TypeMapping, Doc: "optional; what the service adds to its VIP's announcement (see Communities and scoping)"},
	{Path: "services[].bgp.communities", Type: TypeStrings, Example: `["65001:200"]`, Doc: "added to bgp.communities"},
	{Path: "services[].bgp.large_communities", Type: TypeStrings, Example: `["65001:1:3"]`, Doc: "added to bgp.large_communities"},
	{Path: "services[].bgp.med", Type: TypeInt, Range: &Range{0, math.MaxUint32}, Example: "50", Doc: "MULTI_EXIT_DISC; default none"},
	{Path: "services[].bgp.prepend", Type: TypeInt, Range: &Range{0, MaxPrepend}, Example: "2",
		Doc: "extra copies of the node's AS on eBGP sessions (a backup site)"},
}

// BackendSchema is the file of `manifold backend`.
var BackendSchema = []Field{
	{Path: "backend", Type: TypeMapping, Required: true},
	{Path: "backend.interface", Type: TypeString, Required: true, Example: "eth0", Doc: "decapsulation attaches here"},
	{Path: "backend.hook", Type: TypeEnum, Enum: enum(HookTC, HookXDP), Default: def(DefaultDecapHook), Example: "tc",
		Doc: "tc: tc ingress; xdp: native XDP, cheaper, refused by a driver without XDP or an interface with an XDP program"},
	{Path: "backend.vips", Type: TypeAddresses, Required: true, Example: "[198.51.100.10, 2001:db8:100::10]",
		Doc: "added to lo, the only inner destinations decapsulated; required without a kubernetes section"},
	{Path: "backend.gue_port", Type: TypeInt, Default: def(DefaultGUEPort), Range: &Range{1, math.MaxUint16}, Example: "6080",
		Doc: "UDP port of the GUE packets decapsulated (services[].gue_port)"},
	{Path: "kubernetes", Type: TypeMapping,
		Doc: "optional; VIPs also come from the Kubernetes API: the addresses of the Services this host's Node is a backend of"},
	{Path: "kubernetes.kubeconfig", Type: TypeString, File: FileAny, Example: `""`, Doc: "default: in the cluster (the Pod's ServiceAccount)"},
	{Path: "kubernetes.node_name", Type: TypeString, Example: "worker1", Doc: "this host's Node (default: the host's name)"},
	{Path: "kubernetes.default_class", Type: TypeBool, Default: def(DefaultKubeDefaultClass), Example: "false",
		Doc: "also the Services with no spec.loadBalancerClass, as the nodes' kubernetes.default_class"},
}

// SteerSchema is the file of `manifold steer --config`: the fleet's store, as a node
// of the fleet reaches it, and the controller's own settings.
var SteerSchema = append([]Field{
	{Path: "fleet", Type: TypeMapping, Required: true, Doc: "the fleet store, as in the nodes' files"},
}, append(fleetRows(), []Field{
	{Path: "steer", Type: TypeMapping, Doc: "optional"},
	{Path: "steer.name", Type: TypeString, Example: "steer1", Doc: "this controller in the election; default: the host's name"},
	{Path: "steer.interval", Type: TypeDuration, Default: def(DefaultSteerInterval), Range: durations(MinSteerInterval, MaxSteerInterval),
		Example: "1s", Doc: "one round: read the nodes' records, decide, write the shares"},
	{Path: "steer.lease", Type: TypeDuration, Default: def(DefaultSteerLease), Range: durations(MinSteerLease, MaxSteerLease),
		Example: "5s", Doc: "the leader's lease: a standby takes over this long after the leader is gone (whole seconds)"},
	{Path: "steer.metrics", Type: TypeString, Example: "127.0.0.1:9101",
		Doc: "host:port of the controller's Prometheus metrics (GET /metrics); none when absent"},
}...)...)

// LinkSchema is the file of `manifold link --config`: one site-to-site link, seen from
// this side (the other side's file swaps local and remote and the keys).
var LinkSchema = []Field{
	{Path: "link", Type: TypeMapping, Required: true},
	{Path: "link.name", Type: TypeString, Required: true, Example: "dc1-dc2", Doc: "[a-zA-Z0-9._-]{1,63}; names the link in its status and metrics"},
	{Path: "link.local", Type: TypeMapping, Required: true, Doc: "this site"},
	{Path: "link.local.address", Type: TypeAddress, Required: true, Example: "192.0.2.1", Doc: "the outer address the tunnels leave from"},
	{Path: "link.local.prefixes", Type: TypePrefixes, Required: true, Example: "[10.1.0.0/16]", Doc: "this site's networks, reached by the other side"},
	{Path: "link.remote", Type: TypeMapping, Required: true, Doc: "the other site"},
	{Path: "link.remote.address", Type: TypeAddress, Required: true, Example: "192.0.2.2", Doc: "the other gateway's outer address, same family"},
	{Path: "link.remote.prefixes", Type: TypePrefixes, Required: true, Example: "[10.2.0.0/16]",
		Doc: "routed over the tunnels; no overlap with local prefixes or the host's routes"},
	{Path: "link.tunnels", Type: TypeInt, Range: &Range{1, MaxLinkTunnels}, Example: "4",
		Doc: "default: the number of CPUs; the same on both sides"},
	{Path: "link.port", Type: TypeInt, Default: def(DefaultLinkPort), Range: &Range{1, MaxLinkPort}, Example: "51820",
		Doc: "tunnel i uses UDP port+i at both ends: N flows to the network"},
	{Path: "link.source_ports", Type: TypeEnum, Enum: enum(LinkSpread, LinkFixed), Default: def(DefaultLinkSourcePorts), Example: "spread",
		Doc: "spread: each tunnel sends from a port that this host's layer-3+4 multipath route to the peer hashes onto a path of its own (it still receives on port+i); fixed: from port+i, and the peer is followed wherever its packets come from (a peer behind a NAT that rewrites ports needs fixed on the other side)"},
	{Path: "link.private_key_file", Type: TypeString, File: FileAny, Required: true, Example: "/etc/manifold/dc1.key",
		Doc: "this side's WireGuard private key (wg genkey); read at start"},
	{Path: "link.peer_public_key", Type: TypeString, Required: true, Example: "ThxgqOncpcA21h5JzqGQLqMx880sOzNM5Hg8TQMpNkk=",
		Doc: "the other side's public key (wg pubkey), base64"},
	{Path: "link.mtu", Type: TypeInt, Default: def(DefaultLinkMTU), Range: &Range{MinLinkMTU, MaxLinkMTU}, Example: "1420",
		Doc: "of each tunnel device: the path MTU less 80 (IPv6 outer) or 60 (IPv4)"},
	{Path: "link.inner_prefix", Type: TypePrefix, Default: DefaultLinkInnerPrefix, Example: DefaultLinkInnerPrefix,
		Doc: "IPv4, the same on both sides: tunnel i's ends are its addresses 2i and 2i+1 (2i on the side of the lower outer address)"},
	{Path: "link.devices", Type: TypeString, Default: DefaultLinkDevices, Example: DefaultLinkDevices,
		Doc: "stem of the tunnels' TUN devices: mlink0, mlink1, … by default"},
	{Path: "link.api", Type: TypeString, Default: DefaultLinkAPI, Example: DefaultLinkAPI, Doc: "the link's status API and /metrics"},
	{Path: "link.connect_timeout", Type: TypeDuration, Default: def(DefaultLinkConnectTimeout), Range: durations(MinLinkConnectTimeout, MaxLinkConnectTimeout),
		Example: "30s", Doc: "at start, how long to wait for a first tunnel to answer before giving up (nothing is installed until one does)"},
	{Path: "link.health", Type: TypeMapping, Doc: "optional: the probes through each tunnel"},
	{Path: "link.health.interval", Type: TypeDuration, Default: def(DefaultLinkProbeInterval), Range: durations(MinLinkProbeInterval, MaxLinkProbeInterval),
		Example: "100ms", Doc: "one probe per tunnel per interval"},
	{Path: "link.health.rise", Type: TypeInt, Default: def(DefaultLinkRise), Range: &Range{1, MaxRiseFall}, Example: "3",
		Doc: "answers, none lost between, for a tunnel to join the route"},
	{Path: "link.health.fall", Type: TypeInt, Default: def(DefaultLinkFall), Range: &Range{1, MaxRiseFall}, Example: "3",
		Doc: "intervals without an answer for a tunnel to leave the route; a probe may be answered until fall later ones have left"},
}

// fleetRows are the node schema's rows below fleet.
func fleetRows() []Field {
	var out []Field
	for _, f := range NodeSchema {
		if strings.HasPrefix(f.Path, "fleet.") {
			out = append(out, f)
		}
	}
	return out
}

func enum[T ~string](values ...T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func durations(lo, hi time.Duration) *Range { return &Range{int64(lo), int64(hi)} }

// def writes a default as a file would.
func def(v any) string {
	if d, ok := v.(time.Duration); ok {
		return formatDuration(d)
	}
	return fmt.Sprint(v)
}

// formatDuration writes a duration as people write them in a config file: 5m, not
// 5m0s; 65535s, not 18h12m15s.
func formatDuration(d time.Duration) string {
	switch {
	case d != 0 && d%time.Minute == 0 && d < time.Hour:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// fields indexes both schemas by path.
var fields = func() map[string]*Field {
	m := map[string]*Field{}
	for _, s := range [][]Field{NodeSchema, BackendSchema, SteerSchema, LinkSchema} {
		for i := range s {
			// the steer file's fleet rows are the node's; the node's own come first
			if m[s[i].Path] == nil {
				m[s[i].Path] = &s[i]
			}
		}
	}
	return m
}()

// fieldAt returns the row of a field path of a file (services[2].port is the row
// services[].port). The walkers ask only for their own keys, so a miss is a bug.
func fieldAt(path string) *Field {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		b.WriteByte(path[i])
		if path[i] == '[' {
			for i+1 < len(path) && path[i+1] != ']' {
				i++
			}
		}
	}
	f, ok := fields[b.String()]
	if !ok {
		panic("config: no schema row for " + path)
	}
	return f
}

// keysOf lists the keys of the mapping at parent ("" for the top of the file;
// "services[]" for a service), in schema order.
func keysOf(schema []Field, parent string) []string {
	var keys []string
	for _, f := range schema {
		if parentPath(f.Path) == parent {
			keys = append(keys, f.key())
		}
	}
	return keys
}

// key is the field's own name: interval for services[].health.interval.
func (f *Field) key() string {
	k := f.Path[strings.LastIndexByte(f.Path, '.')+1:]
	return strings.TrimSuffix(k, "[]")
}
