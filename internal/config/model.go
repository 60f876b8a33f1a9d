// Package config is manifold's one config boundary: it parses and validates the YAML
// files of `manifold run` and `manifold backend` into the internal model below. Every
// other package takes these types as already valid.
package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"time"
)

// Config is the node daemon's desired state, as read from `manifold run --config FILE`.
type Config struct {
	Node Node
	BGP  *BGP // nil when the file has no bgp section: routing is left to the operator
	// Fleet is nil for a node whose services are in its file; set, the services come
	// from the fleet store (etcd) and the file has none.
	Fleet *Fleet
	// Kubernetes is nil unless services also come from a cluster's API.
	Kubernetes *Kubernetes
	// Tunnels is nil for a node that takes no tunnels; set, the node is an edge of
	// reverse tunnels and serves the services of forwarding tunnel.
	Tunnels  *Tunnels
	Services []Service
}

// Kubernetes is the cluster whose Services of type LoadBalancer a node serves, or
// whose VIPs a backend agent decapsulates.
type Kubernetes struct {
	Kubeconfig string // "": in the cluster, the Pod's ServiceAccount
	// DefaultClass takes, besides the Services of class manifold.io/lb, those with no
	// class: the kube-controller's --default-class.
	DefaultClass bool
	// NodeName is the Node of the backend agent's host (the backend agent's only).
	NodeName string
}

// Tunnels is where an edge takes the tunnels of connectors (manifold connect).
type Tunnels struct {
	Listen            string // host:port where connectors dial in: UDP (QUIC) and TCP
	CertFile, KeyFile string // the edge's TLS certificate chain and key
	TokensFile        string // token → the services it may serve
	// RelayTokenFile holds the secret the edges of a fleet relay to each other with;
	// CAFile the CA of their certificates. Both or neither; only with a fleet.
	RelayTokenFile, CAFile string
	// IdleTimeout closes a client connection of a tunnel service that carried no byte
	// either way for that long (0: never), giving its stream back to the connector.
	IdleTimeout time.Duration
	// MaxConnsPerSource bounds the connections one client address holds open to one
	// tunnel service at once (0: no bound).
	MaxConnsPerSource int
	// MaxPendingHellos bounds the connectors' QUIC connections that have not finished
	// their hello at once; past it a new one is refused at its first packet.
	MaxPendingHellos int
}

// Fleet is where a node of a fleet finds the fleet's one desired state: etcd.
type Fleet struct {
	Endpoints []string // etcd client URLs, http:// or https://
	Prefix    string   // the key prefix of this fleet, "/manifold" by default
	// TLS to etcd: a client certificate and key, and the CA that signs the members'
	// certificates (all optional; an https endpoint without CAFile uses the system's).
	CertFile, KeyFile, CAFile string
	// Username and PasswordFile log in to etcd when it has authentication enabled;
	// only over https:// endpoints (PasswordInClear).
	Username, PasswordFile string
}

// PasswordInClear finds the first endpoint that would carry the etcd password in
// clear — a login (Username or PasswordFile) with an endpoint that is not https:// —
// and says why it is refused; i is -1 when there is none. etcd's Authenticate call
// sends the password as it is, and every request after it a token good for minutes:
// on a plain connection anyone on the path reads both.
func (f *Fleet) PasswordInClear() (i int, problem string) {
	if f.Username == "" && f.PasswordFile == "" {
		return -1, ""
	}
	for i, e := range f.Endpoints {
		if u, err := url.Parse(e); err != nil || u.Scheme != "https" {
			return i, fmt.Sprintf("%q would carry the password of fleet.etcd.username in clear: a login needs https:// endpoints (with ca_file)", e)
		}
	}
	return -1, ""
}

type XDPMode string

// DecapHook is where the backend agent decapsulates (backend.hook).
type DecapHook string

const (
	HookTC  DecapHook = "tc"  // tc ingress: works on every interface, next to anything
	HookXDP DecapHook = "xdp" // native XDP: cheaper; needs the driver's XDP and the interface's XDP slot
)

const (
	XDPNative  XDPMode = "native"
	XDPGeneric XDPMode = "generic"
	XDPAuto    XDPMode = "auto" // native, falling back to generic with a warning
)

