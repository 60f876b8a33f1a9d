package config

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"regexp"
	"runtime"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Link is the desired state of `manifold link --config FILE`: one site-to-site link,
// seen from this side.
type Link struct {
	Name          string
	Local, Remote LinkSite
	// Tunnels is how many WireGuard tunnels carry the link (both sides the same).
	Tunnels int
	// Port is tunnel 0's UDP port at both ends; tunnel i uses Port+i.
	Port uint16
	// SourcePorts is where each tunnel sends from: its own port, or one chosen so that
	// the host's multipath route to the peer puts the tunnels on distinct paths.
	SourcePorts    LinkSourcePorts
	PrivateKeyFile string
	PeerPublicKey  [32]byte
	MTU            int
	// InnerPrefix holds the tunnels' own addresses (probes and next hops).
	InnerPrefix netip.Prefix
	// Devices is the name stem of the tunnels' TUN devices (Devices0, Devices1, …).
	Devices        string
	API            string
	ConnectTimeout time.Duration
	Health         LinkHealth
}

// LinkSourcePorts is the value of link.source_ports.
type LinkSourcePorts string

const (
	// LinkSpread: each tunnel sends from a port the host's multipath route hashes onto
	// a path of its own (round robin when there are more tunnels than paths).
	LinkSpread LinkSourcePorts = "spread"
	// LinkFixed: each tunnel sends from its own port, port+i; the network's hash
	// places it.
	LinkFixed LinkSourcePorts = "fixed"
)

// LinkSite is one end of a link: its outer address and the networks behind it.
type LinkSite struct {
	Address  netip.Addr
	Prefixes []netip.Prefix
}

// LinkHealth is the probing of each tunnel.
type LinkHealth struct {
	Interval   time.Duration
	Rise, Fall int
}

// Defaults and bounds of a link's file (LinkSchema).
const (
	MaxLinkTunnels            = 64
	DefaultLinkPort           = 51820
	DefaultLinkSourcePorts    = LinkSpread
	MaxLinkPort               = 65535 - MaxLinkTunnels + 1 // the last tunnel's port fits
	DefaultLinkMTU            = 1420
	MinLinkMTU                = 1280 // IPv6's minimum, so that either family crosses
	MaxLinkMTU                = 9000
	DefaultLinkInnerPrefix    = "169.254.200.0/24"
	DefaultLinkDevices        = "mlink"
	DefaultLinkAPI            = "127.0.0.1:9300"
	DefaultLinkConnectTimeout = 30 * time.Second
	MinLinkConnectTimeout     = time.Second
	MaxLinkConnectTimeout     = time.Hour
	DefaultLinkProbeInterval  = 100 * time.Millisecond
	MinLinkProbeInterval      = 10 * time.Millisecond
	MaxLinkProbeInterval      = 10 * time.Second
	DefaultLinkRise           = 3
	DefaultLinkFall           = 3
)

// LoadLink reads and parses the config file of `manifold link --config`.
func LoadLink(path string) (*Link, error) {
	return load(path, ParseLink)
}

// ParseLink parses and validates a config file of `manifold link --config`. file is
// used only in error messages.
func ParseLink(file string, data []byte) (*Link, error) {
	return parseLink(newParser(file), data)
}

func parseLink(p *parser, data []byte) (*Link, error) {
	root := p.document(data, strings.Join(keysOf(LinkSchema, ""), ", "))
	if root == nil {
		return nil, p.errs.sorted()
	}
	l := &Link{}
	p.mapping(root, "", keysOf(LinkSchema, ""), func(_, path string, v *yaml.Node) {
		p.link(v, path, l)
	})
	applyLinkDefaults(l, p.present)
	p.validateLink(l)
	if err := p.errs.sorted(); err != nil {
		return nil, err
	}
	return l, nil
}

