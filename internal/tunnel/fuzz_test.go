package tunnel

import (
	"bytes"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
)

// checkErrors asserts what every file error of this package is: a non-empty
// config.Errors of the file, each with a message.
func checkErrors(t *testing.T, file string, err error) {
	t.Helper()
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		t.Fatalf("error is not a non-empty config.Errors: %#v", err)
	}
	for _, e := range errs {
		if e.File != file || e.Msg == "" || e.Line < 0 {
			t.Fatalf("bad error %#v", e)
		}
	}
}

// FuzzParseTokens: any tokens file gives valid tokens or config.Errors, never a panic,
// and an error never quotes a token it read.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{tokensFile, "", "[]", "- {token: &t 0123456789abcdef0, services: [web]}\n- {token: *t, services: [api]}\n",
		"- &e {token: 0123456789abcdef0, services: [web]}\n- *e\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := ParseTokens("tokens.yaml", data)
		if err != nil {
			checkErrors(t, "tokens.yaml", err)
			for _, tok := range tokens {
				t.Fatalf("tokens %v with an error", tok)
			}
			return
		}
		if len(tokens) == 0 {
			t.Fatal("no token and no error")
		}
		for _, tok := range tokens {
			if tok.hash == ([32]byte{}) || len(tok.Services) == 0 {
				t.Fatalf("bad token %+v", tok)
			}
			for i, s := range tok.Services {
				if !serviceName.MatchString(s) || slices.Index(tok.Services, s) != i {
					t.Fatalf("bad service %q", s)
				}
			}
		}
	})
}

// FuzzParseConnectorConfig: any connector file gives a usable config or
// config.Errors, never a panic. (The files it names are read: the fuzzer may name any.)
func FuzzParseConnectorConfig(f *testing.F) {
	for _, s := range []string{"", "name: laptop\nedges: [127.0.0.1:7443]\ntoken: 0123456789abcdef0\nservices:\n  - {name: web, to: 127.0.0.1:8000, capacity: 30}\n",
		"edges: [\"[::1]:7443\", edge.example:7443]\nservices: []\n", "name: &n x\nedges: [*n]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConnectorConfig("connect.yaml", data, slog.New(slog.DiscardHandler))
		if err != nil {
			checkErrors(t, "connect.yaml", err)
			return
		}
		if len(c.Edges) == 0 || len(c.Services) == 0 || c.Token == "" {
			t.Fatalf("bad config %+v", c)
		}
		for _, s := range c.Services {
			if !serviceName.MatchString(s.Name) || s.Capacity < 1 || hostPortProblem(s.To) != "" {
				t.Fatalf("bad service %+v", s)
			}
		}
	})
}

// FuzzReadMessage: any bytes on a control stream (read before the peer is
// authenticated) give a message or an error, never a panic, and never an allocation
// past maxFrame; a message read, sent again, reads back the same.
func FuzzReadMessage(f *testing.F) {
	for _, m := range []message{
		{Type: "hello", Version: protocolVersion, Token: "0123456789abcdef0", Name: "laptop", Services: []announcedService{{Name: "web", Capacity: 30, Origin: "home"}}},
		{Type: "welcome", Tunnel: 7}, {Type: "ping", Seq: 1}, {Type: "drain"},
	} {
		frame, err := m.frame()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 4, '[', '[', '[', '['})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := readMessage(bytes.NewReader(data))
		if err != nil {
			return
		}
		frame, err := m.frame()
		if err != nil {
			t.Fatal(err)
		}
		again, err := readMessage(bytes.NewReader(frame))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("sent again, %+v reads back as %+v (%v)", m, again, err)
		}
	})
}

// FuzzStreamHeader: any bytes opening a data stream, read as any version, give a
// header or an error, never a panic nor an allocation past the bounds; a header read
// encodes back to what reads the same (v2, v3: to the very bytes it was read from).
func FuzzStreamHeader(f *testing.F) {
	for _, h := range streamHeaders() {
		for _, version := range []int{1, 2, 3} {
			if b, err := h.encode(version); err == nil {
				f.Add(uint8(version), b)
			}
		}
	}
	f.Add(uint8(1), []byte{255})
	f.Add(uint8(2), []byte{3, 'w', 'e', 'b', 9})
	f.Add(uint8(2), []byte{0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, v uint8, data []byte) {
		version := 1 + int(v%3)
		h, err := readStreamHeader(bytes.NewReader(data), version)
		if err != nil {
			return
		}
		b, err := h.encode(version)
		if err != nil {
			t.Fatalf("%+v read as version %d does not encode: %v", h, version, err)
		}
		if version >= 2 && !bytes.HasPrefix(data, b) {
			t.Fatalf("%+v encodes to %q, read from %q", h, b, data)
		}
		again, err := readStreamHeader(bytes.NewReader(b), version)
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("encoded again, %+v reads back as %+v (%v)", h, again, err)
		}
	})
}
