package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// ExaBGP (Debian exabgp), the speaker of the dissertation's topology, as a plain eBGP
// peer of every node in the router's namespace. It has no FIB: the routes it received
// are read from the JSON its API process writes to a file.

// ExaBGP is exabgp running in the router namespace.
type ExaBGP struct {
	*Process
	updates string // the file of JSON messages it received
}

// ExaBGPConfig renders exabgp's configuration: one neighbour per node, every UPDATE and
// session change sent, parsed, to a process that appends it to updates.
func ExaBGPConfig(nodes []*Host, nodeASN uint32, sh, updates string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "process receiver {\n\trun %s -c \"cat >> %s\";\n\tencoder json;\n}\n", sh, updates)
	for _, n := range nodes {
		fmt.Fprintf(&b, "\nneighbor %s {\n\trouter-id 10.255.255.3;\n\tlocal-address %s;\n\tlocal-as %d;\n\tpeer-as %d;\n\thold-time 3;\n",
			n.Addr4, n.Gateway4, RouterASN, nodeASN)
		b.WriteString("\tfamily {\n\t\tipv4 unicast;\n\t\tipv6 unicast;\n\t}\n")
		b.WriteString("\tapi {\n\t\tprocesses [ receiver ];\n\t\tneighbor-changes;\n\t\treceive {\n\t\t\tparsed;\n\t\t\tupdate;\n\t\t}\n\t}\n}\n")
	}
	return b.String()
}

// StartExaBGP runs exabgp in the router namespace, as root (it would drop to a user of
// its own), logging to its process log.
func (l *Lab) StartExaBGP(nodes []*Host, nodeASN uint32) (*ExaBGP, error) {
	e := &ExaBGP{updates: filepath.Join(l.Dir, "exabgp-updates.json")}
	sh, err := hostprog.Sh.Path()
	if err != nil {
		return nil, err
	}
	conf, env := filepath.Join(l.Dir, "exabgp.conf"), filepath.Join(l.Dir, "exabgp.env")
	files := map[string]string{
		conf: ExaBGPConfig(nodes, nodeASN, sh, e.updates),
		env:  "[exabgp.daemon]\nuser = 'root'\ndaemonize = false\n[exabgp.log]\ndestination = 'stdout'\n[exabgp.api]\ncli = false\n",
	}
	for path, text := range files {
		if err := writeFileAtomic(path, []byte(text)); err != nil {
			return nil, err
		}
	}
	p, err := l.Start(l.Router, "exabgp", hostprog.ExaBGP, "--env", env, conf)
	if err != nil {
		return nil, err
	}
	e.Process = p
	return e, nil
}

// exaMessage is the part of exabgp's JSON messages the lab reads.
type exaMessage struct {
	Type     string `json:"type"`
	Neighbor struct {
		Address struct {
			Peer string `json:"peer"`
		} `json:"address"`
		State   string `json:"state"`
		Message struct {
			Update struct {
				Announce map[string]map[string][]struct {
					NLRI string `json:"nlri"`
				} `json:"announce"`
				Withdraw map[string][]struct {
					NLRI string `json:"nlri"`
				} `json:"withdraw"`
			} `json:"update"`
		} `json:"message"`
	} `json:"neighbor"`
}

// NextHops replays what exabgp received and returns, sorted, the next hops of its
// routes to vip: one per node whose session is up and which announces it.
func (e *ExaBGP) NextHops(vip netip.Addr) ([]netip.Addr, error) {
	f, err := os.Open(e.updates)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	prefix := netip.PrefixFrom(vip, vip.BitLen()).String()
	routes := map[string]netip.Addr{} // by peer
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m exaMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue // a line exabgp's process got that is not one message (a partial write)
		}
		peer := m.Neighbor.Address.Peer
		switch m.Type {
		case "state":
			if m.Neighbor.State != "up" {
				delete(routes, peer)
			}
		case "update":
			for _, byNextHop := range m.Neighbor.Message.Update.Announce {
				for nh, nlris := range byNextHop {
					for _, n := range nlris {
						if n.NLRI == prefix {
							a, err := netip.ParseAddr(nh)
							if err != nil {
								return nil, err
							}
							routes[peer] = a
						}
					}
				}
			}
			for _, nlris := range m.Neighbor.Message.Update.Withdraw {
				for _, n := range nlris {
					if n.NLRI == prefix {
						delete(routes, peer)
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, nh := range routes {
		out = append(out, nh)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// WaitNextHops waits until exabgp's routes to vip have exactly the next hops want.
func (e *ExaBGP) WaitNextHops(vip netip.Addr, want []netip.Addr, timeout time.Duration) error {
	want = slices.Clone(want)
	slices.SortFunc(want, netip.Addr.Compare)
	return Eventually(timeout, 50*time.Millisecond, func() error {
		got, err := e.NextHops(vip)
		if err == nil && !slices.Equal(got, want) {
			err = fmt.Errorf("exabgp's routes to %s: next hops %v, want %v", vip, got, want)
		}
		return err
	})
}
