package tunnel

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/manifoldlb/manifold/internal/config"
)

// streamHeaders are headers of every shape the edge sends: IPv4, IPv6, an IPv4
// client as IPv6 sees it, no address at all, the client's first bytes up to the
// limit, either PROXY header.
func streamHeaders() []streamHeader {
	return []streamHeader{
		{Service: "web", Client: netip.MustParseAddrPort("192.0.2.1:40000"), VIP: netip.MustParseAddrPort("198.51.100.7:443")},
		{Service: "api", Client: netip.MustParseAddrPort("[2001:db8::1]:1"), VIP: netip.MustParseAddrPort("[2001:db8::80]:65535"),
			Data: []byte("GET / HTTP/1.1\r\n"), Proxy: config.ProxyV1},
		{Service: "api", Client: netip.MustParseAddrPort("192.0.2.1:40000"), VIP: netip.MustParseAddrPort("198.51.100.7:443"), Proxy: config.ProxyV2},
		{Service: "web", Client: netip.MustParseAddrPort("[::ffff:192.0.2.1]:5"), VIP: netip.MustParseAddrPort("192.0.2.9:80")},
		{Service: strings.Repeat("s", 255)},
		{Service: "big", Client: netip.MustParseAddrPort("192.0.2.1:1"), Data: bytes.Repeat([]byte{7}, maxInitialData)},
	}
}

// A version 3 header carries the client's address and port, the VIP's, the PROXY
// header the connector writes, and the client's first bytes; version 2 all but the
// PROXY header (a header that asks for one does not encode as version 2); version 1
// the client's address only. Each reads back as sent.
func TestStreamHeadersRoundTrip(t *testing.T) {
	for _, h := range streamHeaders() {
		b, err := h.encode(3)
		if err != nil {
			t.Fatalf("%+v: %v", h.Service, err)
		}
		got, err := readStreamHeader(bytes.NewReader(b), 3)
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("version 3: %+v reads back as %+v (%v)", h, got, err)
		}
		if h.Proxy != "" {
			if _, err := h.encode(2); err == nil || !strings.Contains(err.Error(), "proxy_protocol "+string(h.Proxy)) {
				t.Errorf("version 2 encoded a header with a PROXY header (%v), which it cannot carry", err)
			}
			h.Proxy = ""
		}
		b, err = h.encode(2)
		if err != nil {
			t.Fatalf("%+v: %v", h.Service, err)
		}
		got, err = readStreamHeader(bytes.NewReader(b), 2)
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("version 2: %+v reads back as %+v (%v)", h, got, err)
		}
		if len(h.Data) > 0 {
			if _, err := h.encode(1); err == nil {
				t.Errorf("version 1 encoded a header with initial data, which it cannot carry")
			}
			continue
		}
		v1 := streamHeader{Service: h.Service, Client: h.Client}
		b, err = v1.encode(1)
		if err != nil {
			t.Fatal(err)
		}
		got, err = readStreamHeader(bytes.NewReader(b), 1)
		if err != nil || !reflect.DeepEqual(got, v1) {
			t.Errorf("version 1: %+v reads back as %+v (%v)", v1, got, err)
		}
	}
	if _, err := (streamHeader{Service: "web", Data: make([]byte, maxInitialData+1)}).encode(2); err == nil {
		t.Error("a header with more than maxInitialData bytes of initial data encoded")
	}
}

