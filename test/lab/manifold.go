package lab

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

// NodeConfig is the part of a `manifold run` config file the lab uses.
type NodeConfig struct {
	Name              string
	Site              string // node.site; "" keeps the default (the name)
	XDPMode           string // native unless set
	Address, Address6 netip.Addr
	API               string // 127.0.0.1:9100 unless set; each node has its own namespace
	APIToken          string // node.api_token; "" for none
	BGP               *BGP   // nil: no bgp section
	ForwardTransit    bool   // node.forward_transit
	// MaxServices and MaxBackends size the data plane's maps (node.max_services,
	// node.max_backends); 0 keeps the defaults
	MaxServices, MaxBackends uint32
	// Fleet set, the node takes its services from etcd; its file lists none.
	Fleet *Fleet
	// Kubeconfig set, the node also takes services from that cluster (a kubernetes
	// section).
	Kubeconfig string
	Tunnels    *Tunnels // nil: no tunnels section
	Services   []Service

	// FlowTableSize is node.flow_table_size; 0 keeps the default (a fleet of many nodes
	// on one machine keeps its tables small)
	FlowTableSize int
}

// Tunnels is the tunnels section of a NodeConfig: the node is a tunnel edge.
type Tunnels struct {
	Listen                        string // "" keeps the default
	CertFile, KeyFile, TokensFile string
	RelayTokenFile, CAFile        string // "" for none
}

// Fleet is the fleet section of a NodeConfig.
type Fleet struct {
	Endpoints []string // etcd client URLs
}

// BGP is the bgp section of a NodeConfig.
type BGP struct {
	ASN       uint32
	RouterID  netip.Addr
	DrainTime time.Duration // 0 keeps the default
	Peers     []BGPPeer
	// Communities and LargeCommunities of every VIP, as the file writes them.
	Communities, LargeCommunities []string
}

type BGPPeer struct {
	Address  netip.Addr
	ASN      uint32
	Port     uint16        // 0 keeps the default (179)
	HoldTime time.Duration // 0 keeps the default
	Password string
	BFD      *BFD // nil: no BFD
}

// BFD is a peer's bfd mapping.
type BFD struct {
	MinRx, MinTx time.Duration
	Multiplier   int
}

// ServiceBGP is a service's bgp mapping.
type ServiceBGP struct {
	Communities, LargeCommunities []string
	MED                           *uint32
	Prepend                       int
}

// Service is one service of a NodeConfig.
type Service struct {
	Name      string
	VIP       netip.Addr
	Port      uint16
	Protocol  string       // tcp | udp; "" is tcp
	Backends  []netip.Addr // each with weight 1
	Health    *Health      // nil: no health section
	TableSize int          // 0 keeps the default
	// Forwarding is the service's forwarding ("" keeps the default, ipip), and
	// BackendPort its backend_port (forwarding nat; 0: absent).
	Forwarding  string
	BackendPort uint16
	BGP         *ServiceBGP // nil: no bgp section
	// Tunnel makes it a service of forwarding tunnel (no backends). ProxyProtocol is
	// its proxy_protocol, or that of a routed service's tunnelled origins ("": none).
	Tunnel        bool
	ProxyProtocol string
	// Origins, when set, are the service's origins (docs/steering.md), and
	// BackendOrigin names each backend's.
	Origins       []Origin
	BackendOrigin map[netip.Addr]string
}

// Origin is one origin of a steered service.
type Origin struct {
	Name     string
	Capacity float64 // new flows per second
	Tunnel   bool    // reached by tunnel: an origin of a routed service without backends
}

// Health is a service's health check.
type Health struct {
	Kind              string // tcp | http
	Port              uint16
	Path              string // http only; "" keeps the default
	Interval, Timeout time.Duration
	Rise, Fall        int
}