// Node describes this LB node.
type Node struct {
	Name string
	// Site is the edge location the node belongs to (default: its name): the nodes of
	// a site share its load in the fleet's records.
	Site       string
	Interfaces []string // XDP attaches to each of these
	XDPMode    XDPMode
	// Address is the node's address: BGP next hop and outer source of encapsulated
	// packets of its family. Address6 optionally gives the node an IPv6 address when
	// Address is IPv4 (or an IPv4 one when Address is IPv6, despite the name it is
	// simply "the other family"), so that services of both families can be served.
	Address  netip.Addr
	Address6 netip.Addr // zero when absent
	API      string     // host:port of the REST API and /metrics
	APIToken string
	// APITokenFile is a file whose contents (surrounding whitespace trimmed) are the
	// API token, so that the token need not sit in the config file. At most one of
	// APIToken and APITokenFile is set; the file is read when the node starts.
	APITokenFile string
	// APIHosts are the names the API answers to besides IP literals and localhost (the
	// Host header): any other is refused, against DNS rebinding.
	APIHosts []string
	// APICertFile and APIKeyFile (PEM) make the API serve HTTPS; both or neither.
	APICertFile string
	APIKeyFile  string
	// APIInsecureRemote lets the API listen beyond loopback without a token or without
	// TLS, which is otherwise refused.
	APIInsecureRemote bool
	// FlowTableSize is the number of entries of the flow table (5-tuple → backend; bpf/lib/flowtable.h).
	FlowTableSize uint32
	// MaxServices and MaxBackends size the data plane's maps of services and of
	// (service, backend) slots, id 0 included (it means "none").
	MaxServices uint32
	MaxBackends uint32
	// EntropySource makes the outer source of encapsulated packets an address of
	// EntropyPrefix4 (a /16) or EntropyPrefix6 (a /64) picked by the flow hash, instead
	// of the node address, so that backends spread flows over their receive queues.
	EntropySource  bool
	EntropyPrefix4 netip.Prefix // zero when absent
	EntropyPrefix6 netip.Prefix // zero when absent
	// NewFlowRate bounds the new flows per second the node remembers in the flow
	// table (0: no bound); above it new flows are forwarded but not inserted.
	NewFlowRate uint32
	// ForwardTransit routes packets for neither a VIP nor the node in XDP, by the
	// kernel's FIB, when the FIB knows the next hop's link-layer address.
	ForwardTransit bool
}

// SourceFor returns the node address of the given family (4 or 6), or the zero Addr.
func (n *Node) SourceFor(ipv6 bool) netip.Addr {
	for _, a := range []netip.Addr{n.Address, n.Address6} {
		if a.IsValid() && a.Is6() == ipv6 {
			return a
		}
	}
	return netip.Addr{}
}

type BGP struct {
	ASN      uint32
	RouterID netip.Addr
	Peers    []Peer
	// DrainTime is how long a stopping node keeps forwarding after it has withdrawn
	// its VIPs, so that the routers converge before the data plane detaches.
	DrainTime time.Duration
	// Communities and LargeCommunities go on the announcement of every VIP of the
	// node; a service's own are added to them.
	Communities      []Community
	LargeCommunities []LargeCommunity
}

type Peer struct {
	Address  netip.Addr
	ASN      uint32 // equal to bgp.asn: iBGP; otherwise eBGP
	Port     uint16 // the peer's TCP port
	HoldTime time.Duration
	Password string // TCP MD5 signature key; never logged
	// EBGPMultihop is the TTL of the session's packets for an eBGP peer that is not
	// directly connected; 0 keeps the default (TTL 1, directly connected).
	EBGPMultihop uint8
	// BFD, when set, runs asynchronous single-hop BFD (RFC 5880/5881) beside the
	// session, so that the router drops the node's routes within Multiplier × the
	// negotiated interval of it freezing or losing its link.
	BFD *BFD
}

// BFD is a peer's BFD session: the intervals this node asks for, and how many missed
// packets make the session down.
type BFD struct {
	MinRx, MinTx time.Duration
	Multiplier   uint8
}

type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Number is the IP protocol number.
func (p Protocol) Number() uint8 {
	if p == UDP {
		return 17
	}
	return 6
}

type Forwarding string

const (
	IPIP Forwarding = "ipip"
	GUE  Forwarding = "gue"
	// NAT rewrites the client's packet to the backend (address and port) from the
	// node's address: for backends that cannot decapsulate.
	NAT Forwarding = "nat"
	// Tunnel services are not in the XDP program's maps: their packets pass to the
	// node's own stack, where the tunnel edge joins each connection to a connector.
	Tunnel Forwarding = "tunnel"
)

// ProxyProtocol is the version of the PROXY protocol header (HAProxy's) a tunnel
// service's connector writes to the origin before the client's bytes; "" for none.
type ProxyProtocol string