// A header that lies is refused at the field that lies, before anything it sizes is
// read or allocated.
func TestBadStreamHeadersAreRefused(t *testing.T) {
	v2 := func(tail ...byte) []byte { return append([]byte{3, 'w', 'e', 'b'}, tail...) }
	noAddr := []byte{0, 0, 0}
	huge := binary.BigEndian.AppendUint32(nil, 1<<31)
	for _, tc := range []struct {
		name    string
		version int
		data    []byte
		want    string
	}{
		{"address family 9", 2, v2(9, 1, 2, 3, 4, 0, 80), "address family 9"},
		{"a port without an address", 2, v2(0, 0, 80), "a port without an address"},
		{"initial data past the limit", 2, append(v2(append(noAddr, noAddr...)...), append(huge, bytes.Repeat([]byte{1}, 100)...)...),
			"more than the limit of 65536"},
		{"cut short", 2, v2(4, 192, 0), "EOF"},
		{"PROXY header version 3", 3, v2(append(append(noAddr, noAddr...), 3, 0, 0, 0, 0)...), "PROXY protocol version 3, not 0, 1 or 2"},
		{"version 1, client not an address", 1, append([]byte{3, 'w', 'e', 'b', 5}, "hello"...), `client "hello"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bytes.NewReader(tc.data)
			_, err := readStreamHeader(r, tc.version)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if tc.name == "initial data past the limit" && r.Len() != 100 {
				t.Errorf("%d bytes past the length were read: the length was not checked first", 100-r.Len())
			}
		})
	}

	// 2 GiB announced, a header's worth allocated: the length is refused before it
	// sizes anything.
	lie := append([]byte{3, 'w', 'e', 'b', 0, 0, 0, 0, 0, 0}, huge...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		if _, err := readStreamHeader(bytes.NewReader(lie), 2); err == nil {
			t.Fatal("a header announcing 2 GiB of initial data was read")
		}
	}
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<20 {
		t.Errorf("100 refused headers allocated %d bytes", grown)
	}
}

// A hello must be of the version the handshake negotiated: a connector that offered
// the newest version and says hello as version 1 is refused.
func TestAHelloOfAnotherVersionIsRefused(t *testing.T) {
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	before := e.Counters().Refused[RefusedProtocol]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: alpns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	if v := versionOf(conn.ConnectionState().TLS.NegotiatedProtocol); v != protocolVersion {
		t.Fatalf("negotiated version %d, want %d (the newest both offer)", v, protocolVersion)
	}
	s, err := conn.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	control := &controlStream{s: s}
	if err := control.send(message{Type: "hello", Version: 1, Token: tokenWeb, Name: "liar",
		Services: []announcedService{{Name: "web", Capacity: 1}}}); err != nil {
		t.Fatal(err)
	}
	_, err = control.receive(time.Now().Add(10 * time.Second))
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || ae.ErrorCode != codeRefused || !strings.Contains(ae.ErrorMessage, fmt.Sprintf("expected hello of version %d (negotiated), got \"hello\" of version 1", protocolVersion)) {
		t.Fatalf("the edge answered %v, want a refusal of the hello's version", err)
	}
	if got := e.Counters().Refused[RefusedProtocol]; got != before+1 {
		t.Errorf("edge counted %d protocol refusals, want %d", got, before+1)
	}
}

// A connector of version 2 that reaches an edge of version 1 announces its services
// without their origins (that edge knows none), and says so.
func TestOriginsAreLeftOutForAVersion1Edge(t *testing.T) {
	logs := &logBuffer{}
	c := &Connector{log: slog.New(slog.NewTextHandler(logs, nil))}
	announced := []announcedService{{Name: "web", Capacity: 1}, {Name: "api", Capacity: 2, Origin: "home"}}
	got := c.withoutOrigins("edge1:7443", announced)
	if want := []announcedService{{Name: "web", Capacity: 1}, {Name: "api", Capacity: 2}}; !reflect.DeepEqual(got, want) {
		t.Errorf("announced to a version 1 edge: %+v, want %+v", got, want)
	}
	if announced[1].Origin != "home" {
		t.Error("the connector's own list lost its origin")
	}
	if !strings.Contains(logs.String(), "origin=home") {
		t.Errorf("nothing logged of the origin left out:\n%s", logs)
	}
}

// An edge of version 2 takes a connector that speaks version 1 only, for a service
// without origins: the stream header it gets is version 1's, and the request passes.
// For a service with origins it is refused, with the reason on both sides.
func TestAVersion1ConnectorKeepsWorking(t *testing.T) {
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	e.SetServiceOrigins(map[string][]string{"api": {"home"}})
	o := startOrigin(t, "a")
	v1 := func(c *Connector) { c.protocols = []string{alpnV1} }

	startConnectorWith(t, e.connectorFile(t, "old", tokenBoth, web(o)), v1)
	waitFor(t, &e.notifier, 10*time.Second, "the version 1 connector attached", func() bool {
		_, ok := e.tunnelOf("old")
		return ok
	})
	if s, _ := e.tunnelOf("old"); s.Version != 1 {
		t.Errorf("tunnel %+v: want version 1", s)
	}
	url := "http://" + e.serve(t, "web") + "/"
	if got, err := get(newClient(), url); err != nil || got != "a" {
		t.Fatalf("through a version 1 tunnel: origin %q, %v", got, err)
	}

	before := e.Counters().Refused[RefusedNoOrigin]
	c := startConnectorWith(t, e.connectorFile(t, "old-api", tokenBoth, "  - {name: api, to: "+o.addr+"}\n"), v1)
	waitFor(t, &c.notifier, 10*time.Second, "the version 1 connector of api refused", func() bool {
		return c.Links()[0].LastError != ""
	})
	if link := c.Links()[0]; link.Up || !strings.Contains(link.LastError, `service "api" has origins here ([home])`) {
		t.Errorf("connector link %+v: want down, the edge saying api has origins", link)
	}
	waitFor(t, &e.notifier, 5*time.Second, "the edge counted no_origin", func() bool {
		return e.Counters().Refused[RefusedNoOrigin] > before
	})
}

// A connector of version 2 or later names the origin it serves a service for; the edge shows it,
// and the connector gets the client's address and the VIP's in the stream header.
func TestAConnectorNamesItsOrigin(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		e.SetServiceOrigins(map[string][]string{"api": {"home", "office"}})
		o := startOrigin(t, "home")
		headers := make(chan streamHeader, 1)
		startConnectorWith(t, e.connectorFile(t, "new", tokenHome, "  - {name: api, to: "+o.addr+", origin: home}\n"), func(c *Connector) {
			dial := c.origin
			c.origin = func(h streamHeader) (net.Conn, error) {
				select {
				case headers <- h:
				default:
				}
				return dial(h)
			}
		})
		waitFor(t, &e.notifier, 10*time.Second, "the connector attached", func() bool {
			_, ok := e.tunnelOf("new")
			return ok
		})
		s, _ := e.tunnelOf("new")
		if s.Version != protocolVersion || len(s.Services) != 1 || s.Services[0].Origin != "home" {
			t.Fatalf("tunnel %+v: want version %d, api for origin home", s, protocolVersion)
		}
		if w := WireTunnels([]TunnelStatus{s}); w[0].Version != protocolVersion || w[0].Services[0].Origin != "home" {
			t.Errorf("on the wire %+v: want version %d and origin home", w[0], protocolVersion)
		}

		at := e.serve(t, "api")
		client := &net.Dialer{}
		conn, err := client.Dial("tcp", at)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		request := "GET / HTTP/1.0\r\n\r\n"
		if _, err := conn.Write([]byte(request)); err != nil {
			t.Fatal(err)
		}
		h := <-headers
		// the request's first bytes travel with the header if they had arrived when the
		// edge opened the stream (initialdata.go): the client raced the edge for them
		want := streamHeader{Service: "api", Client: netip.MustParseAddrPort(conn.LocalAddr().String()), VIP: netip.MustParseAddrPort(at), Data: h.Data}
		if !reflect.DeepEqual(h, want) || !strings.HasPrefix(request, string(h.Data)) {
			t.Errorf("the connector got the header %+v, want %+v", h, want)
		}
	})
}

// A token binds its connectors to the origins it names; an origin the service does
// not have is refused too.
func TestOriginRefusals(t *testing.T) {
	overTransports(t, func(t *testing.T) {
		e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
		e.SetServiceOrigins(map[string][]string{"api": {"home"}})
		o := startOrigin(t, "a")
		for _, tc := range []struct {
			name, token, origin string
			edgeRefusal         string
			connectorSays       string
		}{
			{"a token without origins", tokenBoth, "home", RefusedOutOfScope, `may not serve origin "home" (its origins: [])`},
			{"an origin the token does not name", tokenHome, "garage", RefusedOutOfScope, `may not serve origin "garage" (its origins: [home office])`},
			{"an origin the service does not have", tokenHome, "office", RefusedUnknownOrigin, `service "api" has no origin "office" here`},
			{"no origin for a service with origins", tokenHome, "", RefusedNoOrigin, `service "api" has origins here`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := e.Counters().Refused[tc.edgeRefusal]
				entry := "  - {name: api, to: " + o.addr + "}\n"
				if tc.origin != "" {
					entry = "  - {name: api, to: " + o.addr + ", origin: " + tc.origin + "}\n"
				}
				c := startConnector(t, e.connectorFile(t, "refused", tc.token, entry))
				waitFor(t, &c.notifier, 10*time.Second, "the connector's first attempt", func() bool {
					return c.Links()[0].LastError != ""
				})
				if link := c.Links()[0]; link.Up || !strings.Contains(link.LastError, tc.connectorSays) {
					t.Errorf("connector link %+v: want down, last error saying %q", link, tc.connectorSays)
				}
				waitFor(t, &e.notifier, 5*time.Second, "the edge counted "+tc.edgeRefusal, func() bool {
					return e.Counters().Refused[tc.edgeRefusal] > before
				})
				if n := len(e.Tunnels()); n != 0 {
					t.Errorf("%d tunnels attached, want none", n)
				}
			})
		}
	})
}
