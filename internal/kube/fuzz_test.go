package kube

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FuzzParsePool: any IPPool object (the CRD's schema aside: a hostile or older API
// server) gives a pool whose ranges are ordered and of one family, or an error naming
// the pool, never a panic.
func FuzzParsePool(f *testing.F) {
	for _, s := range []string{
		`{"spec": {"cidrs": ["198.51.100.0/24", "2001:db8::/120"], "ranges": ["203.0.113.10-203.0.113.20"], "autoAssign": false}}`,
		`{"spec": {"serviceSelector": {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "x", "operator": "In", "values": ["y"]}]}}}`,
		`{"spec": {"ranges": ["10.0.0.9-10.0.0.1", "::1-10.0.0.1"]}}`, `{"spec": 7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil || obj == nil {
			return
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetName("p")
		p, err := ParsePool(u)
		if err != nil {
			return
		}
		for _, r := range p.Ranges {
			if !r.First.IsValid() || r.First.Is4() != r.Last.Is4() || r.Last.Less(r.First) {
				t.Fatalf("bad range %v", r)
			}
		}
	})
}

// FuzzRequested: any load-balancer-ips annotation asks for at most one address of
// each family, or is an error.
func FuzzRequested(f *testing.F) {
	for _, s := range []string{"198.51.100.10", "198.51.100.10, 2001:db8::10", "198.51.100.10,198.51.100.11", "fe80::1%eth0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationIPs: value}}}
		addrs, err := requested(svc)
		if err != nil {
			return
		}
		if len(addrs) > 2 || len(addrs) == 2 && addrs[0].Is4() == addrs[1].Is4() {
			t.Fatalf("%q asks for %v", value, addrs)
		}
		for _, a := range addrs {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("%q gives %v", value, a)
			}
		}
	})
}
