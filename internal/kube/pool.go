package kube

import (
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PoolResource is the IPPool custom resource (deploy/kubernetes/01-crd-ippool.yaml).
var PoolResource = schema.GroupVersionResource{Group: "manifold.io", Version: "v1alpha1", Resource: "ippools"}

// A Pool is an IPPool read from the API: the addresses the controller may give out.
type Pool struct {
	Name   string
	Ranges []Range
	// AutoAssign false keeps the pool's addresses for Services that ask for one by
	// name (the load-balancer-ips annotation).
	AutoAssign bool
	// Selector picks the Services the pool serves; it selects every Service when the
	// pool has no serviceSelector.
	Selector labels.Selector
}

// A Range is the addresses from First to Last, both included, of one family.
type Range struct{ First, Last netip.Addr }

func (r Range) contains(a netip.Addr) bool {
	return a.Is4() == r.First.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

func (p *Pool) contains(a netip.Addr) bool {
	for _, r := range p.Ranges {
		if r.contains(a) {
			return true
		}
	}
	return false
}

// ippoolSpec is the spec of an IPPool as the CRD's schema defines it.
type ippoolSpec struct {
	CIDRs           []string              `json:"cidrs"`
	Ranges          []string              `json:"ranges"`
	AutoAssign      *bool                 `json:"autoAssign"`
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector"`
}

// ParsePool reads an IPPool. The CRD's schema checks the shape; this checks what a
// schema cannot (an address, a prefix, a range's order), and names the field at fault.
func ParsePool(u *unstructured.Unstructured) (*Pool, error) {
	var obj struct {
		Spec ippoolSpec `json:"spec"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
		return nil, fmt.Errorf("ippool %s: %w", u.GetName(), err)
	}
	spec := obj.Spec
	p := &Pool{Name: u.GetName(), AutoAssign: spec.AutoAssign == nil || *spec.AutoAssign, Selector: labels.Everything()}
	for i, c := range spec.CIDRs {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("ippool %s: spec.cidrs[%d]: %w", p.Name, i, err)
		}
		prefix = prefix.Masked()
		p.Ranges = append(p.Ranges, Range{First: prefix.Addr(), Last: lastOf(prefix)})
	}
	for i, s := range spec.Ranges {
		r, err := parseRange(s)
		if err != nil {
			return nil, fmt.Errorf("ippool %s: spec.ranges[%d]: %w", p.Name, i, err)
		}
		p.Ranges = append(p.Ranges, r)
	}
	if len(p.Ranges) == 0 {
		return nil, fmt.Errorf("ippool %s: spec: neither cidrs nor ranges give an address", p.Name)
	}
	if spec.ServiceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(spec.ServiceSelector)
		if err != nil {
			return nil, fmt.Errorf("ippool %s: spec.serviceSelector: %w", p.Name, err)
		}
		p.Selector = sel
	}
	return p, nil
}

func parseRange(s string) (Range, error) {
	first, last, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, fmt.Errorf("%q is not FIRST-LAST", s)
	}
	a, err := netip.ParseAddr(strings.TrimSpace(first))
	if err != nil {
		return Range{}, err
	}
	b, err := netip.ParseAddr(strings.TrimSpace(last))
	if err != nil {
		return Range{}, err
	}
	a, b = a.Unmap(), b.Unmap()
	switch {
	case a.Zone() != "" || b.Zone() != "":
		return Range{}, fmt.Errorf("%q: an address with a zone cannot be a load balancer's", s)
	case a.Is4() != b.Is4():
		return Range{}, fmt.Errorf("%q mixes IPv4 and IPv6", s)
	case b.Less(a):
		return Range{}, fmt.Errorf("%q ends before it starts", s)
	}
	return Range{First: a, Last: b}, nil
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for bit := p.Bits(); bit < len(b)*8; bit++ {
		b[bit/8] |= 0x80 >> (bit % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
