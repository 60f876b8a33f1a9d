package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/maglev"
)

// Limits of the accepted values, given to the schema (schema.go). Ranges of single
// integers are checked while parsing (load.go, from the schema); everything else here,
// after defaults are applied (TestBoundsAreTheSchemas keeps the durations' bounds to
// the schema).
const (
	MinFlowTableSize  = 1024
	MaxFlowTableSize  = 1 << 24 // 16777216
	MinMaxServices    = 16
	MaxMaxServices    = 1 << 20 // service ids are array indices: 1 Mi of them
	MinMaxBackends    = 16
	MaxMaxBackends    = 1 << 22
	MinASN            = 1
	MaxASN            = 4294967294 // 4294967295 is reserved (RFC 7300)
	MinHoldTime       = 3 * time.Second
	MaxHoldTime       = 65535 * time.Second
	MaxPasswordLen    = 80 // TCP_MD5SIG_MAXKEYLEN
	MaxDrainTime      = 5 * time.Minute
	MinTableSize      = 7
	MaxTableSize      = 1048573 // largest prime below 2^20
	MaxWeight         = 65535
	MinHealthInterval = 100 * time.Millisecond
	MaxRiseFall       = 100
	MaxIfnameLen      = 15 // IFNAMSIZ - 1
	MinSteerInterval  = 100 * time.Millisecond
	MaxSteerInterval  = time.Minute
	MinSteerLease     = 2 * time.Second // etcd's leases are whole seconds
	MaxSteerLease     = time.Minute
	// BFD intervals: below 10 ms a Go timer on a loaded host flaps the session;
	// GoBGP carries them in microseconds.
	MinBFDInterval = 10 * time.Millisecond
	MaxBFDInterval = 10 * time.Second
	MaxPrepend     = 10
	// tunnels.idle_timeout: under a second would cut requests that wait on a slow
	// origin; a day is longer than any NAT keeps an idle mapping.
	MinTunnelIdleTimeout = time.Second
	MaxTunnelIdleTimeout = 24 * time.Hour
	// MaxTunnelConns bounds tunnels.max_conns_per_source and max_pending_hellos: a
	// million is past any descriptor limit.
	MaxTunnelConns = 1 << 20
)

// require reports a required field that is absent, at the line of its enclosing
// mapping, and returns whether it is present. Nothing is reported when the enclosing
// mapping is itself absent or was rejected (that is reported already).
func (p *parser) require(path string) bool {
	if p.present(path) {
		return true
	}
	parent := parentPath(path)
	if p.present(parent) && p.usable(parent) {
		p.add(p.line(parent), path, "required")
	}
	return false
}

// given reports whether the field at path is present with a valid value: the checks
// below run only on those (and on defaults, which are valid).
func (p *parser) given(path string) bool {
	return p.present(path) && p.usable(path)
}

func (p *parser) errorAt(path, format string, args ...any) {
	p.add(p.line(path), path, format, args...)
}

func (p *parser) validateConfig(c *Config) {
	if p.require("node") && p.usable("node") {
		p.validateNode(&c.Node)
	}
	if c.BGP != nil && p.usable("bgp") {
		p.validateBGP(c.BGP)
	}
	if c.Fleet != nil && p.usable("fleet") {
		p.validateFleet(c.Fleet)
		if p.given("services") {
			p.errorAt("services", "a node with a fleet section takes its services from the fleet store, not from this file: seed the store with `manifold fleet import --config FILE`, then remove them here")
		}
	}
	if c.Tunnels != nil && p.usable("tunnels") {
		p.validateTunnels(c.Tunnels)
	}
	p.validateServices(c)
}

func (p *parser) validateTunnels(t *Tunnels) {
	if p.usable("tunnels.listen") {
		if problem := apiProblem(t.Listen); problem != "" {
			p.errorAt("tunnels.listen", "%s", strings.Replace(problem, "127.0.0.1:9100", DefaultTunnelListen, 1))
		}
	}
	// in the schema's order: the errors come out in it, the same every time
	for _, fv := range [][2]string{{"tunnels.cert_file", t.CertFile}, {"tunnels.key_file", t.KeyFile}, {"tunnels.tokens_file", t.TokensFile}} {
		if f := fv[0]; p.require(f) && p.usable(f) && fv[1] == "" {
			p.errorAt(f, "must not be empty")
		}
	}
	if ip := "tunnels.idle_timeout"; p.given(ip) && t.IdleTimeout != 0 && (t.IdleTimeout < MinTunnelIdleTimeout || t.IdleTimeout > MaxTunnelIdleTimeout) {
		p.errorAt(ip, "%s is out of range (accepted: 0s for never, or %s..%s)", t.IdleTimeout, MinTunnelIdleTimeout, MaxTunnelIdleTimeout)
	}
	if (t.RelayTokenFile == "") != (t.CAFile == "") && p.usable("tunnels.relay_token_file") && p.usable("tunnels.ca_file") {
		missing, given := "tunnels.ca_file", "tunnels.relay_token_file"
		if t.RelayTokenFile == "" {
			missing, given = given, missing
		}
		p.errorAt(missing, "required with %s: a relay sends its token only to edges whose certificate it checked", given)
	}
}

