package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/reference"
)

// The controller's Events, written by a goroutine of their own so that the worker never
// waits on the API server for them. client-go's tools/record would do, but it links the
// strategic-merge-patch machinery and its OpenAPI models (3 MB of bin/manifold) for the
// aggregation of repeated Events; here a repeat of the same Event (object, reason,
// message) within eventRepeat is left out instead.
const (
	eventQueue  = 1024 // Events waiting to be written; more are dropped (and logged)
	eventRepeat = 10 * time.Minute
	eventSeen   = 4096 // remembered Events for the repeat check (then forgotten at once)
)

// An EventRecorder writes Events as one component (on one host, for a node).
type EventRecorder struct {
	core      *rest.RESTClient
	component string
	host      string
	log       *slog.Logger
	queue     chan *corev1.Event
	seen      map[string]time.Time // written Events' keys, by the writer only
}

// NewEventRecorder starts the writer of component's Events (host: the node's name, ""
// for a controller); it stops when ctx ends (the queued Events with it).
func NewEventRecorder(ctx context.Context, core *rest.RESTClient, component, host string, log *slog.Logger) *EventRecorder {
	r := &EventRecorder{core: core, component: component, host: host, log: log, queue: make(chan *corev1.Event, eventQueue), seen: map[string]time.Time{}}
	go r.write(ctx)
	return r
}

// Event records an Event about obj (a Service, an IPPool, or the ObjectReference of
// one that is gone).
func (r *EventRecorder) Event(obj runtime.Object, typ, reason, message string) {
	ref, err := reference.GetReference(Scheme, obj)
	if err != nil {
		r.log.Warn("an Event names no object", "reason", reason, "err", err)
		return
	}
	now := metav1.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject: *ref, Reason: reason, Message: message, Type: typ,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Source: corev1.EventSource{Component: r.component, Host: r.host}, ReportingController: r.component,
	}
	select {
	case r.queue <- e:
	default:
		r.log.Warn("an Event is dropped: too many waiting to be written", "object", ref.Namespace+"/"+ref.Name, "reason", reason)
	}
}

// Eventf is Event with a formatted message.
func (r *EventRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r *EventRecorder) write(ctx context.Context) {
	for {
		var e *corev1.Event
		select {
		case <-ctx.Done():
			return
		case e = <-r.queue:
		}
		o := e.InvolvedObject
		key := string(o.UID) + "/" + o.Namespace + "/" + o.Name + "/" + e.Reason + "/" + e.Message
		if at, ok := r.seen[key]; ok && time.Since(at) < eventRepeat {
			continue
		}
		if len(r.seen) >= eventSeen {
			clear(r.seen)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(wctx).Error()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("an Event was not written", "object", o.Namespace+"/"+o.Name, "reason", e.Reason, "err", err)
			}
			continue
		}
		r.seen[key] = time.Now()
	}
}
