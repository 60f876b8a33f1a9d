package config

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/maglev"
)

// FuzzParse checks that any input gives either a valid config or a non-empty Errors of
// well-formed, line-ordered errors, for every kind of file (node, backend, steer,
// link), and never panics.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		hdr + "x: &a\n  <<: *a\n",
		"node: &a\n  <<: [*a, *a]\n  name: x\n",
		svc + "    backends: &b [{address: 10.0.1.1}]\n  - name: b\n    vip: 198.51.100.11\n    backends: *b\n",
		"backend: {interface: eth0, vips: [198.51.100.10, \"::1\"], gue_port: 0x17c0}\n",
		hdr + "  entropy_source: true\n  entropy_prefix4: 172.16.0.0/16\n  new_flow_rate: 0\n" + svc[len(hdr):] + "    forwarding: gue\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		checkOutcome(t, data, c != nil, err)
		if c != nil {
			checkConfig(t, c)
		}
		a, err := ParseBackend("f.yaml", data)
		checkOutcome(t, data, a != nil, err)
		if a != nil {
			checkAgent(t, a)
		}
		st, err := ParseSteer("f.yaml", data)
		checkOutcome(t, data, st != nil, err)
		l, err := ParseLink("f.yaml", data)
		checkOutcome(t, data, l != nil, err)
		if l != nil && !serviceName.MatchString(l.Name) {
			t.Errorf("bad link name %q", l.Name)
		}
		KindOf(data)
		ParseWireGuardKey(string(data)) // a link's key files: no panic
	})
}

func checkOutcome(t *testing.T, data []byte, ok bool, err error) {
	t.Helper()
	if ok == (err != nil) {
		t.Fatalf("got config: %v, error: %v", ok, err)
	}
	if err == nil {
		return
	}
	var errs Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		t.Fatalf("error is not a non-empty Errors: %#v", err)
	}
	for i, e := range errs {
		if e.File != "f.yaml" || e.Msg == "" || e.Line < 0 {
			t.Errorf("bad error %#v", e)
		}
		if e.Field == "" && e.Line == 0 && !strings.HasPrefix(e.Msg, "syntax error: ") && e.Msg != "empty file" {
			t.Errorf("error with neither field nor line: %q", e.Error())
		}
		// one line per error; no fmt verb mistakes (unless the input has "%!" itself)
		if strings.ContainsAny(e.Error(), "\n\r") || strings.Contains(e.Error(), "%!") && !bytes.Contains(data, []byte("%!")) {
			t.Errorf("malformed error: %q", e.Error())
		}
		if i > 0 && errs[i-1].Line > e.Line {
			t.Errorf("errors not in line order:\n%v", err)
		}
	}
}

