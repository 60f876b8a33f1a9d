package kube

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
)

// The recorder writes each Event once: a repeat of the same object, reason and message
// (a sync retried after a failure) is left out, a different one is written, and in the
// order recorded.
func TestEventRecorderLeavesOutRepeats(t *testing.T) {
	c := apiServer(t)
	core, err := Client(c.Admin, CoreV1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewEventRecorder(ctx, core, "manifold-controller", "", slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	svc := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "default", Name: "event-repeats", UID: types.UID("uid-event-repeats")}
	r.Event(svc, corev1.EventTypeWarning, ReasonInvalidAddress, "not an address")
	r.Event(svc, corev1.EventTypeWarning, ReasonInvalidAddress, "not an address")
	r.Eventf(svc, corev1.EventTypeNormal, ReasonAssigned, "assigned %s", "192.0.2.1")

	e := &env{t: t, c: c}
	last := e.waitEventIn("default", svc.Name, ReasonAssigned, 30*time.Second)
	if last.Source.Component != "manifold-controller" || last.InvolvedObject.UID != svc.UID || last.Message != "assigned 192.0.2.1" {
		t.Errorf("event %+v", last)
	}
	// written in order: the repeat was handled before the last one
	list, err := c.CS.CoreV1().Events("default").List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": svc.Name, "reason": ReasonInvalidAddress}.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d Events %s, want the one (its repeat left out)", len(list.Items), ReasonInvalidAddress)
	}
}
