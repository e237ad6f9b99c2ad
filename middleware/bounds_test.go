package middleware_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// TestBoundHolderLinks (issue 38, finding 11; the bound maxHolderLinks of
// docs/bounds.md): an acquisition whose attempts meet more than 32
// distinct holders links its span to the first 32 of them, each once; the
// attempts past the bound are still recorded. A middleware inside Tracing
// reports 40 attempts, each finding a different holder (its W3C
// traceparent, as the acquire scripts hand it back), then one more finding
// the first holder again.
func TestBoundHolderLinks(t *testing.T) {
	tel := newTelemetry(t)
	_, bs := miniBackends(t, 1, nil)
	const holders = 40
	holder := func(i int) string { return fmt.Sprintf("00-%032x-%016x-01", i+1, i+1) }
	attempts := func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			for i := range holders + 1 {
				req.OnAttempt(i+1, &latchkit.HeldError{Holder: holder(i % holders)})
			}
			return next(ctx, req)
		}
	}
	mu, err := primitives.NewMutex(clienttest.For(t, bs[0]), "busy", tel.tracing(), primitives.WithMiddleware(attempts))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	spans := tel.ended("latchkit.Lock", latchkit.KindMutex)
	if len(spans) != 1 {
		t.Fatalf("%d Lock spans, want 1", len(spans))
	}
	links := spans[0].Links()
	if len(links) != 32 {
		t.Errorf("%d links, want 32", len(links))
	}
	for i, link := range links {
		if got, want := link.SpanContext.SpanID().String(), fmt.Sprintf("%016x", i+1); got != want || attr(link.Attributes, attrLinkType).AsString() != "holder" {
			t.Errorf("link %d: to span %s (%v), want %s (holder)", i, got, link.Attributes, want)
		}
	}
	if events := len(spans[0].Events()); events < holders+2 {
		t.Errorf("%d events, want an attempt event for each of the %d reported attempts and the Lock's own", events, holders+2)
	}
}
