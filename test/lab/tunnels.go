package lab

// Reverse tunnels in the lab: origins behind a NAT host that masquerades them and
// lets nothing in, and the PKI the edges and connectors use.
//
//	client ── router ──┬── lb1, lb2   manifold run, tunnels section (edges)
//	                   └── nat ──┬── org1   manifold connect + an HTTP origin
//	                             └── org2   (10.200.i.2, reachable from nat only)

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/vishvananda/netlink"
)

// natRules masquerade what leaves the NAT host toward the router and drop every new
// connection that comes in from it: an origin has no inbound path at all.
const natRules = `table ip mfnat {
	chain postrouting { type nat hook postrouting priority srcnat; oifname "eth0" masquerade; }
	chain forward { type filter hook forward priority filter; policy accept;
		iifname "eth0" ct state established,related accept
		iifname "eth0" drop
	}
}
`

// SetupNAT makes h a NAT gateway for the origins AddOriginBehind puts behind it.
func (l *Lab) SetupNAT(h *Host) error {
	if err := h.Sysctl(map[string]string{"net.ipv4.ip_forward": "1"}); err != nil {
		return err
	}
	rules := filepath.Join(l.Dir, "nat-"+h.Role+".nft")
	if err := os.WriteFile(rules, []byte(natRules), 0o644); err != nil {
		return err
	}
	if out, err := h.Output(hostprog.Nft, "-f", rules); err != nil {
		return fmt.Errorf("nft -f in %s: %w: %s", h.NS, err, out)
	}
	return nil
}

// AddOriginBehind adds host role behind nat on a link of its own: 10.200.i.2/24,
// default route via nat's 10.200.i.1. The router has no route to it.
func (l *Lab) AddOriginBehind(nat *Host, role string, i int) (*Host, error) {
	h, err := l.addNamespace(role, Backend)
	if err != nil {
		return nil, err
	}
	l.Hosts = append(l.Hosts, h) // closed and dumped with the others
	h.Addr4 = netip.AddrFrom4([4]byte{10, 200, byte(i), 2})
	h.Gateway4 = netip.AddrFrom4([4]byte{10, 200, byte(i), 1})
	natLink := "to-" + role
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: natLink}, PeerName: HostLink, PeerNamespace: netlink.NsFd(h.nsh)}
	if err := nat.nl.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("veth %s:%s ↔ %s:%s: %w", nat.NS, natLink, h.NS, HostLink, err)
	}
	for _, step := range []func() error{
		func() error { return nat.addAddr(natLink, h.Gateway4, 24) },
		func() error { return h.addAddr(HostLink, h.Addr4, 24) },
		func() error { return nat.linkUp(natLink) },
		func() error { return h.linkUp(HostLink) },
		func() error { return h.addDefaultRoute(h.Gateway4) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// TunnelPKI writes a CA (ca.pem) and an edge certificate (edge.pem, edge.key) valid for
// the given addresses into dir; it returns the three paths.
func TunnelPKI(dir string, addrs ...netip.Addr) (caFile, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lab tunnel CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "lab edge"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, a := range addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "edge.pem"), filepath.Join(dir, "edge.key")
	for path, block := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER},
		certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

// StartConnector writes a connector's config and token and runs `manifold connect`
// on h.
func (l *Lab) StartConnector(manifold string, h *Host, name, token, caFile string, edges []string, services string) (*Process, error) {
	tokenFile := filepath.Join(l.Dir, "token-"+name)
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	path := filepath.Join(l.Dir, "connect-"+name+".yaml")
	cfg := fmt.Sprintf("name: %s\nedges: [%s]\ntoken_file: %s\nca_file: %s\ndrain_time: 20s\nservices:\n%s",
		name, strings.Join(edges, ", "), tokenFile, caFile, services)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	return l.Start(h, "connect-"+name, hostprog.Built(manifold), "connect", "--config", path)
}
