package middleware

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/latchkit/latchkit"
)

// attrClient is the name of the Client (primitives.WithClientName) on
// latchkit.lease.oldest_age: one per process as a rule, never a
// primitive's name (names are unbounded).
const attrClient = attribute.Key("latchkit.client")

// liveLeases are the leases a Tracing handed out and that have not ended,
// by Client and kind, each list in grant order: its head is the oldest.
// latchkit.lease.oldest_age observes the heads.
type liveLeases struct {
	mu    sync.Mutex
	lists map[liveKey]*liveList
}

type liveKey struct {
	client string
	kind   latchkit.Kind
}

// liveList is one Client's and kind's live leases, linked through
// tracedLease.prev and next. Once made it stays (its gauge reads 0 when
// empty): there is one per Client and kind.
type liveList struct {
	head, tail *tracedLease
	attrs      metric.ObserveOption
}

// add puts l, just granted, at the tail of its list, stamping its grant
// time under the lock so that every list stays in grant order.
func (v *liveLeases) add(l *tracedLease, client string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := liveKey{client, l.kind}
	list := v.lists[k]
	if list == nil {
		kv := []attribute.KeyValue{attrKind.String(string(l.kind))}
		if client != "" {
			kv = append(kv, attrClient.String(client))
		}
		list = &liveList{attrs: metric.WithAttributeSet(attribute.NewSet(kv...))}
		if v.lists == nil {
			v.lists = map[liveKey]*liveList{}
		}
		v.lists[k] = list
	}
	l.granted = time.Now()
	l.list, l.prev = list, list.tail
	if list.tail != nil {
		list.tail.next = l
	} else {
		list.head = l
	}
	list.tail = l
}

// remove takes l, ended, out of its list (once).
func (v *liveLeases) remove(l *tracedLease) {
	v.mu.Lock()
	defer v.mu.Unlock()
	list := l.list
	if list == nil {
		return
	}
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		list.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	} else {
		list.tail = l.prev
	}
	l.list, l.prev, l.next = nil, nil, nil
}

// observe reports, per Client and kind, the age of the oldest lease held
// now, in seconds (0 when none is).
func (v *liveLeases) observe(_ context.Context, o metric.Float64Observer) error {
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, list := range v.lists {
		age := 0.0
		if list.head != nil {
			age = now.Sub(list.head.granted).Seconds()
		}
		o.Observe(age, list.attrs)
	}
	return nil
}
