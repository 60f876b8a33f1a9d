package dptest

import (
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Packet describes a client packet to build.
type Packet struct {
	Src, Dst     netip.Addr
	SPort, DPort uint16
	UDP          bool
	Flags        TCPFlags // TCP only
	VLAN         uint16   // 802.1Q VLAN id, 0 = untagged
	Payload      []byte
	TTL          uint8 // 0 = 64
	TOS          uint8
	DF           bool
}

type TCPFlags struct{ SYN, ACK, RST, FIN, PSH bool }

var (
	SYN = TCPFlags{SYN: true}
	ACK = TCPFlags{ACK: true}
	RST = TCPFlags{RST: true}
)

// ClientMAC / RouterMAC are the Ethernet addresses of client packets.
var (
	ClientMAC = net.HardwareAddr{0x02, 0xc1, 0, 0, 0, 1}
	RouterMAC = net.HardwareAddr{0x02, 0xa0, 0, 0, 0, 1}
)

// Bytes serializes the packet with correct lengths and checksums.
func (p Packet) Bytes() []byte {
	return Serialize(p.Layers()...)
}

// Layers returns the packet's layers (Ethernet first) for callers that want to tamper.
func (p Packet) Layers() []gopacket.SerializableLayer {
	eth := &layers.Ethernet{SrcMAC: RouterMAC, DstMAC: ClientMAC}
	var ls []gopacket.SerializableLayer
	ipType := layers.EthernetTypeIPv4
	if p.Dst.Is6() {
		ipType = layers.EthernetTypeIPv6
	}
	if p.VLAN != 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, eth, &layers.Dot1Q{VLANIdentifier: p.VLAN, Type: ipType})
	} else {
		eth.EthernetType = ipType
		ls = append(ls, eth)
	}
	ttl := p.TTL
	if ttl == 0 {
		ttl = 64
	}
	proto := layers.IPProtocolTCP
	if p.UDP {
		proto = layers.IPProtocolUDP
	}
	var nl gopacket.NetworkLayer
	if p.Dst.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: ttl, TOS: p.TOS, Protocol: proto,
			SrcIP: p.Src.AsSlice(), DstIP: p.Dst.AsSlice(), Id: 0x1234}
		if p.DF {
			ip.Flags = layers.IPv4DontFragment
		}
		nl = ip
		ls = append(ls, ip)
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: ttl, TrafficClass: p.TOS, NextHeader: proto,
			SrcIP: p.Src.AsSlice(), DstIP: p.Dst.AsSlice()}
		nl = ip
		ls = append(ls, ip)
	}
	if p.UDP {
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.SPort), DstPort: layers.UDPPort(p.DPort)}
		udp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, udp)
	} else {
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.SPort), DstPort: layers.TCPPort(p.DPort),
			SYN: p.Flags.SYN, ACK: p.Flags.ACK, RST: p.Flags.RST, FIN: p.Flags.FIN, PSH: p.Flags.PSH,
			Seq: 1000, Window: 64240}
		if p.Flags.ACK {
			tcp.Ack = 2000
		}
		tcp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tcp)
	}
	if len(p.Payload) > 0 {
		ls = append(ls, gopacket.Payload(p.Payload))
	}
	return ls
}

// Serialize builds a packet from layers, fixing lengths and checksums.
func Serialize(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err) // the bench builds only packets gopacket can serialize
	}
	return buf.Bytes()
}

// Decode parses an Ethernet frame for comparison and for failure messages.
func Decode(b []byte) gopacket.Packet {
	return gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
}

// IPIP wraps an inner client packet (without its Ethernet header) the way an LB node
// does: outer IPv4/IPv6 with protocol 4/41.
func IPIP(inner Packet, outerSrc, outerDst netip.Addr) []byte {
	proto := layers.IPProtocolIPv4
	if outerDst.Is6() {
		proto = layers.IPProtocolIPv6
	}
	eth, outer := outerHeaders(outerSrc, outerDst, proto)
	return Serialize(append([]gopacket.SerializableLayer{eth, outer.(gopacket.SerializableLayer)}, inner.Layers()[1:]...)...)
}

// GUE wraps an inner client packet the way an LB node does with forwarding: gue: outer
// IP, UDP to port, then the inner IP packet (GUE variant 1).
func GUE(inner Packet, outerSrc, outerDst netip.Addr, port uint16) []byte {
	eth, outer := outerHeaders(outerSrc, outerDst, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: 50000, DstPort: layers.UDPPort(port)}
	udp.SetNetworkLayerForChecksum(outer)
	return Serialize(append([]gopacket.SerializableLayer{eth, outer.(gopacket.SerializableLayer), udp}, inner.Layers()[1:]...)...)
}

// outerHeaders are the Ethernet and outer IP headers of an encapsulated packet.
func outerHeaders(src, dst netip.Addr, proto layers.IPProtocol) (*layers.Ethernet, gopacket.NetworkLayer) {
	eth := &layers.Ethernet{SrcMAC: RouterMAC, DstMAC: ClientMAC, EthernetType: layers.EthernetTypeIPv4}
	if dst.Is4() {
		return eth, &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	}
	eth.EthernetType = layers.EthernetTypeIPv6
	return eth, &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
}
