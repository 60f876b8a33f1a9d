package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/reconcile"
	"github.com/manifoldlb/manifold/internal/store"
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
// it against the kept services, and make the update (the changed service: Update.Delta).
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
			d.forget() // the node took them
			b.ResetTimer()
			for i := range b.N {
				dd := decodeService(node, "/manifold/services/svc-000000", "svc-000000", serviceDoc(0, 2+i%100), int64(n+i))
				if changed, refused := d.take([]decoded{dd}); !changed || len(refused) > 0 {
					b.Fatal(refused)
				}
				if changed, gone := d.changes(); len(changed) != 1 || len(gone) != 0 || len(d.services) != n {
					b.Fatalf("%d changed, %d gone, %d kept", len(changed), len(gone), len(d.services))
				}
				d.forget()
			}
		})
	}
}

// An API write through the fleet source, against a real etcd holding n services, to
// the moment the source handed the node the update (the sink takes it at once): the
// fleet's part of "API write → applied", without the reconciler, the kernel or the
// node's status. etcd runs with the store's default limits but for the import.
func BenchmarkWriteApplied(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			c := startEtcd(b, 1)
			cli := c.client()
			docs := make([]store.ServiceDoc, n)
			for i := range n {
				docs[i] = store.ServiceDoc{Name: fmt.Sprintf("svc-%06d", i), YAML: serviceDoc(i, 1)}
			}
			for i := 0; i < n; i += 100 {
				ops := []clientv3.Op{}
				for _, d := range docs[i:min(i+100, n)] {
					ops = append(ops, clientv3.OpPut(prefix+"/services/"+d.Name, string(d.YAML)))
				}
				if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
					b.Fatal(err)
				}
			}
			s := NewSource(cli, prefix, nodeFile(b, "a"), drop{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			u, err := s.Initial(context.Background())
			if err != nil || len(u.Services) != n {
				b.Fatalf("initial: %v, %d services", err, len(u.Services))
			}
			_ = u.Commit()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { _ = s.Run(ctx) })
			defer func() { cancel(); wg.Wait() }()
			b.ResetTimer()
			for i := range b.N {
				name := "svc-000000"
				edit := func(st *store.Store) (*store.Change, error) {
					return st.SetWeight(name, "10.0.1.1", fmt.Appendf(nil, `{"weight": %d}`, 2+i%100))
				}
				if err := s.Change(store.ForService(context.Background(), name), edit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// drop is a sink that takes every update at once.
type drop struct{}

func (drop) Submit(context.Context, reconcile.Update) error { return nil }
