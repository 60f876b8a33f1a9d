package kubesource

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/kube"
)

// The names of the services a dual-stack Service with a TCP and a UDP port makes, and
// each family's backends from that family's slices and InternalIPs (pure: no API).
func TestPlanDualStackAndUDP(t *testing.T) {
	class := kube.Class
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "tcp", Port: 53, Protocol: corev1.ProtocolTCP}, {Name: "udp", Port: 53, Protocol: corev1.ProtocolUDP}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}, {IP: "2001:db8::1"}}}},
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "w1"},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeInternalIP, Address: "fd00::1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	slice := func(family discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "dns-" + string(family), Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
			AddressType: family,
			Ports:       []discoveryv1.EndpointPort{{Name: new("tcp")}, {Name: new("udp")}},
		}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: new("w1")})
		}
		return s
	}
	p := plan([]*corev1.Service{svc}, []*discoveryv1.EndpointSlice{
		slice(discoveryv1.AddressTypeIPv4, "10.244.0.1", "10.244.0.2"), slice(discoveryv1.AddressTypeIPv6, "fd00:244::1"),
	}, []*corev1.Node{node}, Pools{Pools: []*kube.Pool{{Name: "doc", Selector: labels.Everything(), Ranges: []kube.Range{
		{First: netip.MustParseAddr("192.0.2.0"), Last: netip.MustParseAddr("192.0.2.255")},
		{First: netip.MustParseAddr("2001:db8::"), Last: netip.MustParseAddr("2001:db8::ffff")}}}}}, false)
	var got []string
	for _, s := range p.Services {
		got = append(got, fmt.Sprintf("%s %s:%d/%s %s×%d", s.Name, s.VIP, s.Port, s.Protocol, s.Backends[0].Address, s.Backends[0].Weight))
	}
	want := []string{
		"ns.dns.53 192.0.2.1:53/tcp 10.0.0.1×2",
		"ns.dns.53-udp 192.0.2.1:53/udp 10.0.0.1×2",
		"ns.dns.53-udp-v6 2001:db8::1:53/udp fd00::1×1",
		"ns.dns.53-v6 2001:db8::1:53/tcp fd00::1×1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("services:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if vips := p.VIPsOn("w1"); fmt.Sprint(vips) != "[192.0.2.1 2001:db8::1]" {
		t.Errorf("VIPs on w1: %v", vips)
	}
	if vips := p.VIPsOn("w2"); len(vips) != 0 {
		t.Errorf("VIPs on w2, which holds nothing: %v", vips)
	}
}

// A name too long for manifold keeps its start, stays valid and unique by a hash.
func TestServiceNameTooLong(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9._-]{1,63}$`)
	seen := map[string]bool{}
	for _, name := range []string{strings.Repeat("a", 63), strings.Repeat("a", 62) + "b"} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: strings.Repeat("n", 40), Name: name}}
		got := serviceName(svc, netip.MustParseAddr("192.0.2.1"), corev1.ServicePort{Port: 8443}, "udp")
		if !valid.MatchString(got) || !strings.HasPrefix(got, "nnnn") || !strings.HasSuffix(got, ".8443-udp") || seen[got] {
			t.Errorf("%s/%s: %q is not a valid, unique name ending in the port", svc.Namespace, name, got)
		}
		seen[got] = true
	}
}

// A Service's replan that moves an address two Services claim combines every plan
// again: the address's second claimant is served once the first lets it go; a replan
// of an unclaimed address touches that Service alone.
func TestReplanMovesAContestedAddress(t *testing.T) {
	of := func(key, name string, weight uint32) servicePlan {
		s := config.Service{Name: name, VIP: netip.MustParseAddr("192.0.2.1"), Port: 80, Protocol: config.TCP,
			Backends: []config.Backend{{Address: netip.MustParseAddr("10.0.0.1"), Weight: weight}}}
		return servicePlan{key: key, services: []config.Service{s}, nodes: []map[netip.Addr]string{{}}}
	}
	keep := func(*servicePlan) {}
	names := func(r replanned) string {
		var out []string
		for _, s := range r.changed {
			out = append(out, s.Name)
		}
		for _, g := range r.gone {
			out = append(out, "-"+g)
		}
		return strings.Join(out, " ")
	}
	pl := newPlanned()
	r := pl.replan([]servicePlan{of("ns/b", "ns.b.80", 1), of("ns/a", "ns.a.80", 1)}, keep, nil, true)
	if names(r) != "ns.a.80" || len(r.served) != 1 || len(r.skipped) != 1 || !strings.Contains(r.skipped[0], "is Service ns/a's already") {
		t.Fatalf("both claim the address: changed %q, served %d, skipped %q", names(r), len(r.served), r.skipped)
	}
	r = pl.replan([]servicePlan{{key: "ns/a"}}, keep, r.served, false)
	if names(r) != "ns.b.80 -ns.a.80" || len(r.served) != 1 || r.served[0].Name != "ns.b.80" || len(r.skipped) != 0 {
		t.Fatalf("a gone: changed %q, served %+v, skipped %q", names(r), r.served, r.skipped)
	}
	r = pl.replan([]servicePlan{of("ns/b", "ns.b.80", 2)}, keep, r.served, false)
	if names(r) != "ns.b.80" || r.served[0].Backends[0].Weight != 2 {
		t.Fatalf("b's weight: changed %q, served %+v", names(r), r.served)
	}
	r = pl.replan([]servicePlan{of("ns/c", "ns.c.80", 1)}, keep, r.served, false)
	if names(r) != "" || len(r.served) != 1 || len(r.skipped) != 1 {
		t.Fatalf("c claims b's address: changed %q, served %+v, skipped %q", names(r), r.served, r.skipped)
	}
}
