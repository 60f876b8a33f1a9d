package store

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkWeightAmong100000 is one backend's weight set and committed (written and
// fsynced) among 100 000 services: the store's part of an API write (issue 26).
func BenchmarkWeightAmong100000(b *testing.B) {
	var f strings.Builder
	f.WriteString("node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.1\n  max_services: 100001\n  max_backends: 400002\nservices:\n")
	for i := range 100000 {
		fmt.Fprintf(&f, "  - name: svc%06d\n    vip: 10.%d.%d.%d\n    port: 80\n    health: {kind: none}\n    backends:\n      - address: 11.%d.%d.%d\n",
			i, 1+i>>16, i>>8&255, i&255, 1+i>>16, i>>8&255, i&255)
	}
	s := openData(b, []byte(f.String()))
	b.ResetTimer()
	for i := range b.N {
		n := i * 7919 % 100000
		ch, err := s.SetWeight(fmt.Sprintf("svc%06d", n), fmt.Sprintf("11.%d.%d.%d", 1+n>>16, n>>8&255, n&255), fmt.Appendf(nil, `{"weight": %d}`, 2+i%50))
		if err != nil {
			b.Fatal(err)
		}
		ch.Changes()
		ch.Revision()
		if err := s.Commit(ch); err != nil {
			b.Fatal(err)
		}
	}
}
