package kubesource

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kube"
)

// From the cluster's objects to manifold services:
//
//	Service (type LoadBalancer, manifold's class, an address in status.loadBalancer.ingress
//	         that an IPPool selecting the Service holds: the status is anyone's to write
//	         who may update services/status, the pools are the cluster admin's)
//	  × each of its ports (TCP or UDP) × each address ─► one manifold service, VIP:port/protocol
//	EndpointSlices of the Service (label kubernetes.io/service-name), the address's family:
//	  ready endpoints per Node
//	Nodes: InternalIP of the family, Ready, not excluded from load balancers
//	  externalTrafficPolicy Local:   a backend per Node with ready endpoints, weight = their number
//	  externalTrafficPolicy Cluster: every ready Node, weight 1 (while any endpoint is ready)
//
// The cluster's service proxy (kube-proxy, or the CNI) takes VIP:port to a pod on the
// backend Node, as it does for any LoadBalancer address.

// excludeLabel keeps a Node out of every load balancer's backends, as the cloud
// providers' controllers read it.
const excludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// Plan is the cluster's services as manifold serves them, and what was left out.
type Plan struct {
	Services []config.Service // sorted by name; every backend's Node in Nodes
	// Nodes names the Node of each backend: Nodes[service name][backend address].
	Nodes map[string]map[netip.Addr]string
	// Skipped says, one line each, what could not be served and why; the rest is
	// served as if it were not there.
	Skipped []string
	// OutOfPool is the addresses of Services' status that no pool selecting the
	// Service holds: refused (and in Skipped).
	OutOfPool []Refusal
}

// A Refusal is an address of a Service's status the plan refused.
type Refusal struct {
	Service *corev1.Service
	Addr    netip.Addr
}

// Pools is what says which addresses a Service may have: the IPPools and the labels
// of the Namespaces (which pools select by).
type Pools struct {
	Pools      []*kube.Pool
	Namespaces map[string]labels.Set
}

// admit tells whether a pool that selects svc holds a, as the controller decides
// when it gives the address (kube.Pool.Selects).
func (ps Pools) admit(svc *corev1.Service, a netip.Addr) bool {
	c := kube.ClaimOf(svc)
	c.NamespaceLabels = ps.Namespaces[svc.Namespace]
	return slices.ContainsFunc(ps.Pools, func(p *kube.Pool) bool { return p.Selects(c) && p.Contains(a) })
}

