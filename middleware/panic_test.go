package middleware_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// panicLease is a lease whose Release and Extend panic.
type panicLease struct{ latchkit.Lease }

func (panicLease) Release(context.Context) error               { panic("inner release") }
func (panicLease) Extend(context.Context, time.Duration) error { panic("inner extend") }

// An inner middleware that panics, three times, each panic recovered by
// the caller: the latchkit.waiters gauge is back at 0 (it was left at 3),
// each acquisition is counted with outcome "error" and its span ended
// with an error status; a lease whose inner Release or Extend panics
// still gets its span ended with an error status.
func TestTracingSurvivesPanics(t *testing.T) {
	_, bs := miniBackends(t, 1, nil)
	tel := newTelemetry(t)
	boom := func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) { panic("inner middleware") }
	}
	m, err := primitives.NewMutex(clienttest.For(t, bs[0]), "p", tel.tracing(), primitives.WithMiddleware(boom))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		func() {
			defer func() {
				if r := recover(); r != "inner middleware" {
					t.Fatalf("recovered %v, want the inner middleware's panic", r)
				}
			}()
			m.Lock(context.Background())
		}()
	}
	got := tel.metrics(t)
	sumOf := func(name string) (n int64, points int) {
		if s, ok := got[name].(metricdata.Sum[int64]); ok {
			for _, p := range s.DataPoints {
				n += p.Value
				points++
			}
		}
		return n, points
	}
	if n, points := sumOf("latchkit.waiters"); n != 0 || points == 0 {
		t.Errorf("latchkit.waiters = %d over %d points after 3 recovered panics, want 0", n, points)
	}
	if n := sum(t, got["latchkit.acquisitions"], attrOutcome.String(outcomeError)); n != 3 {
		t.Errorf("acquisitions with outcome error = %d, want 3", n)
	}
	if n := sum(t, got["latchkit.acquire.duration"]); n != 3 {
		t.Errorf("acquire.duration points = %d, want 3", n)
	}
	spans := tel.ended("latchkit.Lock", latchkit.KindMutex)
	if len(spans) != 3 {
		t.Fatalf("%d Lock spans ended, want 3", len(spans))
	}
	for _, s := range spans {
		if s.Status().Code != codes.Error || attr(s.Attributes(), attrOutcome).AsString() != outcomeError {
			t.Errorf("span of a panicked acquisition: status %v, outcome %q", s.Status(), attr(s.Attributes(), attrOutcome).AsString())
		}
	}

	// Release and Extend of a lease whose inner lease panics.
	var inner latchkit.Lease
	wrap := func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			l, err := next(ctx, req)
			if err != nil {
				return nil, err
			}
			inner = l
			return panicLease{l}, nil
		}
	}
	m2, err := primitives.NewMutex(clienttest.For(t, bs[0]), "q", tel.tracing(), primitives.WithMiddleware(wrap))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m2.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range []struct {
		span string
		f    func()
	}{
		{"latchkit.Extend", func() { l.Extend(context.Background(), time.Minute) }},
		{"latchkit.Release", func() { l.Release(context.Background()) }},
	} {
		func() {
			defer func() { recover() }()
			call.f()
		}()
		spans := tel.ended(call.span, latchkit.KindMutex)
		if len(spans) != 1 || spans[0].Status().Code != codes.Error {
			t.Errorf("%s spans after a panic: %d ended, want 1 with an error status", call.span, len(spans))
		}
	}
	inner.Release(context.Background())
}
