package middleware_test

import (
	"context"
	"errors"
	"github.com/latchkit/latchkit/internal/keyspace"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// TestTracingLeaseSpansJoinTheAcquisition (issue 30, item 6): a Release
// and an Extend called with a context that carries no span of its own (as
// the README writes them: lease.Release(context.Background())) are
// children of the acquisition's span, in its trace, not roots of traces
// of their own; called with a context that has its own span, they stay in
// that span's trace, under it, and link to the acquisition's span.
func TestTracingLeaseSpansJoinTheAcquisition(t *testing.T) {
	tel := newTelemetry(t)
	_, bs := miniBackends(t, 1, nil)
	m, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "job", tel.tracing(), primitives.WithTTL(5*time.Second))

	// No span in the context: Lock, Extend, Release all with Background.
	l, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	acq := tel.ended("latchkit.Lock", latchkit.KindMutex)[0].SpanContext()
	for _, name := range []string{"latchkit.Extend", "latchkit.Release"} {
		spans := tel.ended(name, latchkit.KindMutex)
		if len(spans) != 1 {
			t.Fatalf("%d %s spans, want 1", len(spans), name)
		}
		s := spans[0]
		if s.SpanContext().TraceID() != acq.TraceID() {
			t.Errorf("%s with a context without a span: trace %s, the acquisition's is %s (a root of its own)",
				name, s.SpanContext().TraceID(), acq.TraceID())
		}
		if s.Parent().SpanID() != acq.SpanID() {
			t.Errorf("%s: parent %s, want the acquisition's span %s", name, s.Parent().SpanID(), acq.SpanID())
		}
	}

	// The caller's own span: the lease's spans stay in its trace, with a
	// link to the acquisition.
	l, err = m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	acq = tel.ended("latchkit.Lock", latchkit.KindMutex)[1].SpanContext()
	rctx, req := tel.tp.Tracer("test").Start(context.Background(), "request")
	if err := l.Extend(rctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(rctx); err != nil {
		t.Fatal(err)
	}
	req.End()
	for _, name := range []string{"latchkit.Extend", "latchkit.Release"} {
		spans := tel.ended(name, latchkit.KindMutex)
		if len(spans) != 2 {
			t.Fatalf("%d %s spans, want 2", len(spans), name)
		}
		s := spans[1]
		if s.SpanContext().TraceID() != req.SpanContext().TraceID() || s.Parent().SpanID() != req.SpanContext().SpanID() {
			t.Errorf("%s with the caller's span: not under it (trace %s parent %s)", name, s.SpanContext().TraceID(), s.Parent().SpanID())
		}
		linked := false
		for _, link := range s.Links() {
			linked = linked || link.SpanContext.SpanID() == acq.SpanID() && link.SpanContext.TraceID() == acq.TraceID()
		}
		if !linked {
			t.Errorf("%s with the caller's span: no link to the acquisition's span (links %v)", name, s.Links())
		}
	}
}

// TestTracingLeaseLostCause (issue 30, item 6): a LeaseLost span says why
// the lease was lost, as the latchkit.cause attribute (on the span and its
// event).
func TestTracingLeaseLostCause(t *testing.T) {
	tel := newTelemetry(t)
	ms, bs := miniBackends(t, 1, nil)
	m, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "lost", tel.tracing(), primitives.WithTTL(300*time.Millisecond))
	l, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ms[0].Del(keyspace.KeyBase(keyspace.DefaultPrefix, "lost")) // the next renewal finds it gone
	lost := tel.awaitLeaseLost(t, l.Context())
	cause := attr(lost.Attributes(), attribute.Key("latchkit.cause")).AsString()
	if !strings.Contains(cause, "renewal found the lease gone") {
		t.Errorf("LeaseLost span's latchkit.cause %q, want the renewal's finding", cause)
	}
	if ev := lost.Events(); len(ev) != 1 || attr(ev[0].Attributes, attribute.Key("latchkit.cause")).AsString() != cause {
		t.Errorf("LeaseLost events %v: want one carrying the cause", ev)
	}
	noToken(t, tel, l.Token())
}

// TestTracingCallerGaveUp (issue 30, item 6): an acquisition ended by the
// caller's own context (its deadline, or a cancel) is recorded, not marked
// an error: outcome ctx_done, an event that says so, span status Unset;
// the metrics count it under ctx_done. A Redis that cannot be reached is
// still an error.
func TestTracingCallerGaveUp(t *testing.T) {
	tel := newTelemetry(t)
	ms, bs := miniBackends(t, 1, nil)
	m, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "busy", tel.tracing(), primitives.WithTTL(5*time.Second))
	held, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	dctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = m.Lock(dctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err = m.Lock(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock canceled: %v", err)
	}
	spans := tel.ended("latchkit.Lock", latchkit.KindMutex)
	if len(spans) != 3 {
		t.Fatalf("%d Lock spans, want 3", len(spans))
	}
	for i, want := range []string{"context deadline exceeded", "context canceled"} {
		s := spans[i+1]
		if out := attr(s.Attributes(), attrOutcome).AsString(); out != outcomeCtxDone {
			t.Errorf("%s: outcome %q, want ctx_done", want, out)
		}
		if s.Status().Code == codes.Error {
			t.Errorf("%s: the caller's give-up is marked an error: status %v", want, s.Status())
		}
		var ev *sdktrace.Event
		for _, e := range s.Events() {
			if e.Name == "latchkit.ctx_done" {
				ev = &e
			}
			if e.Name == "exception" {
				t.Errorf("%s: an exception event on a give-up", want)
			}
		}
		if ev == nil {
			t.Errorf("%s: no latchkit.ctx_done event (events %v)", want, s.Events())
		} else if c := attr(ev.Attributes, attribute.Key("latchkit.cause")).AsString(); !strings.Contains(c, want) {
			t.Errorf("latchkit.ctx_done event's cause %q, want %q", c, want)
		}
	}
	mt := tel.metrics(t)
	if n := sum(t, mt["latchkit.acquisitions"], attrOutcome.String(outcomeCtxDone)); n != 2 {
		t.Errorf("latchkit.acquisitions{ctx_done} = %d, want 2", n)
	}

	// Redis gone: an error, whatever the context.
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ms[0].Close()
	ectx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.TryLock(ectx); err == nil || errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("TryLock with Redis gone: %v", err)
	}
	ts := tel.ended("latchkit.TryLock", latchkit.KindMutex)
	if len(ts) != 1 || ts[0].Status().Code != codes.Error ||
		attr(ts[0].Attributes(), attrOutcome).AsString() != outcomeError {
		t.Errorf("TryLock with Redis gone: want outcome error, status Error")
	}
}