const (
	ProxyV1 ProxyProtocol = "v1" // text: "PROXY TCP4 client vip cport vport\r\n"
	ProxyV2 ProxyProtocol = "v2" // binary
)

type Scheduler string

const (
	Maglev       Scheduler = "maglev"        // hash of the 5-tuple
	MaglevSource Scheduler = "maglev-source" // hash of the client address only: client affinity
)

// Service is one VIP:port/protocol and the backends behind it.
type Service struct {
	Name       string
	VIP        netip.Addr
	Port       uint16 // 0 = every port
	Protocol   Protocol
	Forwarding Forwarding
	GUEPort    uint16 // UDP destination port of GUE packets
	// BackendPort is the port NAT sends to (forwarding: nat); 0: the service's port
	// (for a service of every port, the client's destination port).
	BackendPort uint16
	// ProxyProtocol (forwarding: tunnel, or the origins reached by tunnel of a routed
	// service) is the PROXY header the connector opens every connection to the origin
	// with, carrying the client's address; "" none. Backends reached by ipip or gue
	// see the client's address on its packets and get none.
	ProxyProtocol ProxyProtocol
	Scheduler     Scheduler
	TableSize     uint32 // Maglev table size, a prime
	// Origins are the data centres holding the backends, for global steering; with
	// none, the service's weights are its backends' own.
	Origins  []Origin
	Backends []Backend
	Health   Health
	// BGP are the attributes of the service's VIP announcement, added to the node's.
	BGP ServiceBGP
}

// ServiceBGP is what a service adds to its VIP's announcement. When several services
// share a VIP, the announcement carries every one's communities, the highest MED and
// the longest prepend: a VIP is one route.
type ServiceBGP struct {
	Communities      []Community
	LargeCommunities []LargeCommunity
	MED              *uint32 // nil: no MED attribute
	// Prepend is how many extra times the node's AS goes in front of the AS path on
	// eBGP sessions (iBGP sessions carry no AS of their own).
	Prepend uint8
}

// Backend is one real server of a service. Its identity (for Maglev and for the data
// plane) is its address: with DSR encapsulation the backend receives the packet on the
// VIP's own port.
type Backend struct {
	Address netip.Addr
	Weight  uint32 // 0 = draining: keeps its flows, gets no new ones
	Origin  string // one of the service's origins; "" when it has none
}

// Origin is a data centre holding some of a service's backends. Global steering
// decides which share of each site's new flows goes to it.
type Origin struct {
	Name     string
	Capacity uint32 // new flows per second it takes, for the whole fleet
	// Tunnel: on a routed service (ipip, gue, nat), an origin with no backends, reached
	// by the connectors of the node's tunnel edge. Its share of the flows passes up to
	// the node's stack (a local pseudo-backend in the ring), where the edge ends them.
	Tunnel bool
	// Weight (tunnel origins) is the origin's Maglev weight against the backends' own
	// while steering gives the node's site no shares; steering sets it from the share.
	Weight uint32
}

// TunnelledOrigins tells whether s is a routed service with origins reached by
// tunnel: its VIP goes on lo and the node's tunnel edge listens on it too.
func (s *Service) TunnelledOrigins() bool {
	if s.Forwarding == Tunnel {
		return false
	}
	for _, o := range s.Origins {
		if o.Tunnel {
			return true
		}
	}
	return false
}

type HealthKind string

const (
	HealthNone HealthKind = "none"
	HealthTCP  HealthKind = "tcp"
	HealthHTTP HealthKind = "http"
)

type Health struct {
	Kind     HealthKind
	Port     uint16
	Path     string
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
}

// Steer is the desired state of the steering controller, `manifold steer --config FILE`.
type Steer struct {
	Fleet Fleet
	// Name is this controller in the election (default: the host's name).
	Name string
	// Interval is the time between two rounds; Lease how long the leader's lease lasts
	// without renewal: a standby takes over within it when the leader is gone.
	Interval, Lease time.Duration
	// Metrics is where GET /metrics listens (host:port); "" for nowhere.
	Metrics string
}

// BackendAgent is the desired state of `manifold backend --config FILE`.
type BackendAgent struct {
	Interface string       // decapsulation attaches here
	Hook      DecapHook    // at tc ingress or XDP
	VIPs      []netip.Addr // added to lo; only packets whose inner destination is one of these are decapsulated
	GUEPort   uint16       // UDP port on which GUE packets are decapsulated
	// Kubernetes is nil unless VIPs also come from a cluster's API.
	Kubernetes *Kubernetes
}