// validateTunnelService checks what a service of forwarding tunnel cannot have: the
// edge joins TCP connections on one port to connectors, so there are no backends to
// hash or check. It may have origins: each connector names the one it serves.
func (p *parser) validateTunnelService(c *Config, s *Service, sp string) {
	f := func(field string) string { return sp + "." + field }
	if c.Tunnels == nil && c.Fleet == nil {
		p.errorAt(f("forwarding"), "a tunnel service needs the node's tunnels section (the edge that serves it)")
	}
	if p.usable(f("protocol")) && s.Protocol != TCP {
		p.errorAt(f("protocol"), "a tunnel service carries tcp only, not %s", s.Protocol)
	}
	if p.usable(f("port")) && s.Port == 0 {
		p.errorAt(f("port"), "a tunnel service needs a port (the edge listens on vip:port)")
	}
	for _, field := range []string{"backends", "health"} {
		if p.given(f(field)) {
			p.errorAt(f(field), "a tunnel service has no %s: its connectors serve it (manifold connect)", field)
		}
	}
}

func (p *parser) validateNode(n *Node) {
	if p.require("node.name") && p.usable("node.name") {
		switch {
		case n.Name == "":
			p.errorAt("node.name", "must not be empty")
		case !nodeName.MatchString(n.Name):
			p.errorAt("node.name", "%s is not a valid name (1..253 of a-z A-Z 0-9 . _ -)", quote(n.Name))
		}
	}
	if p.require("node.interfaces") && p.usable("node.interfaces") {
		if len(n.Interfaces) == 0 {
			p.errorAt("node.interfaces", "must list at least one interface, e.g. [eth0]")
		}
		first := map[string]string{}
		for i, name := range n.Interfaces {
			ip := index("node.interfaces", i)
			if !p.usable(ip) {
				continue
			}
			if !validIfname(name) {
				p.errorAt(ip, "%s is not a valid interface name (%s)", quote(name), ifnameRule)
			} else if f, dup := first[name]; dup {
				p.errorAt(ip, "duplicate interface: same as %s", f)
			} else {
				first[name] = ip
			}
		}
	}
	if p.require("node.address") && p.usable("node.address") {
		p.checkUnicast("node.address", n.Address, false)
	}
	if p.given("node.address6") && p.checkUnicast("node.address6", n.Address6, false) &&
		p.given("node.address") && n.Address.Is6() == n.Address6.Is6() {
		p.errorAt("node.address6", "%s is %s like node.address; address6 must be the other family (%s)",
			n.Address6, family(n.Address6), otherFamily(n.Address6))
	}
	if p.usable("node.api") {
		if msg := apiProblem(n.API); msg != "" {
			p.errorAt("node.api", "%s", msg)
		}
	}
	if p.given("node.api_token_file") {
		if n.APITokenFile == "" {
			p.errorAt("node.api_token_file", "must not be empty (leave it out for no token file)")
		} else if p.given("node.api_token") && n.APIToken != "" {
			p.errorAt("node.api_token_file", "give the token either in api_token or in api_token_file, not both")
		}
	}
	p.validateAPI(n)
	p.validateEntropy(n)
}

// MinAPITokenLen is the shortest API token accepted: 16 characters of a generated
// token (openssl rand -hex 16 gives 32) cannot be guessed over the network.
const MinAPITokenLen = 16

// APITokenProblem says what is wrong with an API token, "" when nothing is: the
// check of node.api_token here and of node.api_token_file's contents at run.
func APITokenProblem(token string) string {
	if len(token) < MinAPITokenLen {
		return fmt.Sprintf("the token has %d characters; it needs at least %d (e.g. openssl rand -hex 16)", len(token), MinAPITokenLen)
	}
	return ""
}

