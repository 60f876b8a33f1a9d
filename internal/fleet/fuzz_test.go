package fleet

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/decode"
)

// FuzzRecords: any value under the fleet's keys in etcd (a node's record, a steering
// record, a service document as the steering controller reads it) decodes or is an
// error, never a panic; what decodes, written again and read back, is written the same.
func FuzzRecords(f *testing.F) {
	for _, s := range []string{
		`{"name": "lb1", "site": "eu", "applied_revision": 7, "services": [{"name": "web", "origins": {"eu": {"rtt_ms": 3.5}}}]}`,
		`{"service": "web", "round": 3, "at": "2026-01-01T00:00:00Z", "leader": "s1", "shares": {"eu": 0.5, "us": 0.5}}`,
		"name: web\nvip: 198.51.100.10\norigins:\n  - {name: eu, site: eu, capacity: 100}\n",
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec wire.NodeRecord
		if decode.JSONInto(data, decode.MaxFileSize, &rec) == nil {
			stable(t, &rec, &wire.NodeRecord{})
		}
		var st wire.Steering
		if decode.JSONInto(data, decode.MaxFileSize, &st) == nil {
			stable(t, &st, &wire.Steering{})
		}
		var spec wire.ServiceSpec
		if decodeSpec(data, &spec) == nil {
			stable(t, &spec, &wire.ServiceSpec{})
		}
	})
}

// stable checks that v, written as JSON and read back into fresh, is written the same.
func stable[T any](t *testing.T, v, fresh *T) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		return // a value JSON cannot hold (a YAML document may decode to one): not a crash
	}
	if err := decode.JSONInto(b, decode.MaxFileSize, fresh); err != nil {
		t.Fatalf("%s does not read back: %v", b, err)
	}
	again, _ := json.Marshal(fresh)
	if !bytes.Equal(b, again) {
		t.Fatalf("read back, %s is written as %s", b, again)
	}
}
