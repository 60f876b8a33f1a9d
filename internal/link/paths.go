package link

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"

	"github.com/manifoldlb/manifold/internal/sysctl"
)

// A tunnel is one UDP flow to the network: where the gateway's route to the peer is a
// layer-3+4 multipath route (ECMP over several uplinks, as a bond hashing by layer 3+4
// does), the hash of the flow's ports picks its path, and two tunnels hashed onto one
// path share its capacity while another path idles. The gateway can ask its own kernel
// which path a 5-tuple takes, so with link.source_ports: spread each tunnel sends from
// a source port the host's route hashes onto a path of its own. It still receives on
// port+i, which the peer sends to: the two directions are two flows, each placed by
// the side that sends it, so neither side needs to know the other's hash.

// pathKey names a path of a multipath route: the next hop's device and gateway.
type pathKey struct {
	oif int
	via netip.Addr
}

func (k pathKey) compare(o pathKey) int {
	return cmp.Or(cmp.Compare(k.oif, o.oif), k.via.Compare(o.via))
}

// routeGetter asks the kernel which path a UDP flow to remote:dport from sport takes
// (ip route get … ipproto udp sport … dport …).
type routeGetter func(remote netip.Addr, sport, dport uint16) (pathKey, error)

// kernelPath is the routeGetter of the calling thread's network namespace. The
// netlink library's RouteGetWithOptions cannot send the ports, so the request is built
// here (struct rtmsg, then RTA_DST, RTA_IP_PROTO, RTA_SPORT, RTA_DPORT). It asks
// without a source address, as the tunnels' sockets send: bound to no address, with
// none given per packet (roaming off, the peer's endpoint keeps none), so the kernel
// hashes the flow before it picks the source.
func kernelPath(remote netip.Addr, sport, dport uint16) (pathKey, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETROUTE, unix.NLM_F_REQUEST)
	msg := nl.NewRtMsg()
	msg.Family = uint8(unix.AF_INET)
	if remote.Is6() {
		msg.Family = unix.AF_INET6
	}
	msg.Dst_len = uint8(remote.BitLen())
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.RTA_DST, remote.AsSlice()))
	req.AddData(nl.NewRtAttr(unix.RTA_IP_PROTO, []byte{unix.IPPROTO_UDP}))
	req.AddData(nl.NewRtAttr(unix.RTA_SPORT, binary.BigEndian.AppendUint16(nil, sport)))
	req.AddData(nl.NewRtAttr(unix.RTA_DPORT, binary.BigEndian.AppendUint16(nil, dport)))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWROUTE)
	if err != nil {
		return pathKey{}, fmt.Errorf("route to %s udp sport %d dport %d: %w", remote, sport, dport, err)
	}
	if len(msgs) == 0 || len(msgs[0]) < unix.SizeofRtMsg {
		return pathKey{}, fmt.Errorf("route to %s: the kernel answered nothing", remote)
	}
	attrs, err := nl.ParseRouteAttr(msgs[0][unix.SizeofRtMsg:])
	if err != nil {
		return pathKey{}, fmt.Errorf("route to %s: %w", remote, err)
	}
	var k pathKey
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.RTA_OIF:
			k.oif = int(binary.NativeEndian.Uint32(a.Value))
		case unix.RTA_GATEWAY:
			k.via, _ = netip.AddrFromSlice(a.Value)
		}
	}
	return k, nil
}

// Bounds of the search for source ports.
const (
	// The ports are taken from the kernel's ephemeral range (ip_local_port_range),
	// which it hands out to clients and no service is configured to listen on: a
	// tunnel's sending socket must not take the port of another link or service that
	// starts later. These are its defaults, where it cannot be read.
	ephemeralLo, ephemeralHi = 32768, 60999
	// pathScan is how many flows are asked about to find the route's paths: with P
	// equally likely paths, one unseen in 512 has a chance of P·(1-1/P)^512, below
	// 10^-5 for P up to 32.
	pathScan = 512
	// portScan bounds the ports asked about for one tunnel's candidates.
	portScan = 4096
	// perTunnel is how many ports each tunnel may try, in case some are taken.
	perTunnel = 8
)