// VIPsOn is the addresses of the services that have a backend on the Node node: the
// VIPs its backend agent decapsulates.
func (p Plan) VIPsOn(node string) []netip.Addr {
	var out []netip.Addr
	for _, s := range p.Services {
		for _, b := range s.Backends {
			if p.Nodes[s.Name][b.Address] == node && !slices.Contains(out, s.VIP) {
				out = append(out, s.VIP)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

type vipKey struct {
	vip   netip.Addr
	port  uint16
	proto config.Protocol
}

// plan is the pure part of Cluster.Plan.
func plan(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node, pools Pools, defaultClass bool) Plan {
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			bySvc[s.Namespace+"/"+name] = append(bySvc[s.Namespace+"/"+name], s)
		}
	}
	var plans []servicePlan
	for _, svc := range svcs {
		key := svc.Namespace + "/" + svc.Name
		if sp := planService(key, svc, bySvc[key], nodes, pools, defaultClass); !sp.empty() {
			plans = append(plans, sp)
		}
	}
	return combine(plans)
}

// servicePlan is what one Service makes (its key, NAMESPACE/NAME), before the check
// that each VIP:port/protocol is served once: its services in the order made, each
// backend's Node, and what it could not serve.
type servicePlan struct {
	key       string
	services  []config.Service
	nodes     []map[netip.Addr]string // of services[i]'s backends
	skipped   []string
	outOfPool []Refusal
}

func (sp servicePlan) empty() bool {
	return len(sp.services) == 0 && len(sp.skipped) == 0 && len(sp.outOfPool) == 0
}

// keys is the VIP:port/protocol of each of the Service's services.
func (sp servicePlan) keys() []vipKey {
	out := make([]vipKey, len(sp.services))
	for i, s := range sp.services {
		out[i] = vipKey{s.VIP, s.Port, s.Protocol}
	}
	return out
}

// planService is what the Service svc (nil: none, or gone) makes of its EndpointSlices
// eps and the cluster's Nodes.
func planService(key string, svc *corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node, pools Pools, defaultClass bool) servicePlan {
	sp := servicePlan{key: key}
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer || !ours(svc, defaultClass) {
		return sp
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // a host name: not an address manifold serves
		}
		vip, err := netip.ParseAddr(ing.IP)
		if err != nil || !vip.IsGlobalUnicast() {
			sp.skipped = append(sp.skipped, fmt.Sprintf("Service %s: %q in status.loadBalancer.ingress is not a unicast address", key, ing.IP))
			continue
		}
		if !pools.admit(svc, vip) {
			sp.skipped = append(sp.skipped, fmt.Sprintf("Service %s: %s is in no IPPool that selects the Service: refused", key, vip))
			sp.outOfPool = append(sp.outOfPool, Refusal{Service: svc, Addr: vip})
			continue
		}
		for _, port := range svc.Spec.Ports {
			proto, ok := protocols[port.Protocol]
			if !ok {
				sp.skipped = append(sp.skipped, fmt.Sprintf("Service %s: port %d/%s: manifold serves TCP and UDP", key, port.Port, port.Protocol))
				continue
			}
			s, owners := service(svc, vip, port, proto, eps, nodes)
			sp.services = append(sp.services, s)
			sp.nodes = append(sp.nodes, owners)
		}
	}
	return sp
}

// combine is the Plan of the Services' plans, sorted by key: a VIP:port/protocol two
// Services claim is the first's, the second's service is skipped.
func combine(plans []servicePlan) Plan {
	p := Plan{Nodes: map[string]map[netip.Addr]string{}}
	slices.SortFunc(plans, func(a, b servicePlan) int { return compareKeys(a.key, b.key) })
	taken := map[vipKey]string{}
	for _, sp := range plans {
		p.Skipped = append(p.Skipped, sp.skipped...)
		p.OutOfPool = append(p.OutOfPool, sp.outOfPool...)
		for i, k := range sp.keys() {
			if other, dup := taken[k]; dup {
				p.Skipped = append(p.Skipped, fmt.Sprintf("Service %s: %s port %d/%s is Service %s's already", sp.key, k.vip, k.port, k.proto, other))
				continue
			}
			taken[k] = sp.key
			p.Services = append(p.Services, sp.services[i])
			p.Nodes[sp.services[i].Name] = sp.nodes[i]
		}
	}
	slices.SortFunc(p.Services, func(a, b config.Service) int { return cmp.Compare(a.Name, b.Name) })
	return p
}

// compareKeys orders Service keys (NAMESPACE/NAME) by namespace, then name: of two
// Services that claim one address, the first so is served.
func compareKeys(a, b string) int {
	ans, an, _ := strings.Cut(a, "/")
	bns, bn, _ := strings.Cut(b, "/")
	return cmp.Or(cmp.Compare(ans, bns), cmp.Compare(an, bn))
}

var protocols = map[corev1.Protocol]config.Protocol{corev1.ProtocolTCP: config.TCP, corev1.ProtocolUDP: config.UDP}

// ours tells the Services manifold serves: those the kube-controller gives addresses.
func ours(svc *corev1.Service, defaultClass bool) bool {
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == kube.Class
	}
	return defaultClass
}

