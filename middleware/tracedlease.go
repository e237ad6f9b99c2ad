package middleware

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/latchkit/latchkit"
)

// tracedLease traces the Release and Extend of a lease and notices its
// loss.
type tracedLease struct {
	latchkit.Lease
	t        *tracer
	kind     latchkit.Kind
	name     string
	span     trace.SpanContext       // the acquisition's
	spanOpts []trace.SpanStartOption // of Release and Extend spans: kind, name, fence
	granted  time.Time

	recorded atomic.Bool // hold time and loss are recorded once

	// Its place among the live leases (see liveLeases), under t.live.mu.
	list       *liveList
	prev, next *tracedLease
}

// Unwrap returns the lease Tracing wraps (see latchkit.Innermost, which
// reaches a primitive's own lease type, such as primitives.MultiLease).
func (l *tracedLease) Unwrap() latchkit.Lease { return l.Lease }

// ended runs when the lease's Context is done: on Release, on loss, or,
// after a Release of unknown outcome sent while the lease was live, when
// the lease runs out: no loss (its holder let go in time), and its hold
// time is recorded then, unless a Release recorded it.
func (l *tracedLease) ended() {
	l.t.live.remove(l)
	cause := context.Cause(l.Context())
	switch {
	case errors.Is(cause, latchkit.ErrLeaseLost):
		l.markLost(cause)
	case errors.Is(cause, latchkit.ErrClosed):
	case l.recorded.CompareAndSwap(false, true):
		ctx := trace.ContextWithSpanContext(context.Background(), l.span)
		l.t.holdTime.Record(ctx, time.Since(l.granted).Seconds(), l.t.metricAttrs(l.kind, l.name))
	}
}

// markLost records the loss of the lease, once: the lost-lease count, the
// hold time, and a LeaseLost span under the acquisition's span that says
// why (cause: what the renewal, the deadline, an Extend or a Release
// found; it names the primitive, never the token).
func (l *tracedLease) markLost(cause error) {
	if l.recorded.CompareAndSwap(false, true) {
		ctx := trace.ContextWithSpanContext(context.Background(), l.span)
		l.t.lost.Add(ctx, 1, l.t.metricAttrs(l.kind, l.name))
		l.t.holdTime.Record(ctx, time.Since(l.granted).Seconds(), l.t.metricAttrs(l.kind, l.name))
		why := attrCause.String(cause.Error())
		_, span := l.t.tr.Start(ctx, "latchkit.LeaseLost", trace.WithAttributes(
			attrKind.String(string(l.kind)), attrName.String(l.name), attrFence.Int64(l.Fence()), why))
		span.AddEvent("latchkit.lease_lost", trace.WithAttributes(why))
		span.SetStatus(codes.Error, "lease lost")
		span.End()
	}
}

// start starts the span of a Release or Extend. A context without a span
// of its own gets the acquisition's span as parent, so that the call is in
// the acquisition's trace rather than the root of a trace of its own (one
// orphan trace per release otherwise); a context with its own span keeps
// the call there, linked to the acquisition's span.
func (l *tracedLease) start(ctx context.Context, name string) (context.Context, trace.Span) {
	if !l.span.IsValid() {
		return l.t.tr.Start(ctx, name, l.spanOpts...)
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return l.t.tr.Start(trace.ContextWithSpanContext(ctx, l.span), name, l.spanOpts...)
	}
	return l.t.tr.Start(ctx, name, append(l.spanOpts[:len(l.spanOpts):len(l.spanOpts)], trace.WithLinks(trace.Link{SpanContext: l.span}))...)
}

func (l *tracedLease) Release(ctx context.Context) error {
	if ctx == nil {
		return l.Lease.Release(ctx) // refused: no span for bad input
	}
	ctx, span := l.start(ctx, "latchkit.Release")
	defer span.End()
	returned := false
	defer statusOnPanic(span, &returned)
	err := l.Lease.Release(ctx)
	returned = true
	if err == nil || errors.Is(err, latchkit.ErrLeaseLost) {
		l.t.live.remove(l) // ended: now, not when its Context's AfterFunc runs
	}
	switch {
	case errors.Is(err, latchkit.ErrLeaseLost):
		l.markLost(err)
	case err == nil && l.recorded.CompareAndSwap(false, true):
		l.t.holdTime.Record(ctx, time.Since(l.granted).Seconds(), l.t.metricAttrs(l.kind, l.name))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "release failed")
	}
	return err
}

func (l *tracedLease) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return l.Lease.Extend(ctx, ttl) // refused: no span for bad input
	}
	ctx, span := l.start(ctx, "latchkit.Extend")
	defer span.End()
	returned := false
	defer statusOnPanic(span, &returned)
	err := l.Lease.Extend(ctx, ttl)
	returned = true
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "extend failed")
	}
	return err
}