func (p *parser) link(n *yaml.Node, path string, l *Link) {
	p.mapping(n, path, keysOf(LinkSchema, "link"), func(key, path string, v *yaml.Node) {
		switch key {
		case "name":
			l.Name, _ = p.str(v, path)
		case "local":
			p.linkSite(v, path, &l.Local)
		case "remote":
			p.linkSite(v, path, &l.Remote)
		case "tunnels":
			x, _ := p.integer(v, path)
			l.Tunnels = int(x)
		case "port":
			x, _ := p.integer(v, path)
			l.Port = uint16(x)
		case "source_ports":
			s, _ := p.enum(v, path)
			l.SourcePorts = LinkSourcePorts(s)
		case "private_key_file":
			l.PrivateKeyFile = p.filePath(v, path)
		case "peer_public_key":
			// never quoted in a message: a private key pasted here by mistake stays out of logs
			if s, ok := p.str(v, path); ok {
				key, err := ParseWireGuardKey(s)
				if err != nil {
					p.fail(v, path, "%v", err)
				}
				l.PeerPublicKey = key
			}
		case "mtu":
			x, _ := p.integer(v, path)
			l.MTU = int(x)
		case "inner_prefix":
			l.InnerPrefix, _ = p.prefix(v, path)
		case "devices":
			l.Devices, _ = p.str(v, path)
		case "api":
			l.API, _ = p.str(v, path)
		case "connect_timeout":
			l.ConnectTimeout, _ = p.duration(v, path)
		case "health":
			p.mapping(v, path, keysOf(LinkSchema, "link.health"), func(key, path string, v *yaml.Node) {
				switch key {
				case "interval":
					l.Health.Interval, _ = p.duration(v, path)
				case "rise":
					x, _ := p.integer(v, path)
					l.Health.Rise = int(x)
				case "fall":
					x, _ := p.integer(v, path)
					l.Health.Fall = int(x)
				}
			})
		}
	})
}

func (p *parser) linkSite(n *yaml.Node, path string, s *LinkSite) {
	p.mapping(n, path, []string{"address", "prefixes"}, func(key, path string, v *yaml.Node) {
		switch key {
		case "address":
			s.Address, _ = p.addr(v, path)
		case "prefixes":
			p.list(v, path, func(_ int, ipath string, it *yaml.Node) {
				pfx, _ := p.prefix(it, ipath)
				s.Prefixes = append(s.Prefixes, pfx)
			})
		}
	})
}

// ParseWireGuardKey decodes a WireGuard key as wg(8) writes it: 32 bytes in base64.
// Its errors never quote the key.
func ParseWireGuardKey(s string) ([32]byte, error) {
	var key [32]byte
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	switch {
	case err != nil:
		return key, errBadKey("is not base64")
	case len(b) != len(key):
		return key, errBadKey("decodes to %d bytes, not 32", len(b))
	}
	copy(key[:], b)
	return key, nil
}

func errBadKey(format string, args ...any) error {
	return fmt.Errorf("not a WireGuard key (as wg genkey and wg pubkey print them): it "+format, args...)
}

func applyLinkDefaults(l *Link, present func(path string) bool) {
	if !present("link.tunnels") {
		// one tunnel per core: each tunnel's crypto runs on about one core at each end
		l.Tunnels = min(runtime.NumCPU(), MaxLinkTunnels)
	}
	if !present("link.port") {
		l.Port = DefaultLinkPort
	}
	if !present("link.source_ports") {
		l.SourcePorts = DefaultLinkSourcePorts
	}
	if !present("link.mtu") {
		l.MTU = DefaultLinkMTU
	}
	if !present("link.inner_prefix") {
		l.InnerPrefix = netip.MustParsePrefix(DefaultLinkInnerPrefix)
	}
	if !present("link.devices") {
		l.Devices = DefaultLinkDevices
	}
	if !present("link.api") {
		l.API = DefaultLinkAPI
	}
	if !present("link.connect_timeout") {
		l.ConnectTimeout = DefaultLinkConnectTimeout
	}
	if !present("link.health.interval") {
		l.Health.Interval = DefaultLinkProbeInterval
	}
	if !present("link.health.rise") {
		l.Health.Rise = DefaultLinkRise
	}
	if !present("link.health.fall") {
		l.Health.Fall = DefaultLinkFall
	}
}