// validateAPI checks the API's token, TLS and names, and refuses an API that
// listens beyond loopback without a token or without TLS unless
// api_insecure_remote says so: a token in clear, or none, hands the node to whoever
// can reach or watch the port.
func (p *parser) validateAPI(n *Node) {
	if p.given("node.api_token") && n.APIToken != "" {
		if msg := APITokenProblem(n.APIToken); msg != "" {
			p.errorAt("node.api_token", "%s", msg)
		}
	}
	for i, h := range n.APIHosts {
		_, err := netip.ParseAddr(h)
		if ip := index("node.api_hosts", i); p.usable(ip) && (!validHostname(h) || err == nil || strings.EqualFold(h, "localhost")) {
			p.errorAt(ip, "%s is not a host name (IP addresses and localhost need no listing)", quote(h))
		}
	}
	for _, f := range []struct{ path, value, other string }{
		{"node.api_cert_file", n.APICertFile, "node.api_key_file"},
		{"node.api_key_file", n.APIKeyFile, "node.api_cert_file"},
	} {
		switch {
		case !p.given(f.path):
		case f.value == "":
			p.errorAt(f.path, "must not be empty (leave it out for no TLS)")
		case !p.present(f.other):
			p.errorAt(f.other, "required with %s: TLS needs the certificate and its key", f.path)
		}
	}
	if !p.usable("node.api") || !p.usable("node.api_insecure_remote") || apiProblem(n.API) != "" || APIOnLoopback(n.API) || n.APIInsecureRemote {
		return
	}
	var missing []string
	if n.APIToken == "" && n.APITokenFile == "" {
		missing = append(missing, "a token (api_token_file or api_token)")
	}
	if n.APICertFile == "" || n.APIKeyFile == "" {
		missing = append(missing, "TLS (api_cert_file and api_key_file)")
	}
	if len(missing) > 0 {
		p.errorAt("node.api", "%s listens beyond loopback without %s: anyone who reaches or watches the port could change the node; add them, listen on 127.0.0.1, or set api_insecure_remote: true to accept that",
			quote(n.API), strings.Join(missing, " and without "))
	}
}

// APIOnLoopback reports whether the API address (host:port) is on loopback only: a
// loopback IP address or localhost. Any other name may resolve beyond it, and an empty
// host is every address.
func APIOnLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Prefix lengths of node.entropy_prefix4/6: the data plane fills the other bits from
// the flow hash.
const (
	EntropyPrefix4Bits = 16
	EntropyPrefix6Bits = 64
)

// validateEntropy checks the entropy prefixes: each of its family and length, and one
// for each family the node has an address of when entropy_source is on.
func (p *parser) validateEntropy(n *Node) {
	for _, e := range []struct {
		field string
		pfx   netip.Prefix
		v6    bool
		bits  int
	}{
		{"node.entropy_prefix4", n.EntropyPrefix4, false, EntropyPrefix4Bits},
		{"node.entropy_prefix6", n.EntropyPrefix6, true, EntropyPrefix6Bits},
	} {
		fam := map[bool]string{false: "IPv4", true: "IPv6"}[e.v6]
		switch {
		case !p.usable(e.field):
		case p.given(e.field) && e.pfx.Addr().Is6() != e.v6:
			p.errorAt(e.field, "%s is not an %s prefix", e.pfx, fam)
		case p.given(e.field) && e.pfx.Bits() != e.bits:
			p.errorAt(e.field, "%s: must be a /%d (the flow hash picks the other %d bits)", e.pfx, e.bits, map[bool]int{false: 32, true: 128}[e.v6]-e.bits)
		case p.given(e.field) && p.usable("node.entropy_source") && !n.EntropySource:
			p.errorAt(e.field, "only used with entropy_source: true")
		case !p.present(e.field) && n.EntropySource && p.usable("node.entropy_source") && n.SourceFor(e.v6).IsValid():
			p.errorAt(e.field, "required when entropy_source is true and the node has an %s address", fam)
		}
	}
}