// sourcePorts chooses each tunnel's candidate source ports, best first. It finds the
// paths the route to the peer spreads flows over by asking it about pathScan source
// ports; tunnel i gets path i mod P (paths ordered by device and gateway, so that a
// restart chooses the same), and the ports of the range [lo, hi] whose flow to the
// peer's port+i the route hashes onto that path and that no other tunnel has. It
// returns nil, with the number of paths, when the route has one path: the tunnels
// then send from port+i.
func sourcePorts(get routeGetter, remote netip.Addr, port uint16, tunnels int, lo, hi uint16) ([][]uint16, int, error) {
	if lo == 0 || hi < lo {
		return nil, 0, fmt.Errorf("source port range %d-%d", lo, hi)
	}
	nth := func(n int) uint16 { return lo + uint16(n%(int(hi-lo)+1)) }
	own := func(p uint16) bool { return p >= port && int(p) < int(port)+tunnels }

	seen := map[pathKey]bool{}
	for n := range pathScan {
		k, err := get(remote, nth(n), port)
		if err != nil {
			return nil, 0, err
		}
		seen[k] = true
	}
	if len(seen) < 2 {
		return nil, len(seen), nil
	}
	paths := make([]pathKey, 0, len(seen))
	for k := range seen {
		paths = append(paths, k)
	}
	slices.SortFunc(paths, pathKey.compare)

	taken := map[uint16]bool{}
	out := make([][]uint16, tunnels)
	for i := range tunnels {
		want := paths[i%len(paths)]
		for n := 0; n < portScan && len(out[i]) < perTunnel; n++ {
			sport := nth(n)
			if own(sport) || taken[sport] {
				continue
			}
			k, err := get(remote, sport, port+uint16(i))
			if err != nil {
				return nil, 0, err
			}
			if k == want {
				out[i] = append(out[i], sport)
				taken[sport] = true
			}
		}
		if len(out[i]) == 0 {
			return nil, len(paths), fmt.Errorf("tunnel %d: none of %d source ports hashes onto path %d of %d", i, portScan, i%len(paths), len(paths))
		}
	}
	return out, len(paths), nil
}

// ephemeralPorts reads the kernel's ephemeral port range (the calling thread's
// namespace's). The IPv4 setting holds for IPv6 too.
func ephemeralPorts() (lo, hi uint16) {
	f := strings.Fields(sysctl.Get("net/ipv4/ip_local_port_range"))
	if len(f) == 2 {
		a, errA := strconv.ParseUint(f[0], 10, 16)
		b, errB := strconv.ParseUint(f[1], 10, 16)
		if errA == nil && errB == nil && a > 0 && a <= b {
			return uint16(a), uint16(b)
		}
	}
	return ephemeralLo, ephemeralHi
}

// spreadBind is the tunnel's conn.Bind with link.source_ports: spread: it receives on
// the tunnel's port (the peer's endpoint for it) and sends from the first of its
// candidate ports that is free, through a second socket. wireguard-go's roaming must
// be off for the peer (DisableSomeRoamingForBrokenMobileSemantics), or it would
// answer to the source port and make the two flows one again. Packets arriving on the
// sending socket (a peer that roams) are received as well.
type spreadBind struct {
	recv, send conn.Bind
	ports      []uint16

	mu   sync.Mutex    // Open and Close
	from atomic.Uint32 // the source port in use; 0: sending from the receiving socket (read by Send, lock-free)
}

func newSpreadBind(ports []uint16) *spreadBind {
	return &spreadBind{recv: conn.NewDefaultBind(), send: conn.NewDefaultBind(), ports: ports}
}

func (b *spreadBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, actual, err := b.recv.Open(port)
	if err != nil {
		return nil, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.from.Store(0)
	for _, p := range b.ports {
		sfns, _, err := b.send.Open(p)
		if err == nil {
			b.from.Store(uint32(p))
			return append(fns, sfns...), actual, nil
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			_ = b.recv.Close()
			return nil, 0, fmt.Errorf("source port %d: %w", p, err)
		}
	}
	return fns, actual, nil // every candidate taken: the tunnel sends from its own port
}

// sourcePort is the port the tunnel sends from.
func (b *spreadBind) sourcePort() uint16 { return uint16(b.from.Load()) }

func (b *spreadBind) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.from.Store(0)
	return errors.Join(b.recv.Close(), b.send.Close())
}

func (b *spreadBind) SetMark(mark uint32) error {
	return errors.Join(b.recv.SetMark(mark), b.send.SetMark(mark))
}

func (b *spreadBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	if b.from.Load() != 0 {
		return b.send.Send(bufs, ep)
	}
	return b.recv.Send(bufs, ep)
}

func (b *spreadBind) ParseEndpoint(s string) (conn.Endpoint, error) { return b.recv.ParseEndpoint(s) }

func (b *spreadBind) BatchSize() int { return b.recv.BatchSize() }
