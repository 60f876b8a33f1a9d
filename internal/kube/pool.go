package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
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
	// Namespaces and NamespaceSelectors (MetalLB's names) limit the pool to the
	// Services of the namespaces named, or whose labels a selector matches; with
	// neither, a Service of any namespace.
	Namespaces         []string
	NamespaceSelectors []labels.Selector
}

// Selects tells whether the pool serves c's Service: its namespace is one of the
// pool's, and its labels match the pool's serviceSelector. Every way to an address
// (picked, asked for, shared) goes through it.
func (p *Pool) Selects(c Claim) bool {
	if !p.Selector.Matches(c.Labels) {
		return false
	}
	if len(p.Namespaces) == 0 && len(p.NamespaceSelectors) == 0 {
		return true
	}
	if slices.Contains(p.Namespaces, c.Namespace) {
		return true
	}
	return slices.ContainsFunc(p.NamespaceSelectors, func(s labels.Selector) bool { return s.Matches(c.NamespaceLabels) })
}

// Contains tells whether a is one of the pool's addresses.
func (p *Pool) Contains(a netip.Addr) bool {
	for _, r := range p.Ranges {
		if r.contains(a) {
			return true
		}
	}
	return false
}

// A Range is the addresses from First to Last, both included, of one family.
type Range struct{ First, Last netip.Addr }

func (r Range) contains(a netip.Addr) bool {
	return a.Is4() == r.First.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// ippoolSpec is the spec of an IPPool as the CRD's schema defines it.
type ippoolSpec struct {
	CIDRs           []string              `json:"cidrs"`
	Ranges          []string              `json:"ranges"`
	AutoAssign      *bool                 `json:"autoAssign"`
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector"`
	// MetalLB's IPAddressPool has them under serviceAllocation; here they sit beside
	// serviceSelector, which this pool had first.
	Namespaces         []string               `json:"namespaces"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors"`
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
	for i, n := range spec.Namespaces {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return nil, fmt.Errorf("ippool %s: spec.namespaces[%d]: %q is not a namespace name: %s", p.Name, i, n, strings.Join(errs, "; "))
		}
		p.Namespaces = append(p.Namespaces, n)
	}
	for i := range spec.NamespaceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&spec.NamespaceSelectors[i])
		if err != nil {
			return nil, fmt.Errorf("ippool %s: spec.namespaceSelectors[%d]: %w", p.Name, i, err)
		}
		p.NamespaceSelectors = append(p.NamespaceSelectors, sel)
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