func (p *parser) validateFleet(f *Fleet) {
	if p.require("fleet.etcd") && p.usable("fleet.etcd") && p.require("fleet.etcd.endpoints") && p.usable("fleet.etcd.endpoints") {
		if len(f.Endpoints) == 0 {
			p.errorAt("fleet.etcd.endpoints", "must list at least one etcd client URL")
		}
		for i, e := range f.Endpoints {
			if problem := endpointProblem(e); problem != "" {
				p.errorAt(index("fleet.etcd.endpoints", i), "%q %s", e, problem)
			}
		}
	}
	if (f.CertFile == "") != (f.KeyFile == "") && p.usable("fleet.etcd") {
		missing := "fleet.etcd.key_file"
		if f.CertFile == "" {
			missing = "fleet.etcd.cert_file"
		}
		p.errorAt(missing, "required with %s: a client certificate needs its key", map[bool]string{true: "fleet.etcd.cert_file", false: "fleet.etcd.key_file"}[f.CertFile != ""])
	}
	if (f.Username == "") != (f.PasswordFile == "") && p.usable("fleet.etcd") {
		missing := "fleet.etcd.password_file"
		if f.Username == "" {
			missing = "fleet.etcd.username"
		}
		p.errorAt(missing, "username and password_file go together")
	}
	if i, problem := f.PasswordInClear(); i >= 0 && p.usable("fleet.etcd.endpoints") {
		p.errorAt(index("fleet.etcd.endpoints", i), "%s", problem)
	}
	if pp := "fleet.prefix"; p.given(pp) && (!strings.HasPrefix(f.Prefix, "/") || strings.HasSuffix(f.Prefix, "/") || strings.ContainsAny(f.Prefix, " \t\n")) {
		p.errorAt(pp, "%q must start with / and not end with one (like /manifold or /fleets/eu)", f.Prefix)
	}
}

func (p *parser) validateSteer(s *Steer) {
	if p.require("fleet") && p.usable("fleet") {
		p.validateFleet(&s.Fleet)
	}
	if np := "steer.name"; p.usable(np) && s.Name == "" {
		p.errorAt(np, "must not be empty (the host has no name to default to)")
	}
	checkDuration := func(path string, d, lo, hi time.Duration) {
		if p.given(path) && (d < lo || d > hi) {
			p.errorAt(path, "%s is out of range (accepted: %s..%s)", d, lo, hi)
		}
	}
	checkDuration("steer.interval", s.Interval, MinSteerInterval, MaxSteerInterval)
	checkDuration("steer.lease", s.Lease, MinSteerLease, MaxSteerLease)
	if lp := "steer.lease"; p.given(lp) && s.Lease%time.Second != 0 {
		p.errorAt(lp, "%s is not whole seconds (etcd's leases are)", s.Lease)
	}
	if mp := "steer.metrics"; p.given(mp) {
		if msg := apiProblem(s.Metrics); msg != "" {
			p.errorAt(mp, "%s", msg)
		}
	}
}

// endpointProblem says what is wrong with an etcd client URL ("" when nothing).
func endpointProblem(e string) string {
	u, err := url.Parse(e)
	switch {
	case err != nil:
		return "is not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must start with http:// or https://"
	case u.Hostname() == "" || u.Port() == "":
		return "must name a host and a port (http://10.0.0.5:2379)"
	case u.Path != "" && u.Path != "/":
		return "must not have a path"
	}
	return ""
}

func (p *parser) validateBGP(b *BGP) {
	p.require("bgp.asn")
	if p.require("bgp.router_id") && p.usable("bgp.router_id") && (!b.RouterID.Is4() || b.RouterID.IsUnspecified()) {
		p.errorAt("bgp.router_id", "%s is not a valid router id (a non-zero IPv4 address)", b.RouterID)
	}
	if dp := "bgp.drain_time"; p.given(dp) && (b.DrainTime < 0 || b.DrainTime > MaxDrainTime) {
		p.errorAt(dp, "%s is out of range (accepted: 0s..%s)", b.DrainTime, MaxDrainTime)
	}
	if !p.require("bgp.peers") || !p.usable("bgp.peers") {
		return
	}
	if len(b.Peers) == 0 {
		p.errorAt("bgp.peers", "must list at least one peer")
	}
	first := map[netip.Addr]string{}
	for i, peer := range b.Peers {
		pp := index("bgp.peers", i)
		if !p.usable(pp) {
			continue
		}
		if ap := pp + ".address"; p.require(ap) && p.usable(ap) && p.checkUnicast(ap, peer.Address, false) {
			if f, dup := first[peer.Address]; dup {
				p.errorAt(ap, "duplicate peer: same address as %s", f)
			} else {
				first[peer.Address] = pp
			}
		}
		if p.require(pp+".asn") && p.given(pp+".ebgp_multihop") && peer.ASN == b.ASN {
			p.errorAt(pp+".ebgp_multihop", "only for eBGP peers: this peer has the node's own ASN %d (iBGP)", b.ASN)
		}
		if hp := pp + ".hold_time"; p.given(hp) {
			h := peer.HoldTime
			if h != 0 && (h < MinHoldTime || h > MaxHoldTime) {
				p.errorAt(hp, "%s is out of range (accepted: 0s for no keepalives, or 3s..65535s)", h)
			} else if h%time.Second != 0 {
				p.errorAt(hp, "%s is not a whole number of seconds", h)
			}
		}
		if pw := pp + ".password"; p.given(pw) && len(peer.Password) > MaxPasswordLen {
			p.errorAt(pw, "too long: %d bytes (TCP MD5 keys are at most %d bytes)", len(peer.Password), MaxPasswordLen)
		}
		if peer.BFD != nil && p.usable(pp+".bfd") {
			for _, d := range []struct {
				key string
				v   time.Duration
			}{{"min_rx", peer.BFD.MinRx}, {"min_tx", peer.BFD.MinTx}} {
				if dp := pp + ".bfd." + d.key; p.given(dp) && (d.v < MinBFDInterval || d.v > MaxBFDInterval) {
					p.errorAt(dp, "%s is out of range (accepted: %s..%s)", d.v, MinBFDInterval, MaxBFDInterval)
				}
			}
		}
	}
}

