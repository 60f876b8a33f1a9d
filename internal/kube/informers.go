package kube

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// Informers are the caches of the few resources a part watches, each read through the
// REST client of its own API group (Client). They stand in for client-go's
// informers.SharedInformerFactory, whose clientset and informers span every API
// group: linked, those were more than half of bin/manifold (issue 26).
type Informers struct {
	list  []cache.SharedIndexInformer
	names []string // the resource of each, for errors
	wg    sync.WaitGroup
}

// Add makes the informer of resource ("services", "endpointslices", ...) of every
// namespace, listed and watched through c (the RESTClient of the resource's typed
// group client); example is an object of the kind, as the cache stores it. Indexed by
// namespace, as the factory's informers are, so that the listers' namespaced reads work.
func (s *Informers) Add(c cache.Getter, resource string, example runtime.Object) cache.SharedIndexInformer {
	return s.AddListWatch(cache.NewListWatchFromClient(c, resource, metav1.NamespaceAll, fields.Everything()), resource, example)
}

// AddListWatch is Add of a resource read through lw (the dynamic client's, for a
// custom resource).
func (s *Informers) AddListWatch(lw cache.ListerWatcher, resource string, example runtime.Object) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	s.list = append(s.list, inf)
	s.names = append(s.names, resource)
	return inf
}

// Start runs every informer until ctx ends; Shutdown waits for them.
func (s *Informers) Start(ctx context.Context) {
	for _, inf := range s.list {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
}

// WaitForCacheSync waits until every cache holds what the API server listed, or ctx ends.
func (s *Informers) WaitForCacheSync(ctx context.Context) error {
	for i, inf := range s.list {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("the cache of %s never synced: %w", s.names[i], ctx.Err())
		}
	}
	return nil
}

// Shutdown waits for the informers Start ran to stop (their ctx ended).
func (s *Informers) Shutdown() { s.wg.Wait() }
