package config

import (
	"fmt"
	"strings"
	"time"
)

// Defaults of the fields a config file may leave out. A field given as null ("key:"
// with no value) is absent too. Defaults only fill fields absent from the file: an
// explicit `weight: 0` or `port: 0` is kept. The schema (schema.go) shows them;
// TestDefaultsAreTheSchemas keeps applyDefaults to it.
const (
	// node.xdp_mode: try native XDP, fall back to generic with a warning.
	DefaultXDPMode = XDPAuto
	// backend.hook: decapsulate at tc ingress, which works on every interface and
	// beside any XDP program (a manifold node on the same host, say).
	DefaultDecapHook = HookTC
	// node.api: the REST API and /metrics listen on localhost only.
	DefaultAPI = "127.0.0.1:9100"
	// kubernetes.default_class: only the Services of class manifold.io/lb.
	DefaultKubeDefaultClass = false
	// DefaultFleetPrefix is where a fleet keeps its keys in etcd.
	DefaultFleetPrefix = "/manifold"
	// node.api_token: empty, no token required.
	DefaultAPIToken = ""
	// node.api_insecure_remote: an API beyond loopback needs a token and TLS.
	DefaultAPIInsecureRemote = false
	// node.flow_table_size: entries of the flow table.
	DefaultFlowTableSize = 262144
	// node.max_services and node.max_backends: what the data plane holds unless told
	// otherwise (LB_MAX_SERVICES and LB_MAX_BACKENDS of bpf/lib/consts.h; a test in
	// internal/reconcile holds them to those).
	DefaultMaxServices = 16384
	DefaultMaxBackends = 65536
	// node.entropy_source: outer sources are the node address.
	DefaultEntropySource = false
	// node.new_flow_rate: new flows per second inserted into the flow table. A flood
	// of new flows needs at least 16 s to turn the default table over, so an
	// established flow that sends a packet in that time keeps its entry.
	DefaultNewFlowRate = 16384
	// node.forward_transit: transit packets are the kernel's.
	DefaultForwardTransit = false

	// tunnels.listen: connectors dial every address of the edge on QUIC's port 7443.
	DefaultTunnelListen = "0.0.0.0:7443"
	// tunnels.idle_timeout: AWS Global Accelerator's TCP idle timeout, which clients of
	// a global front door already live with (keep-alives under it keep a connection).
	DefaultTunnelIdleTimeout = 340 * time.Second
	// tunnels.max_conns_per_source: far above what one client opens (a browser opens
	// at most 6 connections to a host), room for a few dozen users behind one NAT
	// address, and a small share of a tunnel's DefaultMaxStreamsPerTunnel (10 000).
	DefaultTunnelMaxConnsPerSource = 256
	// tunnels.max_pending_hellos: at about a round trip each, 128 hellos at once
	// attach over a thousand connectors a second after an edge restarts, while a flood
	// of silent peers holds at most 128 connections' goroutines.
	DefaultTunnelMaxPendingHellos = 128

	// bgp.peers[].hold_time.
	DefaultHoldTime = 9 * time.Second
	// bgp.peers[].port.
	DefaultPeerPort = 179
	// bgp.peers[].bfd.min_rx and min_tx: FRR's and BIRD's default.
	DefaultBFDInterval = 300 * time.Millisecond
	// bgp.peers[].bfd.multiplier.
	DefaultBFDMultiplier = 3
	// bgp.drain_time: between withdrawing every VIP and detaching, on SIGTERM.
	DefaultDrainTime = 2 * time.Second

	// services[].port: 0, every port of the VIP.
	DefaultPort = 0
	// services[].protocol.
	DefaultProtocol = TCP
	// services[].forwarding.
	DefaultForwarding = IPIP
	// services[].gue_port (and backend.gue_port): UDP destination port of GUE packets.
	DefaultGUEPort = 6080
	// services[].scheduler.
	DefaultScheduler = Maglev
	// services[].backends[].weight.
	DefaultWeight = 1

	// services[].health.kind: no health checks, every backend is considered up.
	DefaultHealthKind = HealthNone
	// services[].health.port defaults to the service's port, or backend_port when
	// given (no constant).
	// services[].health.path: only for kind http.
	DefaultHealthPath = "/"
	// services[].health.interval.
	DefaultHealthInterval = time.Second
	// services[].health.timeout: 500ms, or the interval when that is shorter.
	DefaultHealthTimeout = 500 * time.Millisecond
	// steer.interval: a round a second, as often as the nodes publish their records.
	DefaultSteerInterval = time.Second
	// steer.lease: a standby takes over within 5 s of the leader's end.
	DefaultSteerLease = 5 * time.Second
	// services[].health.rise: consecutive successes to mark a backend up.
	DefaultHealthRise = 2
	// services[].health.fall: consecutive failures to mark a backend down.
	DefaultHealthFall = 2
)