func (p *parser) validateServices(c *Config) {
	b := newBetween()
	for i := range c.Services {
		s := &c.Services[i]
		sp := index("services", i)
		if !p.usable(sp) {
			continue
		}
		f := func(field string) string { return sp + "." + field }
		vipOK := p.validateService(c, s, sp)
		b.check(p, c, i, p.given(f("name")), vipOK && p.usable(f("forwarding")) && p.usable(f("port")) && p.usable(f("protocol")))
	}
}

// between is what must hold between the services of a node, checked one service after
// the other in the order of the list: unique names, and no two services that Clash.
type between struct {
	names map[string]string
	// the candidates for Clash: the service of each vip/port/protocol, and the first
	// of each VIP (the services of a VIP agree on being tunnels or not), so that a
	// thousand services on one VIP cost what one does
	keys map[ServiceKey]int
	vips map[netip.Addr]int
}

func newBetween() *between {
	return &between{names: map[string]string{}, keys: map[ServiceKey]int{}, vips: map[netip.Addr]int{}}
}

// check checks service i of c against those checked before it. named: its name was
// given; clashOK: its vip, port, protocol and forwarding are usable for Clash.
func (b *between) check(p *parser, c *Config, i int, named, clashOK bool) {
	s := &c.Services[i]
	sp := index("services", i)
	if named && serviceName.MatchString(s.Name) {
		if other, dup := b.names[s.Name]; dup {
			p.errorAt(sp+".name", "duplicate service name: same as %s", other)
		} else {
			b.names[s.Name] = sp
		}
	}
	if !clashOK {
		return
	}
	field, why := "", ""
	if j, ok := b.keys[s.Key()]; ok {
		field, why = Clash(s, &c.Services[j], index("services", j))
	}
	if j, ok := b.vips[s.VIP]; ok && why == "" {
		field, why = Clash(s, &c.Services[j], index("services", j))
	}
	if why != "" {
		p.errorAt(strings.TrimSuffix(sp+"."+field, "."), "%s", why)
		return
	}
	b.keys[s.Key()] = i
	if _, ok := b.vips[s.VIP]; !ok {
		b.vips[s.VIP] = i
	}
}

// Fits checks what must hold between service i of c and the other services, with
// Parse's errors: those Parse reports for c's services list because of service i
// (fields of the file: services[j].…). Every service of c is valid alone (Parse or
// ParseFileService took it) and the others are valid together (Parse took them): so
// only the services of service i's name or VIP can be in question, and Fits checks
// those alone, in the order of the list, as Parse checks them all. It costs a look at
// each service, not a parse.
func Fits(file string, c *Config, i int) error {
	p := newParser(file)
	b := newBetween()
	s := &c.Services[i]
	for j := range c.Services {
		if o := &c.Services[j]; j == i || o.VIP == s.VIP || o.Name == s.Name {
			b.check(p, c, j, true, true)
		}
	}
	return p.errs.sorted()
}

// ServiceKey is what one service of a node alone may have: its vip, port and protocol.
type ServiceKey struct {
	VIP      netip.Addr
	Port     uint16
	Protocol Protocol
}

// Key is the service's ServiceKey.
func (s *Service) Key() ServiceKey { return ServiceKey{s.VIP, s.Port, s.Protocol} }

