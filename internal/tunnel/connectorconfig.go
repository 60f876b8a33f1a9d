package tunnel

import (
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
)

// Bounds and defaults of the connector's config.
const (
	MaxCapacity      = 65535
	DefaultCapacity  = 100
	DefaultDrainTime = 30 * time.Second
	MaxDrainTime     = 5 * time.Minute
)

// ConnectorConfig is the file of `manifold connect --config FILE`, validated, with
// the files it names read.
type ConnectorConfig struct {
	// Name tells this connector apart in the edges' status (default: the host name).
	Name  string
	Edges []string // host:port of each edge; the connector keeps a tunnel to every one
	// Token is the contents of token_file, surrounding whitespace trimmed.
	Token     string
	TokenFile string
	CAFile    string
	CAs       *x509.CertPool // the certificates of ca_file: the edges' certificates must chain to one
	// ServerName is the name the edges' certificates are checked against; empty, the
	// host of each edge address.
	ServerName string
	// DrainTime bounds how long a draining connector waits for its open streams.
	DrainTime time.Duration
	// Transport is the tunnels' transport: TransportAuto (QUIC, TCP where UDP does
	// not pass; "" is auto), TransportQUIC or TransportTCP.
	Transport string
	Services  []ServiceConfig
	// Clock drives the reconnection backoff, the pings and the drain time (nil: the
	// real one; not read from the file). The network's deadlines stay on the real clock.
	Clock clock.Clock
}

// ServiceConfig is one service the connector serves.
type ServiceConfig struct {
	Name     string
	To       string // host:port of the origin, dialled for every stream
	Capacity int    // concurrent streams it takes
	// Origin names the origin (of the service's origins on the edges) this connector
	// serves the service for; "" for a service without origins.
	Origin string
}

var connectorKeys = []string{"name", "edges", "token_file", "ca_file", "server_name", "drain_time", "transport", "services"}

// LoadConnectorConfig reads and validates a connector's config file, and the token
// and CA files it names. On any problem it returns an error listing all of them, each
// as FILE:LINE: field: message. A token file that others may read is warned of on log.
func LoadConnectorConfig(path string, log *slog.Logger) (*ConnectorConfig, error) {
	y := &yamlFile{name: path}
	data, ok := y.readFile(0, "", path)
	if !ok {
		return nil, y.err()
	}
	return ParseConnectorConfig(path, data, log)
}

// ParseConnectorConfig is LoadConnectorConfig on the file's contents; file is used
// only in error messages (the token and CA files are read from disk).
func ParseConnectorConfig(file string, data []byte, log *slog.Logger) (*ConnectorConfig, error) {
	y := &yamlFile{name: file, log: log}
	root := y.document(data)
	if root == nil {
		return nil, y.err()
	}
	fields, ok := y.mapping(root, "", connectorKeys...)
	if !ok {
		return nil, y.err()
	}
	c := &ConnectorConfig{DrainTime: DefaultDrainTime, Transport: TransportAuto}
	if n := fields["name"]; n != nil {
		if s, ok := y.text(n, "name"); ok {
			if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) || len(s) > 63 {
				y.add(n.Line, "name", "must be 1..63 printable characters")
			}
			c.Name = s
		}
	} else if host, err := os.Hostname(); err == nil {
		c.Name = host
	}
	if n := fields["edges"]; n == nil {
		y.add(root.Line, "edges", "required: the edges to dial, e.g. [edge1.example:7443]")
	} else {
		c.Edges = y.edges(n)
	}
	if n := fields["token_file"]; n == nil {
		y.add(root.Line, "token_file", "required: the file holding this connector's token")
	} else if path, ok := y.text(n, "token_file"); ok {
		path = config.PathBeside(y.name, path)
		c.TokenFile = path
		if data, ok := y.readSecret(n.Line, "token_file", path); ok {
			c.Token = strings.TrimSpace(string(data))
			if len(c.Token) < MinTokenLen {
				y.add(n.Line, "token_file", "%s holds no token of at least %d characters", path, MinTokenLen)
			}
		}
	}
	if n := fields["ca_file"]; n == nil {
		y.add(root.Line, "ca_file", "required: the CA that signs the edges' certificates")
	} else if path, ok := y.text(n, "ca_file"); ok {
		path = config.PathBeside(y.name, path)
		c.CAFile = path
		if data, ok := y.readFile(n.Line, "ca_file", path); ok {
			c.CAs = x509.NewCertPool()
			if !c.CAs.AppendCertsFromPEM(data) {
				y.add(n.Line, "ca_file", "%s holds no PEM certificate", path)
			}
		}
	}
	if n := fields["server_name"]; n != nil {
		c.ServerName, _ = y.text(n, "server_name")
	}
	if n := fields["drain_time"]; n != nil {
		if d, ok := y.duration(n, "drain_time", 0, MaxDrainTime); ok {
			c.DrainTime = d
		}
	}
	if n := fields["transport"]; n != nil {
		if t, ok := y.text(n, "transport"); ok {
			if !slices.Contains([]string{TransportAuto, TransportQUIC, TransportTCP}, t) {
				y.add(n.Line, "transport", "%q is not auto, quic or tcp", t)
			}
			c.Transport = t
		}
	}
	if n := fields["services"]; n == nil {
		y.add(root.Line, "services", "required: the services to serve, e.g. [{name: web, to: 127.0.0.1:8000, capacity: 100}]")
	} else {
		c.Services = y.services(n)
	}
	if err := y.err(); err != nil {
		return nil, err
	}
	return c, nil
}

