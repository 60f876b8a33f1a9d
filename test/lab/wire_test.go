package lab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The wire format checked by a dissector that is not ours: packets captured with
// tcpdump in the lab, decoded by scapy (decodeScript below), every field compared with
// what docs/packet-path.md ("Packets") promises — IPIP and GUE as a backend receives them, and
// the node's ICMP answers as a client receives them.
func TestWireFormat(t *testing.T) {
	if err := hostprog.Check(hostprog.Tcpdump, hostprog.Python3, hostprog.Ping); err != nil {
		testenv.Missing(t, err)
	}
	if err := hostprog.Command(hostprog.Python3, "-c", "import scapy").Run(); err != nil {
		testenv.Missing(t, "scapy is not installed (apt-get install python3-scapy)")
	}
	tl := startLab(t, []string{"lb1"}, nil)
	lb, be := tl.Host("lb1"), tl.backends[0]
	node := tl.nodes["lb1"]

	encapsulated := func(t *testing.T, f family) []wirePacket {
		t.Helper()
		return tl.capture(t, be, "ip proto 4 or ip6 proto 41 or udp port 6080", func() {
			for i := 0; i < 20; i++ {
				if _, err := HTTPGet(tl.client.NS, f.url(), 0); err != nil {
					t.Errorf("request %d to %s: %v", i, f.vip, err)
				}
			}
		})
	}
	checkOuter := func(t *testing.T, f family, p wirePacket, proto int) {
		t.Helper()
		// TTL 64 from the node, less the router's hop
		if p.Src != f.addr(lb).String() || p.Dst != f.addr(be).String() || p.TTL != 63 || (f.vip.Is4() && !p.IPChecksumOK) || p.Proto != proto {
			t.Errorf("outer header %+v, want %s → %s, TTL 63, protocol %d, valid checksum", p, f.addr(lb), f.addr(be), proto)
		}
		if p.InnerDst != f.vip.String() || p.InnerDport != 80 || !p.InnerL4ChecksumOK || p.InnerSrc != f.addr(tl.client).String() {
			t.Errorf("inner packet %+v, want %s → %s:80 with a valid TCP checksum", p, f.addr(tl.client), f.vip)
		}
	}

	for _, f := range families {
		t.Run("IPIP "+f.name, func(t *testing.T) {
			pkts := encapsulated(t, f)
			if len(pkts) == 0 {
				t.Fatal("no IPIP packet captured on the backend")
			}
			for _, p := range pkts {
				checkOuter(t, f, p, map[bool]int{false: 4, true: 41}[f.vip.Is6()])
			}
		})
	}

	t.Run("ICMP answers", func(t *testing.T) {
		for _, f := range families {
			size := map[bool]string{false: "1472", true: "1452"}[f.vip.Is6()] // 1500-byte packets
			pkts := tl.capture(t, tl.client, "icmp or icmp6", func() {
				if out, err := tl.client.Output(hostprog.Ping, "-c", "2", "-W", "1", f.vip.String()); err != nil {
					t.Errorf("ping %s: %v\n%s", f.vip, err, out)
				}
				// answered too: an echo reply is not encapsulated, whatever its size
				if out, err := tl.client.Output(hostprog.Ping, "-c", "1", "-W", "1", "-M", "do", "-s", size, f.vip.String()); err != nil {
					t.Errorf("ping %s: %v\n%s", f.vip, err, out)
				}
				// full-sized TCP segments (DF) do not fit once encapsulated
				c, err := DialTCP(tl.client.NS, netip.AddrPortFrom(f.vip, 80).String(), 0)
				if err != nil {
					t.Fatal(err)
				}
				c.Write(make([]byte, 20000))
				time.Sleep(300 * time.Millisecond)
				c.Close()
			})
			var echo, tooBig int
			for _, p := range pkts {
				if p.Src != f.vip.String() {
					continue // the client's own requests
				}
				if !p.ICMPChecksumOK || (f.vip.Is4() && !p.IPChecksumOK) {
					t.Errorf("%s: answer with a bad checksum: %+v", f.name, p)
				}
				switch {
				case p.ICMPType == 0 || p.ICMPType == 129:
					echo++
				case f.vip.Is4() && p.ICMPType == 3 && p.ICMPCode == 4, f.vip.Is6() && p.ICMPType == 2:
					tooBig++
					wantMTU := map[bool]int{false: 1480, true: 1460}[f.vip.Is6()]
					if p.MTU != wantMTU || p.QuotedDst != f.vip.String() || (f.vip.Is4() && !p.DF) {
						t.Errorf("%s: too-big answer %+v, want MTU %d, quoting a packet to %s, DF", f.name, p, wantMTU, f.vip)
					}
				}
			}
			if echo != 3 || tooBig < 1 {
				t.Errorf("%s: %d echo replies and %d too-big answers from the VIP, want 3 and at least 1: %+v", f.name, echo, tooBig, pkts)
			}
		}
	})

	// the same services forwarding with GUE (a reload: services may change live)
	cfg := string(nodeConfig(lb, tl.backends, nil).YAML())
	cfg = strings.ReplaceAll(cfg, "    protocol: tcp\n", "    protocol: tcp\n    forwarding: gue\n")
	if err := writeFileAtomic(node.ConfigPath, []byte(cfg)); err != nil {
		t.Fatal(err)
	}
	if err := node.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		t.Run("GUE "+f.name, func(t *testing.T) {
			var pkts []wirePacket
			err := Eventually(10*time.Second, 100*time.Millisecond, func() error {
				pkts = encapsulated(t, f)
				if len(pkts) == 0 || pkts[len(pkts)-1].Proto != 17 {
					return fmt.Errorf("no GUE packet captured yet")
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%v; captured %+v\nnode log:\n%s", err, pkts, node.Log())
			}
			ports := map[int]bool{}
			for _, p := range pkts {
				if p.Proto != 17 {
					continue // IPIP from before the reload
				}
				checkOuter(t, f, p, 17)
				if p.Dport != 6080 || p.Sport < 49152 || p.UDPLen != p.InnerLen+8 {
					t.Errorf("UDP %+v, want 49152..65535 → 6080, length inner + 8", p)
				}
				if f.vip.Is4() && p.UDPChecksum != 0 || f.vip.Is6() && !p.UDPChecksumOK {
					t.Errorf("UDP checksum %#x (valid: %v): want 0 over IPv4, valid over IPv6", p.UDPChecksum, p.UDPChecksumOK)
				}
				ports[p.Sport] = true
			}
			if len(ports) < 2 {
				t.Errorf("20 connections used %d GUE source port(s), want them spread", len(ports))
			}
		})
	}
}

// wirePacket is what decodeScript reports of one captured packet.
type wirePacket struct {
	Src, Dst          string
	Proto, TTL        int
	DF                bool
	IPChecksumOK      bool
	Sport, Dport      int
	UDPLen            int
	UDPChecksum       int
	UDPChecksumOK     bool
	InnerSrc          string
	InnerDst          string
	InnerLen          int
	InnerDport        int
	InnerL4ChecksumOK bool
	ICMPType          int
	ICMPCode          int
	ICMPChecksumOK    bool
	MTU               int
	QuotedDst         string
}

// capture runs tcpdump on h's eth0 with filter while traffic runs, then decodes the
// capture with scapy.
func (tl *testLab) capture(t *testing.T, h *Host, filter string, traffic func()) []wirePacket {
	t.Helper()
	// a name (and log) of its own: "listening on" must be this tcpdump's
	name := fmt.Sprintf("tcpdump-%s-%d", h.Role, time.Now().UnixNano())
	pcap := filepath.Join(tl.Dir, name+".pcap")
	p, err := tl.Start(h, name, hostprog.Tcpdump, "-Z", "root", "--immediate-mode", "-i", HostLink, "-n", "-U", "-s", "0", "-w", pcap, filter)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitLog(5*time.Second, func(l string) bool { return strings.Contains(l, "listening on") }); err != nil {
		t.Fatal(err)
	}
	traffic()
	time.Sleep(500 * time.Millisecond) // let tcpdump write what it has seen
	if err := p.Stop(); err != nil {
		t.Logf("tcpdump on %s: %v", h.Role, err)
	}
	script := filepath.Join(tl.Dir, "decode.py")
	if err := os.WriteFile(script, []byte(decodeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := hostprog.Command(hostprog.Python3, script, pcap).Output()
	if err != nil {
		t.Fatalf("scapy on %s: %v", pcap, err)
	}
	var pkts []wirePacket
	if err := json.Unmarshal(out, &pkts); err != nil {
		t.Fatalf("scapy's output: %v\n%s", err, out)
	}
	return pkts
}

// decodeScript prints the captured packets as JSON. Checksums are judged by scapy:
// each is removed and recomputed by scapy's own code, and compared with the one sent.
const decodeScript = `
import json, sys
from scapy.all import rdpcap, raw, Ether, IP, IPv6, UDP, TCP, ICMP

def same_after_recompute(pkt, layer, field):
    sent = getattr(pkt[layer], field)
    q = pkt.copy()
    delattr(q[layer], field)
    return getattr(pkt.__class__(raw(q))[layer], field) == sent

def ip_of(data):
    return IP(data) if data[0] >> 4 == 4 else IPv6(data)

out = []
for pkt in rdpcap(sys.argv[1]):
    d = {}
    ip = pkt[IP] if IP in pkt else pkt[IPv6]
    v4 = isinstance(ip, IP)
    d["Src"], d["Dst"] = ip.src, ip.dst
    d["Proto"] = ip.proto if v4 else ip.nh
    d["TTL"] = ip.ttl if v4 else ip.hlim
    if v4:
        d["DF"] = bool(ip.flags & 2)
        d["IPChecksumOK"] = same_after_recompute(pkt, IP, "chksum")
    inner = None
    if d["Proto"] in (4, 41):
        inner = ip.payload
    elif d["Proto"] == 17 and UDP in pkt:
        u = pkt[UDP]
        d["Sport"], d["Dport"], d["UDPLen"], d["UDPChecksum"] = u.sport, u.dport, u.len, u.chksum
        d["UDPChecksumOK"] = u.chksum != 0 and same_after_recompute(pkt, UDP, "chksum")
        inner = ip_of(raw(u.payload))
    if inner is not None:
        d["InnerSrc"], d["InnerDst"] = inner.src, inner.dst
        d["InnerLen"] = len(raw(inner))
        if TCP in inner:
            d["InnerDport"] = inner[TCP].dport
            d["InnerL4ChecksumOK"] = same_after_recompute(inner, TCP, "chksum")
    if ICMP in pkt:
        c = pkt[ICMP]
        d["ICMPType"], d["ICMPCode"] = c.type, c.code
        d["ICMPChecksumOK"] = same_after_recompute(pkt, ICMP, "chksum")
        if c.type == 3:
            d["MTU"] = c.nexthopmtu
            d["QuotedDst"] = ip_of(raw(c.payload)).dst
    elif not v4 and ip.nh == 58:
        c = ip.payload
        d["ICMPType"], d["ICMPCode"] = c.type, c.code
        d["ICMPChecksumOK"] = same_after_recompute(pkt, c.__class__, "cksum")
        if c.type == 2:
            d["MTU"] = c.mtu
            d["QuotedDst"] = ip_of(raw(c.payload)).dst
    out.append(d)
print(json.dumps(out))
`