// validateService checks what one service can be checked for alone, within the node's
// config c (its node addresses and tunnels section), and reports whether its VIP is
// usable for the checks between services (Clash).
func (p *parser) validateService(c *Config, s *Service, sp string) (vipOK bool) {
	f := func(field string) string { return sp + "." + field }
	if p.require(f("name")) && p.usable(f("name")) && !serviceName.MatchString(s.Name) {
		p.errorAt(f("name"), "%s is not a valid name (1..63 of a-z A-Z 0-9 . _ -)", quote(s.Name))
	}
	vipOK = p.require(f("vip")) && p.usable(f("vip")) && p.checkUnicast(f("vip"), s.VIP, true)
	// node.address is required: valid here when the node's file gave it
	if vipOK && c.Node.Address.IsValid() && p.usable("node.address6") && !c.Node.SourceFor(s.VIP.Is6()).IsValid() {
		fam := family(s.VIP)
		p.errorAt(f("vip"), "%s VIP needs an %s node address (node.address6)", fam, fam)
	}

	if p.usable(f("table_size")) {
		if !maglev.IsPrime(uint64(s.TableSize)) {
			p.errorAt(f("table_size"), "%d is not prime (try %d)", s.TableSize, nextPrime(uint64(s.TableSize)))
		} else if p.usable(f("backends")) && uint64(s.TableSize) <= uint64(len(s.Backends)) {
			if try := nextPrime(uint64(max(len(s.Backends)+1, MinTableSize))); try <= MaxTableSize {
				p.errorAt(f("table_size"), "%d is too small for %d backends (must be greater than the number of backends; try %d)",
					s.TableSize, len(s.Backends), try)
			} else {
				p.errorAt(f("backends"), "too many backends: %d (at most %d)", len(s.Backends), MaxTableSize-1)
			}
		}
	}

	if p.usable(f("backends")) {
		first := map[netip.Addr]string{}
		for j, b := range s.Backends {
			bp := index(f("backends"), j)
			ap := bp + ".address"
			if !p.usable(bp) || !p.require(ap) || !p.usable(ap) || !p.checkUnicast(ap, b.Address, false) {
				continue
			}
			if vipOK && b.Address.Is6() != s.VIP.Is6() {
				p.errorAt(ap, "%s is %s but the vip is %s (backends must be of the vip's family)",
					b.Address, family(b.Address), family(s.VIP))
			} else if other, dup := first[b.Address]; dup {
				p.errorAt(ap, "duplicate backend: same address as %s", other)
			} else {
				first[b.Address] = bp
			}
		}
	}

	if p.given(f("backend_port")) && p.usable(f("forwarding")) && s.Forwarding != NAT {
		p.errorAt(f("backend_port"), "only with forwarding: nat (encapsulated packets keep the client's port)")
	}

	if p.given(f("proxy_protocol")) && p.usable(f("forwarding")) && p.usable(f("origins")) && s.Forwarding != Tunnel && !s.TunnelledOrigins() {
		p.errorAt(f("proxy_protocol"), "only with forwarding: tunnel or an origin reached by tunnel (the connector writes it; ipip and gue backends see the client's address on its packets)")
	}

	if s.Forwarding == Tunnel {
		p.validateTunnelService(c, s, sp)
	}
	p.validateOrigins(s, sp)
	if s.TunnelledOrigins() {
		p.validateMixedService(c, s, sp)
	}
	p.validateHealth(s, sp)
	return vipOK
}

// validateMixedService checks a routed service with origins reached by tunnel: the
// node's tunnel edge ends their share of the flows on vip:port, as it does a tunnel
// service's, and the VIP's own address stands for the node's stack in the ring.
func (p *parser) validateMixedService(c *Config, s *Service, sp string) {
	f := func(field string) string { return sp + "." + field }
	if c.Tunnels == nil && c.Fleet == nil {
		p.errorAt(f("origins"), "an origin reached by tunnel needs the node's tunnels section (the edge that serves it)")
	}
	if p.usable(f("protocol")) && s.Protocol != TCP {
		p.errorAt(f("protocol"), "a service with an origin reached by tunnel carries tcp only, not %s (the tunnel edge joins tcp connections)", s.Protocol)
	}
	if p.usable(f("port")) && s.Port == 0 {
		p.errorAt(f("port"), "a service with an origin reached by tunnel needs a port (the tunnel edge listens on vip:port)")
	}
	if !p.usable(f("backends")) {
		return
	}
	for j, b := range s.Backends {
		if ap := index(f("backends"), j) + ".address"; p.usable(ap) && b.Address == s.VIP {
			p.errorAt(ap, "%s is the vip: in a service with an origin reached by tunnel, the vip's address stands for the node's own stack", b.Address)
		}
	}
}

