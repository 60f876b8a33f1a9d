package link

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/manifoldlb/manifold/internal/config"
)

// tunnel is one WireGuard tunnel of the link: a wireguard-go device on its own TUN
// device, on its own UDP port at both ends, with one peer (the other gateway).
type tunnel struct {
	index         int
	name          string
	port          uint16
	local, remote netip.Addr // inner addresses: the probes' ends
	ifindex       int
	wg            *device.Device
	spread        *spreadBind // with link.source_ports: spread on a multipath route; else nil

	mu            sync.Mutex
	handshakes    uint64
	lastHandshake time.Time
	lastError     string // wireguard-go's latest error, for the reason a tunnel is silent
}

// innerAddrs returns tunnel i's inner addresses: 2i and 2i+1 of the inner prefix, 2i
// on the side of the lower outer address, so both sides agree without talking.
func innerAddrs(cfg *config.Link, i int) (local, remote netip.Addr) {
	base := cfg.InnerPrefix.Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	even, odd := n+uint32(2*i), n+uint32(2*i)+1
	addr := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	if cfg.Local.Address.Less(cfg.Remote.Address) {
		return addr(even), addr(odd)
	}
	return addr(odd), addr(even)
}

// openTunnel brings up tunnel i: the TUN device, wireguard-go on it with the peer,
// the inner addresses, the device up. sources are the ports it may send from (nil:
// its own, port+i). On error it leaves nothing behind.
func openTunnel(cfg *config.Link, i int, priv [32]byte, sources []uint16, log *slog.Logger) (_ *tunnel, err error) {
	t := &tunnel{index: i, name: fmt.Sprintf("%s%d", cfg.Devices, i), port: cfg.Port + uint16(i)}
	t.local, t.remote = innerAddrs(cfg, i)
	if _, err := netlink.LinkByName(t.name); err == nil {
		return nil, fmt.Errorf("tunnel %d: device %s exists already (another link on this host? link.devices names them)", i, t.name)
	}
	td, err := tun.CreateTUN(t.name, cfg.MTU)
	if err != nil {
		return nil, fmt.Errorf("tunnel %d: TUN device %s: %w", i, t.name, err)
	}
	logger := &device.Logger{
		Verbosef: device.DiscardLogf,
		Errorf: func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			t.mu.Lock()
			t.lastError = msg
			t.mu.Unlock()
			log.Debug("wireguard", "tunnel", i, "err", msg)
		},
	}
	bind := conn.NewDefaultBind()
	if sources != nil {
		t.spread = newSpreadBind(sources)
		bind = t.spread
	}
	t.wg = device.NewDevice(td, bind, logger)
	if cfg.SourcePorts == config.LinkSpread {
		// The peer is always at its address and port+i: following the source of its
		// packets (roaming) would answer a spreading peer on the port it sends from,
		// and the two directions, each placed on a path by the side that sends it,
		// would be one flow again. With fixed ports roaming stays on, for a peer
		// behind a NAT that rewrites them.
		t.wg.DisableSomeRoamingForBrokenMobileSemantics()
	}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	allowed := []netip.Prefix{netip.PrefixFrom(t.remote, 32)}
	allowed = append(allowed, cfg.Remote.Prefixes...)
	var ipc strings.Builder
	fmt.Fprintf(&ipc, "private_key=%s\nlisten_port=%d\nreplace_peers=true\n", hexKey(priv), t.port)
	fmt.Fprintf(&ipc, "public_key=%s\nendpoint=%s\nreplace_allowed_ips=true\n", hexKey(cfg.PeerPublicKey), netip.AddrPortFrom(cfg.Remote.Address, t.port))
	for _, p := range allowed {
		fmt.Fprintf(&ipc, "allowed_ip=%s\n", p)
	}
	if err := t.wg.IpcSet(ipc.String()); err != nil {
		return nil, fmt.Errorf("tunnel %d: configure WireGuard (UDP port %d): %w", i, t.port, err)
	}
	if err := t.wg.Up(); err != nil {
		return nil, fmt.Errorf("tunnel %d: WireGuard up (UDP port %d): %w", i, t.port, err)
	}
	l, err := netlink.LinkByName(t.name)
	if err != nil {
		return nil, fmt.Errorf("tunnel %d: %s: %w", i, t.name, err)
	}
	t.ifindex = l.Attrs().Index
	addr := &netlink.Addr{IPNet: hostNet(t.local), Peer: hostNet(t.remote)}
	if err := netlink.AddrAdd(l, addr); err != nil {
		return nil, fmt.Errorf("tunnel %d: address %s peer %s on %s: %w", i, t.local, t.remote, t.name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("tunnel %d: %s up: %w", i, t.name, err)
	}
	return t, nil
}

// sourcePort is the UDP port the tunnel sends from.
func (t *tunnel) sourcePort() uint16 {
	if t.spread != nil {
		if p := t.spread.sourcePort(); p != 0 {
			return p
		}
	}
	return t.port
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

// close stops wireguard-go, which closes the TUN device: the kernel deletes it with
// its addresses, its routes and the next hops on it.
func (t *tunnel) close() { t.wg.Close() }

// pollHandshake reads the time of the peer's latest handshake and counts a new one.
func (t *tunnel) pollHandshake() {
	ipc, err := t.wg.IpcGet()
	if err != nil {
		return
	}
	var sec, nsec int64
	sc := bufio.NewScanner(strings.NewReader(ipc))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			nsec, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if sec == 0 && nsec == 0 {
		return
	}
	at := time.Unix(sec, nsec)
	t.mu.Lock()
	defer t.mu.Unlock()
	if at.After(t.lastHandshake) {
		t.handshakes++
		t.lastHandshake = at
	}
}

func (t *tunnel) handshakeInfo() (count uint64, last time.Time, lastErr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handshakes, t.lastHandshake, t.lastError
}