// YAML renders the config file.
func (c NodeConfig) YAML() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: %s\n  interfaces: [%s]\n  xdp_mode: %s\n", c.Name, HostLink, or(c.XDPMode, "native"))
	if c.Site != "" {
		fmt.Fprintf(&b, "  site: %s\n", c.Site)
	}
	if c.FlowTableSize != 0 {
		fmt.Fprintf(&b, "  flow_table_size: %d\n", c.FlowTableSize)
	}
	fmt.Fprintf(&b, "  address: %s\n", c.Address)
	if c.Address6.IsValid() {
		fmt.Fprintf(&b, "  address6: %s\n", c.Address6)
	}
	fmt.Fprintf(&b, "  api: %s\n", or(c.API, "127.0.0.1:9100"))
	if c.APIToken != "" {
		fmt.Fprintf(&b, "  api_token: %q\n", c.APIToken)
	}
	if c.ForwardTransit {
		b.WriteString("  forward_transit: true\n")
	}
	if c.MaxServices != 0 {
		fmt.Fprintf(&b, "  max_services: %d\n", c.MaxServices)
	}
	if c.MaxBackends != 0 {
		fmt.Fprintf(&b, "  max_backends: %d\n", c.MaxBackends)
	}
	if g := c.BGP; g != nil {
		fmt.Fprintf(&b, "bgp:\n  asn: %d\n  router_id: %s\n", g.ASN, g.RouterID)
		if g.DrainTime > 0 {
			fmt.Fprintf(&b, "  drain_time: %s\n", g.DrainTime)
		}
		writeList(&b, "  communities", g.Communities)
		writeList(&b, "  large_communities", g.LargeCommunities)
		b.WriteString("  peers:\n")
		for _, p := range g.Peers {
			fmt.Fprintf(&b, "    - address: %s\n      asn: %d\n", p.Address, p.ASN)
			if p.Port != 0 {
				fmt.Fprintf(&b, "      port: %d\n", p.Port)
			}
			if p.HoldTime != 0 {
				fmt.Fprintf(&b, "      hold_time: %s\n", p.HoldTime)
			}
			if p.Password != "" {
				fmt.Fprintf(&b, "      password: %q\n", p.Password)
			}
			if f := p.BFD; f != nil {
				fmt.Fprintf(&b, "      bfd: {min_rx: %s, min_tx: %s, multiplier: %d}\n", f.MinRx, f.MinTx, f.Multiplier)
			}
		}
	}
	if t := c.Tunnels; t != nil {
		fmt.Fprintf(&b, "tunnels:\n  cert_file: %s\n  key_file: %s\n  tokens_file: %s\n", t.CertFile, t.KeyFile, t.TokensFile)
		if t.Listen != "" {
			fmt.Fprintf(&b, "  listen: %s\n", t.Listen)
		}
		if t.RelayTokenFile != "" {
			fmt.Fprintf(&b, "  relay_token_file: %s\n  ca_file: %s\n", t.RelayTokenFile, t.CAFile)
		}
	}
	if c.Fleet != nil {
		fmt.Fprintf(&b, "fleet:\n  etcd:\n    endpoints: [%s]\n", strings.Join(c.Fleet.Endpoints, ", "))
		if len(c.Services) == 0 {
			return []byte(b.String())
		}
	}
	if c.Kubeconfig != "" {
		fmt.Fprintf(&b, "kubernetes:\n  kubeconfig: %s\n", c.Kubeconfig)
	}
	b.WriteString("services:\n")
	for _, s := range c.Services {
		proto := cmp.Or(s.Protocol, "tcp")
		fmt.Fprintf(&b, "  - name: %s\n    vip: %s\n    port: %d\n    protocol: %s\n", s.Name, s.VIP, s.Port, proto)
		if s.TableSize != 0 {
			fmt.Fprintf(&b, "    table_size: %d\n", s.TableSize)
		}
		if s.Forwarding != "" {
			fmt.Fprintf(&b, "    forwarding: %s\n", s.Forwarding)
		}
		if s.BackendPort != 0 {
			fmt.Fprintf(&b, "    backend_port: %d\n", s.BackendPort)
		}
		if g := s.BGP; g != nil {
			b.WriteString("    bgp:\n")
			writeList(&b, "      communities", g.Communities)
			writeList(&b, "      large_communities", g.LargeCommunities)
			if g.MED != nil {
				fmt.Fprintf(&b, "      med: %d\n", *g.MED)
			}
			if g.Prepend != 0 {
				fmt.Fprintf(&b, "      prepend: %d\n", g.Prepend)
			}
		}
		if len(s.Origins) > 0 {
			b.WriteString("    origins:\n")
			for _, o := range s.Origins {
				tunnel := ""
				if o.Tunnel {
					tunnel = ", tunnel: true"
				}
				fmt.Fprintf(&b, "      - {name: %s, capacity: %g%s}\n", o.Name, o.Capacity, tunnel)
			}
		}
		if s.ProxyProtocol != "" {
			fmt.Fprintf(&b, "    proxy_protocol: %s\n", s.ProxyProtocol)
		}
		if s.Tunnel {
			b.WriteString("    forwarding: tunnel\n")
			continue
		}
		b.WriteString("    backends:\n")
		for _, be := range s.Backends {
			fmt.Fprintf(&b, "      - address: %s\n", be)
			if o := s.BackendOrigin[be]; o != "" {
				fmt.Fprintf(&b, "        origin: %s\n", o)
			}
		}
		if h := s.Health; h != nil {
			fmt.Fprintf(&b, "    health: {kind: %s, port: %d, interval: %s, timeout: %s, rise: %d, fall: %d",
				h.Kind, h.Port, h.Interval, h.Timeout, h.Rise, h.Fall)
			if h.Path != "" {
				fmt.Fprintf(&b, ", path: %q", h.Path)
			}
			b.WriteString("}\n")
		}
	}
	return []byte(b.String())
}