// applyDefaults fills the fields absent from the file (present reports whether a field
// path was given). A section that is absent as a whole stays absent (bgp: nil), except
// services[].health, which is always filled (kind none when absent).
func applyDefaults(c *Config, present func(path string) bool) {
	n := &c.Node
	if !present("node.xdp_mode") {
		n.XDPMode = DefaultXDPMode
	}
	if !present("node.api") {
		n.API = DefaultAPI
	}
	if !present("node.api_token") {
		n.APIToken = DefaultAPIToken
	}
	if !present("node.api_insecure_remote") {
		n.APIInsecureRemote = DefaultAPIInsecureRemote
	}
	if !present("node.flow_table_size") {
		n.FlowTableSize = DefaultFlowTableSize
	}
	if !present("node.max_services") {
		n.MaxServices = DefaultMaxServices
	}
	if !present("node.max_backends") {
		n.MaxBackends = DefaultMaxBackends
	}
	if !present("node.entropy_source") {
		n.EntropySource = DefaultEntropySource
	}
	if !present("node.new_flow_rate") {
		n.NewFlowRate = DefaultNewFlowRate
	}
	if !present("node.forward_transit") {
		n.ForwardTransit = DefaultForwardTransit
	}
	if !present("node.site") {
		n.Site = n.Name
	}
	if c.Fleet != nil && !present("fleet.prefix") {
		c.Fleet.Prefix = DefaultFleetPrefix
	}
	if c.BGP != nil {
		if !present("bgp.drain_time") {
			c.BGP.DrainTime = DefaultDrainTime
		}
		for i := range c.BGP.Peers {
			if !present(fmt.Sprintf("bgp.peers[%d].hold_time", i)) {
				c.BGP.Peers[i].HoldTime = DefaultHoldTime
			}
			if !present(fmt.Sprintf("bgp.peers[%d].port", i)) {
				c.BGP.Peers[i].Port = DefaultPeerPort
			}
			if b := c.BGP.Peers[i].BFD; b != nil {
				if !present(fmt.Sprintf("bgp.peers[%d].bfd.min_rx", i)) {
					b.MinRx = DefaultBFDInterval
				}
				if !present(fmt.Sprintf("bgp.peers[%d].bfd.min_tx", i)) {
					b.MinTx = DefaultBFDInterval
				}
				if !present(fmt.Sprintf("bgp.peers[%d].bfd.multiplier", i)) {
					b.Multiplier = DefaultBFDMultiplier
				}
			}
		}
	}
	if t := c.Tunnels; t != nil {
		if !present("tunnels.listen") {
			t.Listen = DefaultTunnelListen
		}
		if !present("tunnels.idle_timeout") {
			t.IdleTimeout = DefaultTunnelIdleTimeout
		}
		if !present("tunnels.max_conns_per_source") {
			t.MaxConnsPerSource = DefaultTunnelMaxConnsPerSource
		}
		if !present("tunnels.max_pending_hellos") {
			t.MaxPendingHellos = DefaultTunnelMaxPendingHellos
		}
	}
	for i := range c.Services {
		applyServiceDefaults(&c.Services[i], index("services", i), present)
	}
}

