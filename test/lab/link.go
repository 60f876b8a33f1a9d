package lab

// Site-to-site links: gateways on the router (the "WAN" between the sites), hosts
// behind each gateway on a veth of their own, and `manifold link` on the gateways.

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
)

// AddSiteHost adds a namespace behind gateway gw, joined to it by a veth (the
// gateway's end is named after the host's role): the host has addr4/24 and, when
// addr6 is valid, addr6/64 on eth0, with its default routes via gw4 and gw6, the
// gateway's end.
func (l *Lab) AddSiteHost(gw *Host, role string, gw4, addr4, gw6, addr6 netip.Addr) (*Host, error) {
	if role == "" || len(role) > 15 || l.Host(role) != nil {
		return nil, fmt.Errorf("lab: bad or duplicate role %q", role)
	}
	h, err := l.addNamespace(role, SiteHost)
	if err != nil {
		return nil, err
	}
	h.Addr4, h.Gateway4, h.Addr6, h.Gateway6, h.RouterLink = addr4, gw4, addr6, gw6, role
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: role}, PeerName: HostLink, PeerNamespace: netlink.NsFd(h.nsh)}
	if err := gw.nl.LinkAdd(veth); err != nil {
		h.close()
		return nil, fmt.Errorf("veth %s:%s ↔ %s:%s: %w", gw.NS, role, h.NS, HostLink, err)
	}
	l.Hosts = append(l.Hosts, h)
	steps := []func() error{
		func() error { return gw.addAddr(role, gw4, 24) },
		func() error { return h.addAddr(HostLink, addr4, 24) },
		func() error { return gw.linkUp(role) },
		func() error { return h.linkUp(HostLink) },
		func() error { return h.addDefaultRoute(gw4) },
	}
	local := []netip.Addr{addr4}
	if addr6.IsValid() {
		steps = append(steps,
			func() error { return gw.addAddr(role, gw6, 64) },
			func() error { return h.addAddr(HostLink, addr6, 64) },
			func() error { return h.addDefaultRoute(gw6) },
		)
		local = append(local, addr6)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := h.WaitLocal(3*time.Second, local...); err != nil {
		return nil, err
	}
	return h, nil
}

// WireGuardKey is a key pair as wg(8) writes them (base64).
type WireGuardKey struct{ Private, Public string }

// NewWireGuardKey makes a fresh key pair.
func NewWireGuardKey() (WireGuardKey, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return WireGuardKey{}, err
	}
	enc := base64.StdEncoding.EncodeToString
	return WireGuardKey{Private: enc(k.Bytes()), Public: enc(k.PublicKey().Bytes())}, nil
}

// LinkConfig is one side of a link, written as `manifold link`'s file.
type LinkConfig struct {
	Name                    string
	Local, Remote           netip.Addr
	LocalPrefixes, Prefixes []netip.Prefix // this side's, the other side's
	Tunnels                 int
	Key                     WireGuardKey // this side's
	PeerPublicKey           string
	Interval                time.Duration
	Rise, Fall              int
	ConnectTimeout          time.Duration // 0: the default
	SourcePorts             string        // link.source_ports; "": the default
}

func (c LinkConfig) yaml(keyFile string) []byte {
	list := func(ps []netip.Prefix) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.String())
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "link:\n  name: %s\n  local: {address: %s, prefixes: %s}\n  remote: {address: %s, prefixes: %s}\n",
		c.Name, c.Local, list(c.LocalPrefixes), c.Remote, list(c.Prefixes))
	fmt.Fprintf(&b, "  tunnels: %d\n  private_key_file: %s\n  peer_public_key: %s\n", c.Tunnels, keyFile, c.PeerPublicKey)
	if c.ConnectTimeout > 0 {
		fmt.Fprintf(&b, "  connect_timeout: %s\n", c.ConnectTimeout)
	}
	if c.SourcePorts != "" {
		fmt.Fprintf(&b, "  source_ports: %s\n", c.SourcePorts)
	}
	if c.Interval > 0 {
		fmt.Fprintf(&b, "  health: {interval: %s, rise: %d, fall: %d}\n", c.Interval, c.Rise, c.Fall)
	}
	return []byte(b.String())
}

// StartLink writes cfg and its key and runs `manifold link` on gateway h; it does not
// wait (see WaitLink).
func (l *Lab) StartLink(manifold string, h *Host, name string, cfg LinkConfig) (*Process, error) {
	keyFile := filepath.Join(l.Dir, name+".key")
	if err := os.WriteFile(keyFile, []byte(cfg.Key.Private+"\n"), 0o600); err != nil {
		return nil, err
	}
	path := filepath.Join(l.Dir, name+".yaml")
	if err := writeFileAtomic(path, cfg.yaml(keyFile)); err != nil {
		return nil, err
	}
	return l.Start(h, name, hostprog.Built(manifold), "link", "--config", path)
}

// LinkStatus reads GET /api/v1/link of the link running on h (its default API).
func LinkStatus(h *Host) (*wire.LinkStatus, error) {
	resp, err := HTTPClient(h.NS, 2*time.Second).Get("http://127.0.0.1:9300" + wire.LinkPath)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st wire.LinkStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: link status: %w", h.NS, err)
	}
	return &st, nil
}

// InRoute lists the tunnels a link's route holds.
func InRoute(st *wire.LinkStatus) []int {
	var in []int
	for _, t := range st.Tunnels {
		if t.InRoute {
			in = append(in, t.Index)
		}
	}
	return in
}

// WaitBalanced waits until the resilient next-hop groups on the gateways have
// settled: a tunnel that joined takes over buckets only as they fall idle, so until
// then a flow's tunnel may still change while it pauses, and traffic started at once
// may keep the buckets busy on the first tunnels for good (unbalanced_timer 0).
func WaitBalanced(p *Process, gws ...*Host) error {
	return p.WaitReady(10*time.Second, func() error {
		for _, gw := range gws {
			out, err := gw.Output(hostprog.IP, "nexthop", "show")
			if err != nil {
				return err
			}
			for line := range strings.Lines(out) {
				if strings.Contains(line, "type resilient") && !strings.Contains(line, "unbalanced_time 0") {
					return fmt.Errorf("%s: group not balanced yet: %s", gw.Role, line)
				}
			}
		}
		return nil
	})
}