// writeList writes "key: [a, b]" with each item quoted; nothing for no items.
func writeList(b *strings.Builder, key string, items []string) {
	if len(items) == 0 {
		return
	}
	quoted := make([]string, len(items))
	for i, it := range items {
		quoted[i] = strconv.Quote(it)
	}
	fmt.Fprintf(b, "%s: [%s]\n", key, strings.Join(quoted, ", "))
}

// FleetImport runs `manifold fleet import` on h: the store named by the fleet section of
// fleet (a node's file) is seeded with the services of services (a node's file without
// a fleet section); force replaces the services the store holds.
func (l *Lab) FleetImport(manifold string, h *Host, fleet, services NodeConfig, force bool) error {
	return l.FleetImportFile(manifold, h, fleet, services.YAML(), force)
}

// FleetImportFile is FleetImport of a services file given as it is.
func (l *Lab) FleetImportFile(manifold string, h *Host, fleet NodeConfig, services []byte, force bool) error {
	fleetPath, servicesPath := filepath.Join(l.Dir, "fleet-import.yaml"), filepath.Join(l.Dir, "fleet-services.yaml")
	if err := writeFileAtomic(fleetPath, fleet.YAML()); err != nil {
		return err
	}
	if err := writeFileAtomic(servicesPath, services); err != nil {
		return err
	}
	args := []string{"fleet", "import", "--config", fleetPath, "--services", servicesPath}
	if force {
		args = append(args, "--force")
	}
	out, err := h.Output(hostprog.Built(manifold), args...)
	if err != nil {
		return err
	}
	l.logf("manifold fleet import: %s", strings.TrimSpace(out))
	return nil
}

// NodeAPI is a client of a node's REST API, which listens on the node's loopback: its
// connections are made inside the node's namespace.
type NodeAPI struct {
	Host *Host
	// Token, when set, is sent as "Authorization: Bearer TOKEN" (node.api_token).
	Token  string
	client *http.Client
}

func NewNodeAPI(h *Host) *NodeAPI { return NewNodeAPITimeout(h, 10*time.Second) }

// NewNodeAPITimeout is NewNodeAPI whose requests wait up to timeout for their answer
// (a fleet's write waits up to 10 s in the node: 5 s to commit, 5 s to apply).
func NewNodeAPITimeout(h *Host, timeout time.Duration) *NodeAPI {
	return &NodeAPI{Host: h, client: HTTPClient(h.NS, timeout)}
}

// Call sends one request and returns the response's status and body. A body is sent
// as JSON, the only type the API takes.
func (a *NodeAPI) Call(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://127.0.0.1:9100"+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %s %s: %w", a.Host.Role, method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Get returns the body of a GET answered with 200, decoded into v.
func (a *NodeAPI) Get(path string, v any) error {
	code, body, err := a.Call(http.MethodGet, path, "")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: GET %s: %d %s", a.Host.Role, path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: GET %s: %w", a.Host.Role, path, err)
	}
	return nil
}

// Status returns the node's GET /api/v1/status.
func (a *NodeAPI) Status() (*wire.Status, error) {
	var st wire.Status
	return &st, a.Get("/api/v1/status", &st)
}

