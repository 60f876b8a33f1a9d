package tunnel

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/config"
)

// The headers against the byte strings of HAProxy's proxy-protocol.txt: its examples
// and bounds for version 1 (section 2.1), and version 2's layout (section 2.2) written
// out byte by byte.
func TestProxyHeaders(t *testing.T) {
	ap := netip.MustParseAddrPort
	maxV6 := netip.AddrPortFrom(netip.AddrFrom16([16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), 65535)
	sig := "0d0a0d0a000d0a515549540a"
	for _, tc := range []struct {
		name        string
		version     config.ProxyProtocol
		client, vip netip.AddrPort
		want        string // v1: the text; v2: hex
	}{
		{"v1, the spec's example", config.ProxyV1, ap("192.168.0.1:56324"), ap("192.168.0.11:443"),
			"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"},
		{"v1, the spec's longest TCP4", config.ProxyV1, ap("255.255.255.255:65535"), ap("255.255.255.255:65535"),
			"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n"},
		// 104 bytes, the spec's longest TCP6 line
		{"v1, the spec's longest TCP6", config.ProxyV1, maxV6, maxV6,
			"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"},
		{"v1, IPv6", config.ProxyV1, ap("[2001:db8::1]:40000"), ap("[2001:db8:100::10]:80"),
			"PROXY TCP6 2001:db8::1 2001:db8:100::10 40000 80\r\n"},
		{"v1, an IPv4 client seen as IPv6", config.ProxyV1, ap("[::ffff:192.0.2.1]:40000"), ap("198.51.100.10:80"),
			"PROXY TCP4 192.0.2.1 198.51.100.10 40000 80\r\n"},
		{"v1, families mixed: both as IPv6", config.ProxyV1, ap("[2001:db8::1]:40000"), ap("198.51.100.10:80"),
			"PROXY TCP6 2001:db8::1 ::ffff:198.51.100.10 40000 80\r\n"},
		{"v1, a zone left out", config.ProxyV1, ap("[fe80::1%eth0]:40000"), ap("[fe80::2%eth0]:80"),
			"PROXY TCP6 fe80::1 fe80::2 40000 80\r\n"},
		{"v1, no client address: the spec's short UNKNOWN", config.ProxyV1, netip.AddrPort{}, ap("198.51.100.10:80"),
			"PROXY UNKNOWN\r\n"},

		// signature, version 2 and PROXY (21), TCP over IPv4 (11), 12 bytes of
		// addresses: source, destination, source port (56324 = dc04), destination (443)
		{"v2, TCP4", config.ProxyV2, ap("192.168.0.1:56324"), ap("192.168.0.11:443"),
			sig + "21" + "11" + "000c" + "c0a80001" + "c0a8000b" + "dc04" + "01bb"},
		// TCP over IPv6 (21), 36 bytes
		{"v2, TCP6", config.ProxyV2, ap("[2001:db8::1]:40000"), ap("[2001:db8:100::10]:80"),
			sig + "21" + "21" + "0024" + "20010db8000000000000000000000001" + "20010db8010000000000000000000010" + "9c40" + "0050"},
		{"v2, an IPv4 client seen as IPv6", config.ProxyV2, ap("[::ffff:192.0.2.1]:1"), ap("198.51.100.10:80"),
			sig + "21" + "11" + "000c" + "c0000201" + "c633640a" + "0001" + "0050"},
		{"v2, families mixed: both as IPv6", config.ProxyV2, ap("[2001:db8::1]:40000"), ap("198.51.100.10:80"),
			sig + "21" + "21" + "0024" + "20010db8000000000000000000000001" + "00000000000000000000ffffc633640a" + "9c40" + "0050"},
		// LOCAL (20), AF_UNSPEC/UNSPEC (00), no address: the origin uses the connection's own
		{"v2, no client address: LOCAL", config.ProxyV2, netip.AddrPort{}, ap("198.51.100.10:80"),
			sig + "20" + "00" + "0000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := proxyHeader(tc.version, tc.client, tc.vip)
			if err != nil {
				t.Fatal(err)
			}
			want := []byte(tc.want)
			if tc.version == config.ProxyV2 {
				if want, err = hex.DecodeString(tc.want); err != nil {
					t.Fatal(err)
				}
				if n := 16 + int(want[14])<<8 + int(want[15]); n != len(want) {
					t.Fatalf("the test's own header: length %d, %d bytes", n, len(want))
				}
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got  %q\nwant %q", got, want)
			}
			if tc.version == config.ProxyV1 && len(got) > 107 {
				t.Errorf("%d bytes: longer than the spec's 107", len(got))
			}
		})
	}
	if _, err := proxyHeader("v3", netip.AddrPort{}, netip.AddrPort{}); err == nil || !strings.Contains(err.Error(), `"v3"`) {
		t.Errorf("version v3: %v, want an error naming it", err)
	}
}