// checkConfig asserts what the rest of manifold relies on in a config Parse accepted.
func checkConfig(t *testing.T, c *Config) {
	t.Helper()
	n := c.Node
	if !nodeName.MatchString(n.Name) || len(n.Interfaces) == 0 || !n.Address.IsValid() || n.API == "" || apiProblem(n.API) != "" {
		t.Errorf("bad node %+v", n)
	}
	for i, ifname := range n.Interfaces {
		if !validIfname(ifname) || slices.Index(n.Interfaces, ifname) != i {
			t.Errorf("bad interface %q", ifname)
		}
	}
	if n.Address6.IsValid() && n.Address6.Is6() == n.Address.Is6() {
		t.Errorf("address6 %v of the same family as address %v", n.Address6, n.Address)
	}
	if !slices.Contains([]XDPMode{XDPNative, XDPGeneric, XDPAuto}, n.XDPMode) ||
		n.FlowTableSize < MinFlowTableSize || n.FlowTableSize > MaxFlowTableSize ||
		n.MaxServices < MinMaxServices || n.MaxServices > MaxMaxServices || n.MaxBackends < MinMaxBackends || n.MaxBackends > MaxMaxBackends {
		t.Errorf("bad node %+v", n)
	}
	// what the data plane's entropy needs: a /16 and a /64 for the families in use
	if n.EntropySource && (n.SourceFor(false).IsValid() && (!n.EntropyPrefix4.Addr().Is4() || n.EntropyPrefix4.Bits() != EntropyPrefix4Bits) ||
		n.SourceFor(true).IsValid() && (!n.EntropyPrefix6.Addr().Is6() || n.EntropyPrefix6.Bits() != EntropyPrefix6Bits)) ||
		!n.EntropySource && (n.EntropyPrefix4.IsValid() || n.EntropyPrefix6.IsValid()) {
		t.Errorf("bad entropy settings %+v", n)
	}
	if b := c.BGP; b != nil {
		if b.ASN == 0 || b.ASN > MaxASN || !b.RouterID.Is4() || len(b.Peers) == 0 {
			t.Errorf("bad bgp %+v", b)
		}
		for _, p := range b.Peers {
			if !p.Address.IsValid() || p.ASN == 0 || p.ASN > MaxASN || len(p.Password) > MaxPasswordLen ||
				p.HoldTime != 0 && (p.HoldTime < MinHoldTime || p.HoldTime > MaxHoldTime) {
				t.Errorf("bad peer %+v", p)
			}
		}
	}
	type key struct {
		vip   netip.Addr
		port  uint16
		proto Protocol
	}
	keys := map[key]bool{}
	names := map[string]bool{}
	for _, s := range c.Services {
		k := key{s.VIP, s.Port, s.Protocol}
		if keys[k] || names[s.Name] || !serviceName.MatchString(s.Name) || !s.VIP.IsValid() ||
			!n.SourceFor(s.VIP.Is6()).IsValid() || s.GUEPort == 0 ||
			!slices.Contains([]Protocol{TCP, UDP}, s.Protocol) ||
			!slices.Contains([]Forwarding{IPIP, GUE}, s.Forwarding) ||
			!slices.Contains([]Scheduler{Maglev, MaglevSource}, s.Scheduler) ||
			!maglev.IsPrime(uint64(s.TableSize)) || s.TableSize > MaxTableSize || int(s.TableSize) <= len(s.Backends) {
			t.Errorf("bad service %+v", s)
		}
		keys[k], names[s.Name] = true, true
		seen := map[netip.Addr]bool{}
		for _, b := range s.Backends {
			if !b.Address.IsValid() || b.Address.Is6() != s.VIP.Is6() || seen[b.Address] || b.Weight > MaxWeight {
				t.Errorf("bad backend %+v of %s", b, s.Name)
			}
			seen[b.Address] = true
		}
		h := s.Health
		if !slices.Contains([]HealthKind{HealthNone, HealthTCP, HealthHTTP}, h.Kind) ||
			h.Kind != HealthNone && h.Port == 0 ||
			(h.Kind == HealthHTTP) != strings.HasPrefix(h.Path, "/") || h.Kind != HealthHTTP && h.Path != "" ||
			h.Interval < MinHealthInterval || h.Timeout <= 0 || h.Timeout > h.Interval ||
			h.Rise < 1 || h.Rise > MaxRiseFall || h.Fall < 1 || h.Fall > MaxRiseFall {
			t.Errorf("bad health %+v of %s", h, s.Name)
		}
	}
}

func checkAgent(t *testing.T, a *BackendAgent) {
	t.Helper()
	if !validIfname(a.Interface) || (len(a.VIPs) == 0 && a.Kubernetes == nil) || a.GUEPort == 0 || (a.Kubernetes != nil && a.Kubernetes.NodeName == "") {
		t.Errorf("bad backend agent %+v", a)
	}
	for i, v := range a.VIPs {
		if !v.IsValid() || v.IsLoopback() || slices.Index(a.VIPs, v) != i {
			t.Errorf("bad vip %v", v)
		}
	}
}