// Clash says why services s and other (named so in the message) cannot run on one
// node, and which field of s the problem is about ("" for the service as a whole);
// why is "" when they can. Both are valid services. The config file checks its
// services with it, and the fleet each changed service against those it keeps.
func Clash(s, other *Service, name string) (field, why string) {
	switch {
	case s.VIP != other.VIP:
		return "", ""
	case (s.Forwarding == Tunnel) != (other.Forwarding == Tunnel):
		// the XDP program passes a tunnel VIP's packets to the stack only when no
		// service of its own has the VIP
		return "forwarding", fmt.Sprintf("vip %s is also the vip of %s, and a tunnel service's vip is the edge's alone: tunnel and other services do not share a vip", s.VIP, name)
	case s.Port == other.Port && s.Protocol == other.Protocol:
		return "", "duplicate service: same vip/port/protocol as " + name
	}
	return "", ""
}

// validateOrigins checks that the origins have unique names and that, when there are
// any, every backend names one of them: steering weighs a backend by its origin's share.
func (p *parser) validateOrigins(s *Service, sp string) {
	f := func(field string) string { return sp + "." + field }
	names := map[string]string{}
	if p.usable(f("origins")) {
		for i, o := range s.Origins {
			np := index(f("origins"), i) + ".name"
			if !p.usable(index(f("origins"), i)) || !p.require(np) || !p.usable(np) {
				continue
			}
			if !serviceName.MatchString(o.Name) {
				p.errorAt(np, "%s is not a valid name (1..63 of a-z A-Z 0-9 . _ -)", quote(o.Name))
			} else if other, dup := names[o.Name]; dup {
				p.errorAt(np, "duplicate origin name: same as %s", other)
			} else {
				names[o.Name] = np
			}
			p.require(index(f("origins"), i) + ".capacity")
			tp, wp := index(f("origins"), i)+".tunnel", index(f("origins"), i)+".weight"
			switch {
			case o.Tunnel && p.usable(f("forwarding")) && s.Forwarding == Tunnel:
				p.errorAt(tp, "a tunnel service's origins are all reached by tunnel: tunnel: true is for an origin of an ipip, gue or nat service")
			case p.given(wp) && !o.Tunnel:
				p.errorAt(wp, "only with tunnel: true (an origin with backends weighs by its backends' weights)")
			}
		}
	}
	if !p.usable(f("origins")) || !p.usable(f("backends")) {
		return
	}
	tunnelled := map[string]bool{}
	for _, o := range s.Origins {
		tunnelled[o.Name] = o.Tunnel
	}
	for j, b := range s.Backends {
		bp := index(f("backends"), j)
		op := bp + ".origin"
		switch {
		case !p.usable(bp) || !p.usable(op):
		case len(s.Origins) == 0 && b.Origin != "":
			p.errorAt(op, "%s is not an origin of the service (it has no origins)", quote(b.Origin))
		case len(s.Origins) > 0 && !p.present(op):
			p.add(p.line(bp), op, "required: the service has origins, every backend names one")
		case len(s.Origins) > 0 && names[b.Origin] == "":
			p.errorAt(op, "%s is not an origin of the service (origins: %s)", quote(b.Origin), originNames(s.Origins))
		case tunnelled[b.Origin]:
			p.errorAt(op, "%s is reached by tunnel (tunnel: true): its connectors serve it, it has no backends", quote(b.Origin))
		}
	}
}

func originNames(origins []Origin) string {
	out := make([]string, len(origins))
	for i, o := range origins {
		out[i] = o.Name
	}
	return strings.Join(out, ", ")
}