// recordingOrigin is a TCP server that reads every connection to its end, then sends
// what it read on the returned channel and closes the connection.
func recordingOrigin(t *testing.T) (string, <-chan []byte) {
	t.Helper()
	got := make(chan []byte, 16)
	return listenReadAll(t, func(_ net.Conn, b []byte) { got <- b }), got
}

// sendThrough connects to the edge at addr from the address local, sends payload,
// closes its side and waits for the edge to close; it returns its own address.
func sendThrough(t *testing.T, local, addr string, payload []byte) netip.AddrPort {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatal(err)
	}
	return netip.MustParseAddrPort(conn.LocalAddr().String())
}

func received(t *testing.T, got <-chan []byte) []byte {
	t.Helper()
	select {
	case b := <-got:
		return b
	case <-time.After(20 * time.Second):
		t.Fatal("the origin got no connection within 20s")
		return nil
	}
}

// Through a real edge and connector, the origin of a service with proxy_protocol
// gets the PROXY header of the client's own address and port and the address and
// port it connected to, then the client's bytes; with proxy_protocol off, the
// client's bytes alone. IPv4 and IPv6 clients, both versions.
func TestTheConnectorWritesTheProxyHeader(t *testing.T) {
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	originAddr, got := recordingOrigin(t)
	startConnector(t, e.connectorFile(t, "c", tokenBoth, "  - {name: web, to: "+originAddr+"}\n  - {name: api, to: "+originAddr+"}\n"))
	waitFor(t, &e.notifier, 10*time.Second, "the connector attached", func() bool { _, ok := e.tunnelOf("c"); return ok })
	if s, _ := e.tunnelOf("c"); s.Version != protocolVersion {
		t.Fatalf("tunnel %+v: want version %d", s, protocolVersion)
	}
	payload := []byte("GET / HTTP/1.0\r\n\r\n")
	for _, family := range []struct{ name, client, listen string }{
		// the client's address is not the connector's (127.0.0.1 and ::1): the header's
		// port alone would not tell the client's from the connector's
		{"IPv4", "127.0.0.2", "127.0.0.1:0"},
		{"IPv6", "::1", "[::1]:0"},
	} {
		at := map[string]string{}
		for _, service := range []string{"web", "api"} {
			at[service] = e.serveAt(t, service, family.listen)
		}
		vip := netip.MustParseAddrPort(at["api"])
		for _, version := range []config.ProxyProtocol{config.ProxyV1, config.ProxyV2} {
			t.Run(family.name+" "+string(version), func(t *testing.T) {
				e.SetProxyProtocols(map[string]config.ProxyProtocol{"api": version})
				client := sendThrough(t, family.client, at["api"], payload)
				header, err := proxyHeader(version, client, vip)
				if err != nil {
					t.Fatal(err)
				}
				want := append(header, payload...)
				if b := received(t, got); !bytes.Equal(b, want) {
					t.Errorf("the origin got %q, want %q", b, want)
				}
				// the test's own check of what it compares with: the client's address in it
				text := string(header)
				if version == config.ProxyV2 {
					text = hex.EncodeToString(header)
					if !strings.Contains(text, hex.EncodeToString(client.Addr().AsSlice())) {
						t.Errorf("header %s does not carry the client's address %s", text, client.Addr())
					}
				} else if !strings.Contains(text, client.Addr().String()) || !strings.Contains(text, fmt.Sprintf(" %d %d\r\n", client.Port(), vip.Port())) {
					t.Errorf("header %q does not carry the client %s and the VIP %s", text, client, vip)
				}
			})
		}
		t.Run(family.name+" off", func(t *testing.T) {
			sendThrough(t, family.client, at["web"], payload)
			if b := received(t, got); !bytes.Equal(b, payload) {
				t.Errorf("the origin of a service without proxy_protocol got %q, want the client's bytes alone %q", b, payload)
			}
		})
	}
}

