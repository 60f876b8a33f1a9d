package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The fleet store of the lab: an etcd cluster (Debian's etcd-server) whose members run
// inside LB nodes' namespaces, each on its node's lab address, as members would run on
// the nodes of a site. The nodes reach every member through the router.

// Etcd ports, the IANA ones: each member has a namespace of its own.
const (
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
)

// Etcd is a running etcd cluster of the lab.
type Etcd struct {
	lab     *Lab
	Members []*EtcdMember
}

// EtcdMember is one member; Proc is nil while it is stopped.
type EtcdMember struct {
	Name    string
	Host    *Host
	DataDir string
	Proc    *Process
	args    []string
}

// ClientURL is the member's client endpoint, as a node's fleet.etcd.endpoints names it.
func (m *EtcdMember) ClientURL() string {
	return "http://" + netip.AddrPortFrom(m.Host.Addr4, EtcdClientPort).String()
}

func (m *EtcdMember) peerURL() string {
	return "http://" + netip.AddrPortFrom(m.Host.Addr4, EtcdPeerPort).String()
}

// StartEtcd starts one member on each host, named after it, as one new cluster, and
// waits until every member is healthy (the cluster has a leader).
func (l *Lab) StartEtcd(hosts ...*Host) (*Etcd, error) {
	if _, err := hostprog.Etcd.Path(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	e := &Etcd{lab: l}
	var cluster []string
	for _, h := range hosts {
		m := &EtcdMember{Name: h.Role, Host: h, DataDir: filepath.Join(l.Dir, "etcd-"+h.Role)}
		e.Members = append(e.Members, m)
		cluster = append(cluster, m.Name+"="+m.peerURL())
	}
	for _, m := range e.Members {
		m.args = []string{
			"--name", m.Name,
			"--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL(),
			"--advertise-client-urls", m.ClientURL(),
			"--listen-peer-urls", m.peerURL(),
			"--initial-advertise-peer-urls", m.peerURL(),
			"--initial-cluster", strings.Join(cluster, ","),
			"--initial-cluster-state", "new",
			// a cluster of this lab only, should a member of another lab be reachable
			"--initial-cluster-token", l.Prefix,
			// `manifold fleet import` writes every service in one transaction, and etcd
			// takes 128 operations and 1.5 MiB per request unless told otherwise: the
			// fleet benchmark imports up to 100 000 services
			"--max-txn-ops", "200000", "--max-request-bytes", strconv.Itoa(64 << 20),
			"--logger", "zap", "--log-outputs", "stderr",
		}
		m.args = append(m.args, l.EtcdArgs...)
		if err := e.Start(m); err != nil {
			return e, err
		}
	}
	return e, e.WaitHealthy(20*time.Second, e.Members...)
}

// Endpoints are the client URLs of every member.
func (e *Etcd) Endpoints() []string {
	var urls []string
	for _, m := range e.Members {
		urls = append(urls, m.ClientURL())
	}
	return urls
}

// Member returns the member of that name, or nil.
func (e *Etcd) Member(name string) *EtcdMember {
	for _, m := range e.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Start (re)starts a stopped member on its data directory; it does not wait for it to
// be healthy (a lone member of three never is).
func (e *Etcd) Start(m *EtcdMember) error {
	if m.Proc != nil {
		return fmt.Errorf("etcd %s is running", m.Name)
	}
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return err
	}
	p, err := e.lab.Start(m.Host, "etcd-"+m.Name, hostprog.Etcd, m.args...)
	if err != nil {
		return err
	}
	m.Proc = p
	return nil
}

// Kill stops a member with SIGKILL, the way a machine dies, and waits for it to exit.
func (e *Etcd) Kill(m *EtcdMember) error {
	if m.Proc == nil {
		return fmt.Errorf("etcd %s is not running", m.Name)
	}
	p := m.Proc
	m.Proc = nil
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if err := p.Wait(5 * time.Second); err != nil && p.Running() {
		return err
	}
	return nil
}

// WaitHealthy waits until each of the members answers its /health with true: it runs
// and the cluster has a leader.
func (e *Etcd) WaitHealthy(timeout time.Duration, members ...*EtcdMember) error {
	deadline := time.Now().Add(timeout)
	for _, m := range members {
		if m.Proc == nil {
			return fmt.Errorf("etcd %s is not running", m.Name)
		}
		err := m.Proc.WaitReady(time.Until(deadline), m.healthy)
		if err != nil {
			return fmt.Errorf("etcd %s: %w", m.Name, err)
		}
	}
	return nil
}

func (m *EtcdMember) healthy() error {
	resp, err := HTTPClient(m.Host.NS, time.Second).Get(m.ClientURL() + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("/health: %s: %w", body, err)
	}
	if h.Health != "true" {
		return errors.New("/health: " + strings.TrimSpace(string(body)))
	}
	return nil
}
