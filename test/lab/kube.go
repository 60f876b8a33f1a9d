package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/kube/kubetest"
)

// A Kubernetes cluster in the lab: the real API server and its etcd in a host's
// namespace (the control plane), reached by the nodes and agents through the router
// as they would reach it on a network; pods as HTTP servers on addresses of their
// Node's host; kube-proxy as the nftables rules its nftables mode writes for a
// LoadBalancer address.

// KubeAPIPort is the API server's port on the control plane's lab address.
const KubeAPIPort = 6443

// StartKube runs the API server (bin) and etcd on h, with the manifests of deployDir
// applied; the test's own clients reach it from h's namespace.
func (l *Lab) StartKube(bin, deployDir string, h *Host) (*kubetest.Cluster, error) {
	return kubetest.Start(kubetest.Options{
		Bin: bin, DeployDir: deployDir, Netns: h.NS, Host: h.Addr4.String(), Port: KubeAPIPort,
		Dial: func(_ context.Context, _, addr string) (net.Conn, error) { return DialTCP(h.NS, addr, 0) },
	})
}

// StartKubeBackendAgent runs `manifold backend` on h with a kubernetes section: its
// VIPs are those of the Services the Node node is a backend of, learnt from the API
// through kubeconfig.
func (l *Lab) StartKubeBackendAgent(manifold string, h *Host, kubeconfig, node string) (*Process, error) {
	path := filepath.Join(l.Dir, "backend-"+h.Role+".yaml")
	conf := fmt.Sprintf("backend:\n  interface: %s\nkubernetes:\n  kubeconfig: %s\n  node_name: %s\n", HostLink, kubeconfig, node)
	if err := writeFileAtomic(path, []byte(conf)); err != nil {
		return nil, err
	}
	p, err := l.Start(h, "backend-"+h.Role, hostprog.Built(manifold), "backend", "--config", path)
	if err != nil {
		return nil, err
	}
	if _, err := p.WaitLog(15*time.Second, func(line string) bool { return strings.Contains(line, "backend agent running") }); err != nil {
		return p, fmt.Errorf("manifold backend on %s: %w", h.Role, err)
	}
	return p, nil
}

// Pod is an HTTP server on an address of its Node's host, answering every request
// with its name and a newline: a pod, as far as the path VIP:port → pod goes.
type Pod struct {
	Name string
	Addr netip.AddrPort
	srv  *http.Server
}

// StartPod adds addr to h's lo and serves HTTP on addr:port in h's namespace until
// the returned Pod is closed.
func (l *Lab) StartPod(h *Host, name string, addr netip.Addr, port uint16) (*Pod, error) {
	if err := h.addAddr("lo", addr, addr.BitLen()); err != nil {
		return nil, err
	}
	p := &Pod{Name: name, Addr: netip.AddrPortFrom(addr, port)}
	var ln net.Listener
	err := InNamespace(h.NS, func() error {
		var err error
		ln, err = net.Listen("tcp", p.Addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s on %s: %w", name, h.Role, err)
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, name) }),
		ReadHeaderTimeout: RequestTimeout}
	go p.srv.Serve(ln) // owned by the Pod: ends with Close
	return p, nil
}

// Close stops the pod's server.
func (p *Pod) Close() error { return p.srv.Close() }

// KubeProxyRoute is one LoadBalancer address and port, and the pods kube-proxy sends
// it to on one Node (externalTrafficPolicy Local: the Node's own).
type KubeProxyRoute struct {
	Service string // namespace/name/protocol/port, as kube-proxy names its chains
	VIP     netip.AddrPort
	Pods    []netip.AddrPort
}

// KubeProxy replaces h's kube-proxy table with the rules kube-proxy's nftables mode
// writes for these LoadBalancer addresses: the service-ips verdict map in the nat
// prerouting chain sends VIP . tcp . port to the Service's external chain, which (Local
// policy) picks one of the Node's endpoints at random and DNATs to it. One
// transaction: a packet sees the old rules or the new ones.
func (l *Lab) KubeProxy(h *Host, routes ...KubeProxyRoute) error {
	var b strings.Builder
	// creating the table first makes the delete valid when it does not exist yet
	b.WriteString("table ip kube-proxy\ndelete table ip kube-proxy\ntable ip kube-proxy {\n")
	b.WriteString("\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n")
	b.WriteString("\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n")
	var elems []string
	for _, r := range routes {
		elems = append(elems, fmt.Sprintf("%s . tcp . %d : goto external-%s", r.VIP.Addr(), r.VIP.Port(), r.Service))
	}
	if len(elems) > 0 {
		fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(elems, ", "))
	}
	b.WriteString("\t}\n\tchain services {\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t}\n")
	for _, r := range routes {
		fmt.Fprintf(&b, "\tchain external-%s {\n", r.Service)
		if len(r.Pods) == 0 {
			b.WriteString("\t\tdrop\n\t}\n") // no local endpoint: kube-proxy drops
			continue
		}
		var vmap []string
		for i, pod := range r.Pods {
			vmap = append(vmap, fmt.Sprintf("%d : goto endpoint-%s__%s/%d", i, r.Service, pod.Addr(), pod.Port()))
		}
		fmt.Fprintf(&b, "\t\tnumgen random mod %d vmap { %s }\n\t}\n", len(r.Pods), strings.Join(vmap, ", "))
		for _, pod := range r.Pods {
			fmt.Fprintf(&b, "\tchain endpoint-%s__%s/%d {\n\t\tmeta l4proto tcp dnat to %s\n\t}\n", r.Service, pod.Addr(), pod.Port(), pod)
		}
	}
	b.WriteString("}\n")
	path := filepath.Join(l.Dir, "kube-proxy-"+h.Role+".nft")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := h.Exec(hostprog.Nft, "-f", path); err != nil {
		return fmt.Errorf("kube-proxy rules:\n%s\n%w", b.String(), err)
	}
	return nil
}

// podsOf returns the addresses of the pods on a Node, sorted.
func podsOf(pods []*Pod) []netip.AddrPort {
	var out []netip.AddrPort
	for _, p := range pods {
		out = append(out, p.Addr)
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return out
}