// A connector of protocol version 2 cannot write the PROXY header: it is refused a
// service with proxy_protocol, with the reason on both sides — at its hello, and,
// attached before the service got proxy_protocol, then — rather than serve clients
// whose address its origin would not learn. It keeps serving a service without.
func TestAnOlderConnectorIsRefusedAServiceWithProxyProtocol(t *testing.T) {
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	e.SetProxyProtocols(map[string]config.ProxyProtocol{"api": config.ProxyV2})
	o := startOrigin(t, "a")
	v2 := func(c *Connector) { c.protocols = []string{alpnV2, alpnV1} }
	says := `service "api" has proxy_protocol v2 here: its connector must write the PROXY header, which needs protocol version 3 (this tunnel speaks 2`

	before := e.Counters().Refused[RefusedNoProxyProtocol]
	c := startConnectorWith(t, e.connectorFile(t, "old-api", tokenBoth, "  - {name: api, to: "+o.addr+"}\n"), v2)
	waitFor(t, &c.notifier, 10*time.Second, "the version 2 connector of api refused", func() bool {
		return c.Links()[0].LastError != ""
	})
	if link := c.Links()[0]; link.Up || !strings.Contains(link.LastError, "no_proxy_protocol: "+says) {
		t.Errorf("connector link %+v: want down, the edge saying %s", link, says)
	}
	waitFor(t, &e.notifier, 5*time.Second, "the edge counted no_proxy_protocol", func() bool {
		return e.Counters().Refused[RefusedNoProxyProtocol] > before
	})
	if !strings.Contains(e.logs.String(), "reason=no_proxy_protocol") {
		t.Errorf("the edge logged no refusal:\n%s", e.logs)
	}
	c.stop()

	// attached for web, which has no PROXY header: served
	old := startConnectorWith(t, e.connectorFile(t, "old", tokenBoth, web(o)+"  - {name: api, to: "+o.addr+"}\n"), v2)
	e.SetProxyProtocols(map[string]config.ProxyProtocol{})
	waitFor(t, &e.notifier, 10*time.Second, "the version 2 connector attached", func() bool { _, ok := e.tunnelOf("old"); return ok })
	url := "http://" + e.serve(t, "web") + "/"
	if got, err := get(newClient(), url); err != nil || got != "a" {
		t.Fatalf("through a version 2 tunnel: origin %q, %v", got, err)
	}
	// then api gets proxy_protocol: the tunnel is refused now
	before = e.Counters().Refused[RefusedNoProxyProtocol]
	e.SetProxyProtocols(map[string]config.ProxyProtocol{"api": config.ProxyV1})
	waitFor(t, &e.notifier, 10*time.Second, "the version 2 connector detached", func() bool { _, ok := e.tunnelOf("old"); return !ok })
	if got := e.Counters().Refused[RefusedNoProxyProtocol]; got != before+1 {
		t.Errorf("refusals counted: %d, want %d", got, before+1)
	}
	waitFor(t, &old.notifier, 10*time.Second, "the connector told why", func() bool {
		return strings.Contains(old.Links()[0].LastError, `service "api" has proxy_protocol v1 here`)
	})
}