// service is one port of svc on one of its addresses, with its backends and the Node
// of each.
func service(svc *corev1.Service, vip netip.Addr, port corev1.ServicePort, proto config.Protocol, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node) (config.Service, map[netip.Addr]string) {
	s := config.Service{
		Name: serviceName(svc, vip, port, proto), VIP: vip, Port: uint16(port.Port), Protocol: proto,
		Forwarding: config.DefaultForwarding, GUEPort: config.DefaultGUEPort, Scheduler: config.DefaultScheduler,
		// sized for every Node of the cluster, not the ready ones: endpoints coming and
		// going must not cross a size step (which rebuilds the ring); only the cluster
		// growing past 10, 40 or 163 Nodes does
		TableSize: config.DefaultTableSize(len(nodes)),
		// the kubelet's probes decide readiness; the EndpointSlices carry it
		Health: config.Health{Kind: config.HealthNone, Port: uint16(port.Port), Interval: config.DefaultHealthInterval,
			Timeout: config.DefaultHealthTimeout, Rise: config.DefaultHealthRise, Fall: config.DefaultHealthFall},
	}
	ready := readyPerNode(eps, vip.Is6(), port.Name)
	owners := map[netip.Addr]string{}
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	for _, n := range nodes {
		addr, ok := internalIP(n, vip.Is6())
		if !ok || !nodeReady(n) {
			continue
		}
		weight := min(uint32(ready[n.Name]), config.MaxWeight)
		if !local && len(ready) > 0 {
			weight = 1 // any Node's proxy reaches every endpoint
		}
		if weight == 0 {
			continue
		}
		s.Backends = append(s.Backends, config.Backend{Address: addr, Weight: weight})
		owners[addr] = n.Name
	}
	slices.SortFunc(s.Backends, func(a, b config.Backend) int { return a.Address.Compare(b.Address) })
	return s, owners
}

// readyPerNode counts the ready endpoints of one family serving the port named
// portName, by Node. An endpoint listed by two slices (while they are rewritten)
// counts once.
func readyPerNode(eps []*discoveryv1.EndpointSlice, v6 bool, portName string) map[string]int {
	family := discoveryv1.AddressTypeIPv4
	if v6 {
		family = discoveryv1.AddressTypeIPv6
	}
	seen := map[string]bool{}
	out := map[string]int{}
	for _, s := range eps {
		if s.AddressType != family || !slices.ContainsFunc(s.Ports, func(p discoveryv1.EndpointPort) bool {
			return p.Name != nil && *p.Name == portName || p.Name == nil && portName == ""
		}) {
			continue
		}
		for _, e := range s.Endpoints {
			// nil means ready: the API's own reading of an unset condition
			if e.Conditions.Ready != nil && !*e.Conditions.Ready || e.NodeName == nil || len(e.Addresses) == 0 || seen[e.Addresses[0]] {
				continue
			}
			seen[e.Addresses[0]] = true
			out[*e.NodeName]++
		}
	}
	return out
}

func internalIP(n *corev1.Node, v6 bool) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is6() == v6 {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func nodeReady(n *corev1.Node) bool {
	if _, excluded := n.Labels[excludeLabel]; excluded {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serviceName names the manifold service of a Service's port on one address:
// NAMESPACE.NAME.PORT, then -udp for UDP and -v6 for the IPv6 address of a dual-stack
// Service. A name longer than manifold's 63 characters keeps its start and ends in a
// hash of the whole.
func serviceName(svc *corev1.Service, vip netip.Addr, port corev1.ServicePort, proto config.Protocol) string {
	suffix := fmt.Sprintf(".%d", port.Port)
	if proto == config.UDP {
		suffix += "-udp"
	}
	if vip.Is6() && slices.ContainsFunc(svc.Status.LoadBalancer.Ingress, func(i corev1.LoadBalancerIngress) bool {
		a, err := netip.ParseAddr(i.IP)
		return err == nil && a.Is4()
	}) {
		suffix += "-v6"
	}
	name := svc.Namespace + "." + svc.Name
	if len(name)+len(suffix) <= maxName {
		return name + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	tag := fmt.Sprintf("-%08x", h.Sum32())
	return strings.TrimRight(name[:maxName-len(suffix)-len(tag)], ".-") + tag + suffix
}

// maxName is the longest name of a manifold service.
const maxName = 63