// applyServiceDefaults fills the fields of service s (at path sp) absent from its
// document.
func applyServiceDefaults(s *Service, sp string, present func(path string) bool) {
	def := func(field string) bool { return !present(sp + "." + field) }
	if def("port") {
		s.Port = DefaultPort
	}
	if def("protocol") {
		s.Protocol = DefaultProtocol
	}
	if def("forwarding") {
		s.Forwarding = DefaultForwarding
	}
	if def("gue_port") {
		s.GUEPort = DefaultGUEPort
	}
	if def("scheduler") {
		s.Scheduler = DefaultScheduler
	}
	if def("table_size") {
		s.TableSize = DefaultTableSize(len(s.Backends))
	}
	for j := range s.Backends {
		if def(fmt.Sprintf("backends[%d].weight", j)) {
			s.Backends[j].Weight = DefaultWeight
		}
	}
	for j := range s.Origins {
		if s.Origins[j].Tunnel && def(fmt.Sprintf("origins[%d].weight", j)) {
			s.Origins[j].Weight = DefaultWeight
		}
	}
	h := &s.Health
	if def("health.kind") {
		h.Kind = DefaultHealthKind
	}
	if def("health.port") {
		h.Port = s.Port
		if s.BackendPort != 0 {
			h.Port = s.BackendPort // what NAT sends to is what answers
		}
	}
	if def("health.path") && h.Kind == HealthHTTP {
		h.Path = DefaultHealthPath
	}
	if def("health.interval") {
		h.Interval = DefaultHealthInterval
	}
	if def("health.timeout") {
		h.Timeout = DefaultHealthTimeout
		if h.Interval > 0 && h.Interval < h.Timeout {
			h.Timeout = h.Interval
		}
	}
	if def("health.rise") {
		h.Rise = DefaultHealthRise
	}
	if def("health.fall") {
		h.Fall = DefaultHealthFall
	}
}

// applyBackendDefaults fills the fields of a backend agent file absent from the file.
func applyBackendDefaults(a *BackendAgent, present func(path string) bool, hostname func() (string, error)) {
	if !present("backend.gue_port") {
		a.GUEPort = DefaultGUEPort
	}
	if !present("backend.hook") {
		a.Hook = DefaultDecapHook
	}
	if a.Kubernetes != nil && !present("kubernetes.node_name") {
		// kubelet registers its Node under the host's name, lower-cased
		name, _ := hostname()
		a.Kubernetes.NodeName = strings.ToLower(name)
	}
}

// applySteerDefaults fills the fields of a steering controller's file absent from it.
func applySteerDefaults(s *Steer, present func(path string) bool, hostname func() (string, error)) {
	if !present("fleet.prefix") {
		s.Fleet.Prefix = DefaultFleetPrefix
	}
	if !present("steer.interval") {
		s.Interval = DefaultSteerInterval
	}
	if !present("steer.lease") {
		s.Lease = DefaultSteerLease
	}
	if !present("steer.name") {
		s.Name, _ = hostname()
	}
}

// TableSizeSteps are the Maglev table sizes a service gets when it names none: the
// smallest with TableSlotsPerBackend slots per configured backend, the largest beyond.
// A ring costs 8 bytes a slot in the kernel and its build time grows with its size, so
// a service of a few backends needs no 65537-slot table (512 KiB; 10 000 of them were
// 5 GiB); steps a factor of 2 to 4 apart keep the size, and the ring, the same over
// most backend-list edits. 509 holds the many services of up to 5 backends: 100 000 of
// them cost 400 MiB of rings, where 1021 slots cost 800 MiB.
var TableSizeSteps = []uint32{509, 1021, 4093, 16381, 65537}

// TableSlotsPerBackend keeps the load a Maglev table gives each backend within about
// 1 % of its share (the Maglev paper's M ≥ 100·N).
const TableSlotsPerBackend = 100

// DefaultTableSize is services[].table_size for a service of `backends` backends
// (as configured, whatever their health: a backend going down resizes nothing).
func DefaultTableSize(backends int) uint32 {
	for _, size := range TableSizeSteps {
		if uint64(size) >= uint64(backends)*TableSlotsPerBackend {
			return size
		}
	}
	return TableSizeSteps[len(TableSizeSteps)-1]
}
