package kube

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// The Lease that elects the one active controller, as client-go's leader election
// keeps it (which this replaces only because it imports the clientset of every API
// group: clients.go): a replica holds the Lease while it renews it; another takes it
// when it has seen no renewal for leaseDuration by its own clock (so the replicas'
// clocks need not agree); writes carry the resourceVersion read, so two replicas
// cannot both take it.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

type elector struct {
	c             *rest.RESTClient // coordination/v1
	namespace, id string
	// the Lease's last version seen and when it was first seen here
	observedRV string
	observedAt time.Time
}

// acquire blocks until this replica holds the Lease (true) or ctx ends (false).
func (e *elector) acquire(ctx context.Context) bool {
	for !e.tryAcquireOrRenew(ctx) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait.Jitter(retryPeriod, 0.2)):
		}
	}
	return true
}

// lead runs while this replica holds the Lease: the returned context ends when a
// renewal has failed for renewDeadline, or when ctx ends (then the Lease is given up,
// so that a standby takes over at once). done is closed once the Lease is let go.
func (e *elector) lead(ctx context.Context) (leadCtx context.Context, done <-chan struct{}) {
	leadCtx, lost := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer lost()
		last := time.Now()
		t := time.NewTicker(retryPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				e.release()
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(ctx, renewDeadline)
			ok := e.tryAcquireOrRenew(rctx)
			cancel()
			switch {
			case ok:
				last = time.Now()
			case ctx.Err() != nil:
				e.release()
				return
			case time.Since(last) > renewDeadline:
				return // lost: another may hold it by now
			}
		}
	}()
	return leadCtx, finished
}

// tryAcquireOrRenew takes or renews the Lease; false when another holds it or the
// API server did not answer.
func (e *elector) tryAcquireOrRenew(ctx context.Context) bool {
	now := metav1.NewMicroTime(time.Now())
	secs := int32(leaseDuration / time.Second)
	var l coordinationv1.Lease
	err := e.c.Get().Namespace(e.namespace).Resource("leases").Name(LeaseName).Do(ctx).Into(&l)
	if apierrors.IsNotFound(err) {
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: e.namespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &e.id, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}
		if err := e.c.Post().Namespace(e.namespace).Resource("leases").Body(&l).Do(ctx).Into(&l); err != nil {
			return false
		}
		e.observe(&l)
		return true
	}
	if err != nil {
		return false
	}
	if l.ResourceVersion != e.observedRV {
		e.observe(&l)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != "" && holder != e.id && time.Since(e.observedAt) < leaseDuration {
		return false // held, and renewed within the lease's time as seen here
	}
	if holder != e.id {
		transitions := int32(0)
		if l.Spec.LeaseTransitions != nil {
			transitions = *l.Spec.LeaseTransitions + 1
		}
		l.Spec.LeaseTransitions, l.Spec.AcquireTime = &transitions, &now
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &e.id, &secs, &now
	if err := e.c.Put().Namespace(e.namespace).Resource("leases").Name(LeaseName).Body(&l).Do(ctx).Into(&l); err != nil {
		return false // a conflict: another replica wrote it first
	}
	e.observe(&l)
	return true
}

func (e *elector) observe(l *coordinationv1.Lease) {
	e.observedRV, e.observedAt = l.ResourceVersion, time.Now()
}

// release gives the Lease up (holder cleared, a one-second duration) if this replica
// still holds it.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), renewDeadline)
	defer cancel()
	var l coordinationv1.Lease
	if err := e.c.Get().Namespace(e.namespace).Resource("leases").Name(LeaseName).Do(ctx).Into(&l); err != nil {
		return
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.id {
		return
	}
	one, now := int32(1), metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = nil, &one, &now
	_ = e.c.Put().Namespace(e.namespace).Resource("leases").Name(LeaseName).Body(&l).Do(ctx).Error()
}
