package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/store"
)

// keys are the fleet's keys under one prefix.
type keys struct {
	prefix string
}

func newKeys(prefix string) keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return keys{prefix: strings.TrimSuffix(prefix, "/")}
}

func (k keys) services() string              { return k.prefix + "/services/" }
func (k keys) service(name string) string    { return k.services() + name }
func (k keys) generation() string            { return k.prefix + "/generation" }
func (k keys) nodes() string                 { return k.prefix + "/nodes/" }
func (k keys) node(name string) string       { return k.nodes() + name }
func (k keys) alives() string                { return k.prefix + "/alive/" }
func (k keys) alive(name string) string      { return k.alives() + name }
func (k keys) serviceName(key []byte) string { return strings.TrimPrefix(string(key), k.services()) }
func (k keys) steering() string              { return k.prefix + "/steering/" }
func (k keys) steeringOf(name string) string { return k.steering() + name }
func (k keys) election() string              { return k.prefix + "/steer/leader" }

// NodeKeys are the keys of a node's record and of its alive key under prefix, for a
// tool that publishes records as nodes do (manifold-bench steerscale).
func NodeKeys(prefix, name string) (record, alive string) {
	k := newKeys(prefix)
	return k.node(name), k.alive(name)
}

// generationValue says who made the last change of the services, for an operator
// reading the store with etcdctl; the time to the nanosecond makes it the mark of one
// write. It stays on the wall clock: a fake one that stands still would give two
// writes one mark.
func generationValue(who, what string) string {
	return fmt.Sprintf("%s at %s: %s", who, time.Now().UTC().Format(time.RFC3339Nano), what)
}

// Import seeds the fleet store with docs in one transaction. A store that holds
// services already is refused unless force, which replaces every service with docs.
func Import(ctx context.Context, cli *clientv3.Client, prefix string, docs []store.ServiceDoc, force bool) error {
	k := newKeys(prefix)
	cur, err := cli.Get(ctx, k.services(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("read the fleet store: %w", err)
	}
	if len(cur.Kvs) > 0 && !force {
		return fmt.Errorf("the fleet store %s holds %d services already: nothing was imported (force replaces them all)", k.prefix, len(cur.Kvs))
	}
	var ops []clientv3.Op
	for _, kv := range cur.Kvs {
		name := k.serviceName(kv.Key)
		if !slices.ContainsFunc(docs, func(d store.ServiceDoc) bool { return d.Name == name }) {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
	}
	for _, d := range docs {
		ops = append(ops, clientv3.OpPut(k.service(d.Name), string(d.YAML)))
	}
	host, _ := os.Hostname()
	ops = append(ops, clientv3.OpPut(k.generation(), generationValue(host, fmt.Sprintf("import of %d services", len(docs)))))
	// what was read is what is replaced: a write in between refuses the import
	resp, err := cli.Txn(ctx).If(unchangedSince(k, cur.Header.Revision)...).Then(ops...).Commit()
	if errors.Is(err, rpctypes.ErrTooManyOps) {
		// one transaction on purpose: the nodes see the whole import as one revision, never half of it
		return fmt.Errorf("the import is one transaction of %d operations, more than the etcd members allow (--max-txn-ops, 128 by default): start them with --max-txn-ops %d or more; nothing was imported", len(ops), len(ops))
	}
	if err != nil {
		return fmt.Errorf("write the fleet store: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("the fleet store %s changed during the import: nothing was imported, try again", k.prefix)
	}
	return nil
}

// unchangedSince holds while no change of the services was made after revision rev:
// the guard catches every change made through this package (deletes too), the range
// compare a service put directly with etcdctl.
func unchangedSince(k keys, rev int64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(k.generation()), "<", rev+1),
		clientv3.Compare(clientv3.ModRevision(k.services()).WithPrefix(), "<", rev+1),
	}
}

// serviceUnchangedSince holds while no write through this package was made after
// revision rev and service name was not changed since at all. A write of one service
// needs no more: a service put past the API on another key meanwhile is checked by
// each node against the services it keeps, and refused alone if it clashes. It spares
// etcd the range compare over every service, which costs each write in proportion to
// the fleet.
func serviceUnchangedSince(k keys, name string, rev int64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(k.generation()), "<", rev+1),
		clientv3.Compare(clientv3.ModRevision(k.service(name)), "<", rev+1),
	}
}

// Export returns the fleet's services, sorted by name.
func Export(ctx context.Context, cli *clientv3.Client, prefix string) ([]store.ServiceDoc, error) {
	k := newKeys(prefix)
	resp, err := cli.Get(ctx, k.services(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the fleet store: %w", err)
	}
	docs := make([]store.ServiceDoc, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		docs = append(docs, store.ServiceDoc{Name: k.serviceName(kv.Key), YAML: kv.Value})
	}
	sortDocs(docs)
	return docs, nil
}

func sortDocs(docs []store.ServiceDoc) {
	slices.SortFunc(docs, func(a, b store.ServiceDoc) int { return strings.Compare(a.Name, b.Name) })
}