func (y *yamlFile) edges(n *yaml.Node) []string {
	items := y.list(n, "edges", "edge")
	var edges []string
	for i, item := range items {
		path := index("edges", i)
		s, ok := y.text(item, path)
		if !ok {
			continue
		}
		if msg := hostPortProblem(s); msg != "" {
			y.add(item.Line, path, "%s", msg)
		} else if slices.Contains(edges, s) {
			y.add(item.Line, path, "%s is listed twice", s)
		} else {
			edges = append(edges, s)
		}
	}
	return edges
}

func (y *yamlFile) services(n *yaml.Node) []ServiceConfig {
	items := y.list(n, "services", "service")
	var services []ServiceConfig
	for i, item := range items {
		path := index("services", i)
		fields, ok := y.mapping(item, path, "name", "to", "capacity", "origin")
		if !ok {
			continue
		}
		s := ServiceConfig{Capacity: DefaultCapacity}
		if v := fields["name"]; v == nil {
			y.add(item.Line, join(path, "name"), "required")
		} else if name, ok := y.text(v, join(path, "name")); ok {
			switch {
			case !serviceName.MatchString(name):
				y.add(v.Line, join(path, "name"), "%q is not a service name (1..63 of a-z A-Z 0-9 . _ -)", name)
			case slices.ContainsFunc(services, func(o ServiceConfig) bool { return o.Name == name }):
				y.add(v.Line, join(path, "name"), "%s is served twice", name)
			}
			s.Name = name
		}
		if v := fields["to"]; v == nil {
			y.add(item.Line, join(path, "to"), "required: the origin's host:port")
		} else if to, ok := y.text(v, join(path, "to")); ok {
			if msg := hostPortProblem(to); msg != "" {
				y.add(v.Line, join(path, "to"), "%s", msg)
			}
			s.To = to
		}
		if v := fields["capacity"]; v != nil {
			if c, ok := y.integer(v, join(path, "capacity"), 1, MaxCapacity); ok {
				s.Capacity = c
			}
		}
		if v := fields["origin"]; v != nil {
			if origin, ok := y.text(v, join(path, "origin")); ok {
				if !serviceName.MatchString(origin) {
					y.add(v.Line, join(path, "origin"), "%q is not an origin name (1..63 of a-z A-Z 0-9 . _ -)", origin)
				}
				s.Origin = origin
			}
		}
		services = append(services, s)
	}
	return services
}

func hostPortProblem(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "\"" + s + "\" is not host:port"
	}
	if host == "" {
		return "\"" + s + "\" has no host"
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "\"" + s + "\" has no port from 1 to 65535"
	}
	return ""
}
