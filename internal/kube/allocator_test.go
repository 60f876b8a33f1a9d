package kube

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

func pool(t *testing.T, name string, spec map[string]any) *Pool {
	t.Helper()
	p, err := ParsePool(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "manifold.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func claim(svc string, key string, ports ...int32) Claim {
	_, name, _ := strings.Cut(svc, "/")
	c := Claim{Service: svc, SharingKey: key, Labels: labels.Set{"app": name}}
	for _, p := range ports {
		c.Ports = append(c.Ports, Port{Protocol: "TCP", Port: p})
	}
	return c
}

func wantReason(t *testing.T, err error, reason string) {
	t.Helper()
	var aerr *AllocError
	if !errors.As(err, &aerr) || aerr.Reason != reason {
		t.Fatalf("err = %v, want reason %s", err, reason)
	}
}

func TestParsePoolRejects(t *testing.T) {
	for _, spec := range []map[string]any{
		{"cidrs": []any{"192.0.2.0/33"}},
		{"ranges": []any{"192.0.2.9-192.0.2.1"}},
		{"ranges": []any{"192.0.2.1-2001:db8::1"}},
		{"ranges": []any{"192.0.2.1"}},
		{},
		{"cidrs": []any{"192.0.2.0/24"}, "serviceSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Near"}}}},
	} {
		_, err := ParsePool(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "p"}, "spec": spec}})
		if err == nil {
			t.Errorf("spec %v: accepted", spec)
		}
	}
}

func TestPickAssignRelease(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]*Pool{
		pool(t, "b-v6", map[string]any{"cidrs": []any{"2001:db8::/127"}}),
		pool(t, "a-v4", map[string]any{"ranges": []any{"192.0.2.1-192.0.2.2"}}),
		pool(t, "pinned", map[string]any{"cidrs": []any{"198.51.100.7/32"}, "autoAssign": false}),
	})
	assign := func(c Claim, v6 bool) netip.Addr {
		t.Helper()
		addr, err := a.Pick(c, v6)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Assign(c, []netip.Addr{addr}); err != nil {
			t.Fatal(err)
		}
		return addr
	}
	if got := assign(claim("ns/one", ""), false); got != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("first address %s, want the pool's first", got)
	}
	if got := assign(claim("ns/two", ""), false); got != netip.MustParseAddr("192.0.2.2") {
		t.Errorf("second address %s", got)
	}
	_, err := a.Pick(claim("ns/three", ""), false)
	wantReason(t, err, ReasonExhausted)
	if got := assign(claim("ns/three", ""), true); got != netip.MustParseAddr("2001:db8::") {
		t.Errorf("IPv6 address %s", got)
	}
	if got := a.Release("ns/one"); len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("released %v", got)
	}
	if got := assign(claim("ns/four", ""), false); got != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("a freed address is not given again: got %s", got)
	}
	// A pool that does not assign automatically gives its address on request only.
	if _, err := a.Assign(claim("ns/five", ""), []netip.Addr{netip.MustParseAddr("198.51.100.7")}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Assign(claim("ns/six", ""), []netip.Addr{netip.MustParseAddr("198.51.100.7")})
	wantReason(t, err, ReasonTaken)
	_, err = a.Assign(claim("ns/six", ""), []netip.Addr{netip.MustParseAddr("203.0.113.1")})
	wantReason(t, err, ReasonNotInPool)
	if got := a.Held("ns/six"); len(got) != 0 {
		t.Errorf("a refused request took %v", got)
	}
}

func TestSharing(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]*Pool{pool(t, "p", map[string]any{"cidrs": []any{"192.0.2.0/30"}})})
	web := claim("ns/web", "k", 80)
	addr, _ := a.Pick(web, false)
	if _, err := a.Assign(web, []netip.Addr{addr}); err != nil {
		t.Fatal(err)
	}
	tls := claim("ns/tls", "k", 443)
	if got, _ := a.Pick(tls, false); got != addr {
		t.Errorf("same key, distinct ports: picked %s, want the shared %s", got, addr)
	}
	for _, c := range []Claim{claim("ns/other", "", 443), claim("ns/key2", "k2", 443), claim("ns/clash", "k", 80)} {
		_, err := a.Assign(c, []netip.Addr{addr})
		wantReason(t, err, ReasonTaken)
		if got, _ := a.Pick(c, false); got == addr {
			t.Errorf("%s picked the address it may not share", c.Service)
		}
	}
}

func TestSelector(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]*Pool{pool(t, "p", map[string]any{
		"cidrs":           []any{"192.0.2.0/30"},
		"serviceSelector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
	})})
	if _, err := a.Pick(claim("ns/web", ""), false); err != nil {
		t.Errorf("selected Service: %v", err)
	}
	_, err := a.Pick(claim("ns/db", ""), false)
	wantReason(t, err, ReasonExhausted)
}
