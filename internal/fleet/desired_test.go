package fleet

import (
	"fmt"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
)

func benchNode(b *testing.B) *config.Config {
	cfg, err := config.Parse("node.yaml", []byte("node: {name: lb1, interfaces: [eth0], address: 10.0.0.11}\n"))
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

func serviceDoc(i, weight int) []byte {
	return fmt.Appendf(nil, "name: svc-%06d\nvip: 198.51.%d.10\nport: %d\nbackends:\n  - address: 10.0.1.1\n    weight: %d\n  - address: 10.0.1.2\n",
		i, 100+i/50000, 10000+i%50000, weight)
}

// The node's side of one changed service document among n kept ones: decode it, check
// it against the kept services, and make the update's list (the reconciler's input).
// What a revision costs a node before the reconciler, without etcd.
func BenchmarkOneChangeAmong(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			node := benchNode(b)
			d := newDesired()
			docs := make([]decoded, n)
			for i := range n {
				name := fmt.Sprintf("svc-%06d", i)
				docs[i] = decodeService(node, "/manifold/services/"+name, name, serviceDoc(i, 1), int64(i+1))
			}
			if _, refused := d.take(docs); len(refused) > 0 {
				b.Fatal(refused)
			}
			b.ResetTimer()
			for i := range b.N {
				dd := decodeService(node, "/manifold/services/svc-000000", "svc-000000", serviceDoc(0, 2+i%100), int64(n+i))
				if changed, refused := d.take([]decoded{dd}); !changed || len(refused) > 0 {
					b.Fatal(refused)
				}
				if len(d.list()) != n {
					b.Fatal("lost a service")
				}
			}
		})
	}
}
