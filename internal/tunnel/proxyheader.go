package tunnel

// The PROXY protocol header (HAProxy's proxy-protocol.txt, versions 1 and 2) a
// connector writes to the origin of a service with proxy_protocol, before any of the
// client's bytes: the origin learns the client's address and port, and the VIP and
// port the client connected to, which its own TCP connection (from the connector)
// does not carry.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/manifoldlb/manifold/internal/config"
)

// proxyV2Signature opens every version 2 header: bytes no other protocol starts with
// (a NUL in 5th place, "QUIT" before a newline), so an origin not expecting the
// header fails at once rather than reading it as a request.
var proxyV2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// Version 2's 13th byte (version 2, high nibble; command, low) and 14th (address
// family, high nibble; transport, low).
const (
	proxyV2Local = 0x20 // LOCAL: the addresses are the connection's own, none follow
	proxyV2Proxy = 0x21 // PROXY: the addresses that follow are the original connection's

	proxyV2Unspec = 0x00 // AF_UNSPEC, UNSPEC: with LOCAL
	proxyV2TCP4   = 0x11 // AF_INET, STREAM
	proxyV2TCP6   = 0x21 // AF_INET6, STREAM
)

// proxyHeader is the header of version (config.ProxyV1 or ProxyV2) for a TCP
// connection from client to vip. With either address unknown it says so as the spec
// has it: v1 "PROXY UNKNOWN", v2 the LOCAL command (the origin then takes the
// connection's own addresses), as HAProxy itself sends for its health checks. An IPv4
// and an IPv6 address together are both written as IPv6 (the IPv4 one mapped).
func proxyHeader(version config.ProxyProtocol, client, vip netip.AddrPort) ([]byte, error) {
	known := client.Addr().IsValid() && vip.Addr().IsValid()
	src, dst := client.Addr().Unmap().WithZone(""), vip.Addr().Unmap().WithZone("")
	four := src.Is4() && dst.Is4()
	if !four {
		src, dst = netip.AddrFrom16(src.As16()), netip.AddrFrom16(dst.As16())
	}
	switch version {
	case config.ProxyV1:
		if !known {
			return []byte("PROXY UNKNOWN\r\n"), nil
		}
		family := "TCP6"
		if four {
			family = "TCP4"
		}
		// at most 104 bytes (the spec's 107 bound): two addresses, two ports, CRLF
		b := append(make([]byte, 0, 108), "PROXY "+family+" "...)
		b = src.AppendTo(b)
		b = append(b, ' ')
		b = dst.AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(client.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(vip.Port()), 10)
		return append(b, "\r\n"...), nil
	case config.ProxyV2:
		b := append(make([]byte, 0, 16+36), proxyV2Signature...)
		if !known {
			return append(b, proxyV2Local, proxyV2Unspec, 0, 0), nil
		}
		family, size := byte(proxyV2TCP6), byte(2*16+2*2) // size: of what follows the 16 bytes
		if four {
			family, size = proxyV2TCP4, 2*4+2*2
		}
		b = append(b, proxyV2Proxy, family, 0, size)
		b = append(b, src.AsSlice()...)
		b = append(b, dst.AsSlice()...)
		b = binary.BigEndian.AppendUint16(b, client.Port())
		return binary.BigEndian.AppendUint16(b, vip.Port()), nil
	}
	return nil, fmt.Errorf("PROXY protocol version %q, not v1 or v2", version)
}
