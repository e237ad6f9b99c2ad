package main

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/middleware"
	"github.com/latchkit/latchkit/primitives"
)

// End to end: a Mutex and a Semaphore held through middleware.Tracing
// store their acquisition spans' contexts beside the grants, and inspect
// shows each holder's trace id, the one of the span that took it.
func TestInspectShowsTracedHolder(t *testing.T) {
	e := newEnv(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	opts := append([]primitives.Option{primitives.WithMiddleware(middleware.Tracing(middleware.WithTracerProvider(tp)))}, holdOpts...)
	ctx := context.Background()

	mu := must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), "traced", opts...))
	ml := must[latchkit.Lease](t)(mu.Lock(ctx))
	defer ml.Release(ctx)
	sem := must[primitives.Semaphore](t)(primitives.NewSemaphore(clienttest.For(t, e.b), "traced", 2, opts...))
	sl := must[latchkit.Lease](t)(sem.Acquire(ctx))
	defer sl.Release(ctx)

	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want 2", len(ended))
	}
	for i, kind := range []string{"mutex", "sem"} {
		out := e.mustRun(t, "inspect", "traced", "-kind", kind)
		want := "trace=" + ended[i].SpanContext().TraceID().String()
		if !strings.Contains(out, want) {
			t.Errorf("inspect -kind %s does not show the holder's %s:\n%s", kind, want, out)
		}
	}
}
