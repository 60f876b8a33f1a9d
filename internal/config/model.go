// Package config is manifold's one config boundary: it parses and validates the YAML
// files of `manifold run` and `manifold backend` into the internal model below. Every
// other package takes these types as already valid.
package config

import (
	"net/netip"
	"time"
)

// Config is the node daemon's desired state, as read from `manifold run --config FILE`.
type Config struct {
	Node     Node
	BGP      *BGP // nil when the file has no bgp section: routing is left to the operator
	Services []Service
}

type XDPMode string

const (
	XDPNative  XDPMode = "native"
	XDPGeneric XDPMode = "generic"
	XDPAuto    XDPMode = "auto" // native, falling back to generic with a warning
)

// Node describes this LB node.
type Node struct {
	Name       string
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
	// FlowTableSize is the number of entries of the LRU flow table (5-tuple → backend).
	FlowTableSize uint32
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
}

type Peer struct {
	Address  netip.Addr
	ASN      uint32
	HoldTime time.Duration
	Password string
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
	Scheduler  Scheduler
	TableSize  uint32 // Maglev table size, a prime
	Backends   []Backend
	Health     Health
}

// Backend is one real server of a service. Its identity (for Maglev and for the data
// plane) is its address: with DSR encapsulation the backend receives the packet on the
// VIP's own port.
type Backend struct {
	Address netip.Addr
	Weight  uint32 // 0 = draining: keeps its flows, gets no new ones
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

// BackendAgent is the desired state of `manifold backend --config FILE`.
type BackendAgent struct {
	Interface string       // tc ingress decapsulation attaches here
	VIPs      []netip.Addr // added to lo; only packets whose inner destination is one of these are decapsulated
	GUEPort   uint16       // UDP port on which GUE packets are decapsulated
}