// FleetAgrees is nil when every node of apis reaches the fleet's store and has
// applied the same revision, the store's; it returns their statuses, by node role, and
// that revision.
func FleetAgrees(apis []*NodeAPI) (map[string]*wire.Status, int64, error) {
	out := map[string]*wire.Status{}
	rev := int64(-1)
	for _, a := range apis {
		role := a.Host.Role
		st, err := a.Status()
		if err != nil {
			return nil, 0, err
		}
		f := st.Fleet
		switch {
		case f == nil:
			return nil, 0, fmt.Errorf("%s: no fleet in the status", role)
		case !f.Reachable:
			return nil, 0, fmt.Errorf("%s: store unreachable (stale since %s)", role, f.StaleSince)
		case f.AppliedRevision != f.StoreRevision:
			return nil, 0, fmt.Errorf("%s: applied revision %d, the store's %d (%s)", role, f.AppliedRevision, f.StoreRevision, f.ApplyError)
		case rev >= 0 && f.AppliedRevision != rev:
			return nil, 0, fmt.Errorf("the nodes applied different revisions: %d, and %d by %s", rev, f.AppliedRevision, role)
		}
		rev = f.AppliedRevision
		out[role] = st
	}
	return out, rev, nil
}

// Node is a running `manifold run`.
type Node struct {
	*Process
	ConfigPath string
}

// StartNode writes cfg and runs `manifold run` on h; it returns once an XDP program is
// attached to h's eth0.
func (l *Lab) StartNode(manifold string, h *Host, cfg NodeConfig) (*Node, error) {
	n := &Node{ConfigPath: filepath.Join(l.Dir, "manifold-"+h.Role+".yaml")}
	if err := writeFileAtomic(n.ConfigPath, cfg.YAML()); err != nil {
		return nil, err
	}
	p, err := l.Start(h, "manifold-"+h.Role, hostprog.Built(manifold), "run", "--config", n.ConfigPath)
	if err != nil {
		return nil, err
	}
	n.Process = p
	err = p.WaitReady(15*time.Second, func() error {
		id, err := h.XDPProgID(HostLink)
		if err != nil {
			return err
		}
		if id == 0 {
			return fmt.Errorf("no XDP program on %s:%s", h.NS, HostLink)
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("manifold run on %s: %w", h.Role, err)
	}
	return n, nil
}

// Reload rewrites the config file and sends SIGHUP. It does not wait for the new config
// to be applied: only traffic can tell.
func (n *Node) Reload(cfg NodeConfig) error {
	if err := writeFileAtomic(n.ConfigPath, cfg.YAML()); err != nil {
		return err
	}
	return n.Signal(syscall.SIGHUP)
}

// StartBackendAgent runs `manifold backend` on h for vips; it returns once h accepts
// packets for the VIPs (see Host.IsLocal).
func (l *Lab) StartBackendAgent(manifold string, h *Host, vips ...netip.Addr) (*Process, error) {
	return l.StartBackendAgentHook(manifold, h, "", vips...)
}

// StartBackendAgentHook is StartBackendAgent with backend.hook set to hook ("": the
// default).
func (l *Lab) StartBackendAgentHook(manifold string, h *Host, hook string, vips ...netip.Addr) (*Process, error) {
	path, err := l.WriteBackendAgentConfig(h, HostLink, hook, vips...)
	if err != nil {
		return nil, err
	}
	p, err := l.Start(h, "backend-"+h.Role, hostprog.Built(manifold), "backend", "--config", path)
	if err != nil {
		return nil, err
	}
	err = p.WaitReady(15*time.Second, func() error {
		ok, err := h.IsLocal(vips...)
		if err == nil && !ok {
			err = fmt.Errorf("VIPs %v not local in %s", vips, h.NS)
		}
		return err
	})
	if err != nil {
		return p, fmt.Errorf("manifold backend on %s: %w", h.Role, err)
	}
	return p, nil
}

// WriteBackendAgentConfig writes (atomically) the backend agent's file for h: backend
// interface iface, hook ("": the default) and vips. It returns the file's path, the
// same for every call on h, which the agent reads again on SIGHUP.
func (l *Lab) WriteBackendAgentConfig(h *Host, iface, hook string, vips ...netip.Addr) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "backend:\n  interface: %s\n", iface)
	if hook != "" {
		fmt.Fprintf(&b, "  hook: %s\n", hook)
	}
	b.WriteString("  vips: [")
	for i, v := range vips {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v.String())
	}
	b.WriteString("]\n")
	path := filepath.Join(l.Dir, "backend-"+h.Role+".yaml")
	return path, writeFileAtomic(path, []byte(b.String()))
}

// writeFileAtomic replaces path in one rename, so a reload never reads half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