// deviceStem leaves room for two digits of the tunnel's index within the kernel's 15
// bytes of an interface name.
var deviceStem = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,12}$`)

func (p *parser) validateLink(l *Link) {
	if !p.require("link") || !p.usable("link") {
		return
	}
	for _, f := range []string{"link.name", "link.local", "link.remote", "link.private_key_file", "link.peer_public_key"} {
		p.require(f)
	}
	for _, side := range []string{"link.local", "link.remote"} {
		if p.present(side) && p.usable(side) {
			p.require(side + ".address")
			p.require(side + ".prefixes")
		}
	}
	if np := "link.name"; p.given(np) && !serviceName.MatchString(l.Name) {
		p.errorAt(np, "%q is not a link name (1..63 of a-z A-Z 0-9 . _ -)", l.Name)
	}
	if fp := "link.private_key_file"; p.given(fp) && l.PrivateKeyFile == "" {
		p.errorAt(fp, "must not be empty")
	}
	if dp := "link.devices"; p.usable(dp) && !deviceStem.MatchString(l.Devices) {
		p.errorAt(dp, "%q is not a device stem (a-z first, then a-z 0-9 _ -, at most 13)", l.Devices)
	}
	for _, d := range []struct {
		path     string
		v        time.Duration
		min, max time.Duration
	}{
		{"link.connect_timeout", l.ConnectTimeout, MinLinkConnectTimeout, MaxLinkConnectTimeout},
		{"link.health.interval", l.Health.Interval, MinLinkProbeInterval, MaxLinkProbeInterval},
	} {
		if p.given(d.path) && (d.v < d.min || d.v > d.max) {
			p.errorAt(d.path, "%s is out of range (accepted: %s..%s)", d.v, d.min, d.max)
		}
	}
	if ip := "link.inner_prefix"; p.usable(ip) {
		switch {
		case !l.InnerPrefix.Addr().Is4():
			p.errorAt(ip, "%s is not IPv4", l.InnerPrefix)
		case l.InnerPrefix.Bits() > 31:
			p.errorAt(ip, "%s is too small: each tunnel takes two addresses", l.InnerPrefix)
		case p.usable("link.tunnels") && 2*l.Tunnels > 1<<(32-l.InnerPrefix.Bits()):
			p.errorAt(ip, "%s holds %d addresses, %d tunnels need %d", l.InnerPrefix, 1<<(32-l.InnerPrefix.Bits()), l.Tunnels, 2*l.Tunnels)
		}
	}
	addrs := p.usable("link.local.address") && p.usable("link.remote.address") && l.Local.Address.IsValid() && l.Remote.Address.IsValid()
	if addrs {
		switch {
		case l.Local.Address == l.Remote.Address:
			p.errorAt("link.remote.address", "%s is the local address too", l.Remote.Address)
		case l.Local.Address.Is4() != l.Remote.Address.Is4():
			p.errorAt("link.remote.address", "%s is not of the local address's family (%s)", l.Remote.Address, l.Local.Address)
		}
	}
	// Every prefix is unique to one side and overlaps nothing else the link routes:
	// an overlap would send a site's own traffic into the tunnels, or loop them.
	type named struct {
		path string
		pfx  netip.Prefix
	}
	var all []named
	for _, side := range []struct {
		path string
		s    *LinkSite
	}{{"link.local.prefixes", &l.Local}, {"link.remote.prefixes", &l.Remote}} {
		if !p.usable(side.path) {
			continue
		}
		for i, pfx := range side.s.Prefixes {
			if pfx.IsValid() {
				all = append(all, named{index(side.path, i), pfx})
			}
		}
	}
	if p.usable("link.inner_prefix") && l.InnerPrefix.IsValid() {
		all = append(all, named{"link.inner_prefix", l.InnerPrefix})
	}
	for i, a := range all {
		for _, b := range all[:i] {
			if a.pfx.Overlaps(b.pfx) {
				p.errorAt(a.path, "%s overlaps %s (%s)", a.pfx, b.pfx, b.path)
				break
			}
		}
	}
	if addrs {
		for _, n := range all {
			for _, a := range []netip.Addr{l.Local.Address, l.Remote.Address} {
				if n.pfx.Contains(a) {
					p.errorAt(n.path, "%s holds the outer address %s: the tunnels' own packets would enter them", n.pfx, a)
				}
			}
		}
	}
}