func (p *parser) validateHealth(s *Service, sp string) {
	hp := sp + ".health"
	if !p.usable(hp) {
		return
	}
	h := &s.Health
	f := func(field string) string { return hp + "." + field }
	kindOK := p.usable(f("kind"))

	if kindOK && h.Kind != HealthNone && !p.present(f("port")) && p.usable(sp+".port") && s.Port == 0 {
		p.errorAt(f("port"), "required when kind is %s and the service port is 0 (all ports)", h.Kind)
	}

	if p.given(f("path")) {
		switch {
		case kindOK && h.Kind != HealthHTTP:
			p.errorAt(f("path"), "only valid with kind http (kind is %s)", h.Kind)
		case !strings.HasPrefix(h.Path, "/"):
			p.errorAt(f("path"), "%s must start with '/'", quote(h.Path))
		case strings.ContainsFunc(h.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			p.errorAt(f("path"), "%s must not contain spaces or control characters", quote(h.Path))
		}
	}

	intervalOK := p.usable(f("interval"))
	if p.given(f("interval")) && h.Interval < MinHealthInterval {
		intervalOK = false
		p.errorAt(f("interval"), "%s is too short (at least %s)", h.Interval, MinHealthInterval)
	}
	if p.given(f("timeout")) {
		if h.Timeout <= 0 {
			p.errorAt(f("timeout"), "must be greater than 0")
		} else if intervalOK && h.Timeout > h.Interval {
			p.errorAt(f("timeout"), "%s is longer than the interval (%s)", h.Timeout, h.Interval)
		}
	}
}

func (p *parser) validateBackend(a *BackendAgent) {
	if !p.require("backend") || !p.usable("backend") {
		return
	}
	if p.require("backend.interface") && p.usable("backend.interface") && !validIfname(a.Interface) {
		p.errorAt("backend.interface", "%s is not a valid interface name (%s)", quote(a.Interface), ifnameRule)
	}
	if np := "kubernetes.node_name"; a.Kubernetes != nil && p.usable("kubernetes") && p.usable(np) && a.Kubernetes.NodeName == "" {
		p.errorAt(np, "must not be empty (the host has no name to default to)")
	}
	// with a kubernetes section the VIPs may all come from the cluster
	if (a.Kubernetes == nil && !p.require("backend.vips")) || !p.usable("backend.vips") {
		return
	}
	if len(a.VIPs) == 0 && a.Kubernetes == nil {
		p.errorAt("backend.vips", "must list at least one VIP (or take them from a kubernetes section)")
	}
	first := map[netip.Addr]string{}
	for i, vip := range a.VIPs {
		vp := index("backend.vips", i)
		if !p.usable(vp) || !p.checkUnicast(vp, vip, true) {
			continue
		}
		if other, dup := first[vip]; dup {
			p.errorAt(vp, "duplicate vip: same as %s", other)
		} else {
			first[vip] = vp
		}
	}
}

// checkUnicast reports an address that cannot be a node, peer, backend or (vip: true)
// VIP address, and returns whether it is fine.
func (p *parser) checkUnicast(path string, a netip.Addr, vip bool) bool {
	switch {
	case a.IsUnspecified():
		p.errorAt(path, "%s is unspecified; must be a unicast address", a)
	case a.IsMulticast():
		p.errorAt(path, "%s is multicast; must be a unicast address", a)
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		p.errorAt(path, "%s is the broadcast address; must be a unicast address", a)
	case vip && a.IsLoopback():
		p.errorAt(path, "%s is a loopback address; a VIP must be reachable from the network", a)
	default:
		return true
	}
	return false
}

func family(a netip.Addr) string {
	if a.Is6() {
		return "IPv6"
	}
	return "IPv4"
}

func otherFamily(a netip.Addr) string {
	if a.Is6() {
		return "IPv4"
	}
	return "IPv6"
}

var serviceName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,63}$`)

// nodeName is what a node may be called: its name keys the fleet's records in etcd and
// labels its metrics and logs, so no control or bidi characters, and a Kubernetes
// Node's name (a DNS subdomain, up to 253) fits.
var nodeName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,253}$`)

const ifnameRule = "1..15 bytes, no '/', ':', whitespace or control characters, not . or .."

// validIfname reports whether the kernel accepts s as an interface name
// (dev_valid_name), also refusing control characters.
func validIfname(s string) bool {
	if s == "" || len(s) > MaxIfnameLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// apiProblem checks a host:port listen address and says what is wrong, or "".
func apiProblem(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%s is not host:port (e.g. 127.0.0.1:9100)", quote(s))
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Sprintf("%s: port must be 1..65535", quote(s))
	}
	if host != "" && !validHostname(host) {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Sprintf("%s: %s is not an IP address or host name", quote(s), quote(host))
		}
	}
	return ""
}

var hostLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

func validHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !hostLabel.MatchString(l) {
			return false
		}
	}
	return true
}

// nextPrime returns the smallest prime ≥ n.
func nextPrime(n uint64) uint64 {
	for !maglev.IsPrime(n) {
		n++
	}
	return n
}
