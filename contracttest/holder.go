package contracttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// RunHolder checks latchkit.Request.Annotation: what a holder's
// middleware stores beside its grant reaches the failed attempts of those
// it blocks as Request.Holder (a tracing middleware links a waiter's span
// to the holder's this way), for every primitive, and goes with the grant.
func RunHolder(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"AnnotationReachesWaiters", testHolderAnnotation},
	})
}

// annotate is a middleware storing s beside the grants it obtains.
func annotate(s string) primitives.Option {
	return primitives.WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			req.Annotation = s
			return next(ctx, req)
		}
	})
}

// seeHolder is a middleware recording the Holder of every failed attempt.
func seeHolder(seen *[]string) primitives.Option {
	return primitives.WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			prev := req.OnAttempt
			req.OnAttempt = func(n int, err error) {
				if prev != nil {
					prev(n, err)
				}
				var held *latchkit.HeldError
				if errors.As(err, &held) {
					*seen = append(*seen, held.Holder)
				}
			}
			return next(ctx, req)
		}
	})
}

// testHolderAnnotation: for each pair (holder, blocked waiter) of
// primitives, the waiter's TryLock fails and its attempt saw the holder's
// annotation; once the holder released, no annotation key is left, and a
// grant without annotation leaves the waiter's Holder empty.
func testHolderAnnotation(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	c := clienttest.For(t, b)
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	for _, pair := range [][2]int{{0, 0}, {2, 1}, {1, 2}, {3, 3}, {4, 4}, {5, 5}} {
		holder, waiter := ackTries[pair[0]], ackTries[pair[1]]
		what := holder.what + " held, " + waiter.what + " waits"
		l, err := holder.try(ctx, c, p, annotate("trace of "+holder.what))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var seen []string
		if _, err := waiter.try(ctx, c, p, seeHolder(&seen)); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
		}
		if len(seen) != 1 || seen[0] != "trace of "+holder.what {
			t.Errorf("%s: the waiter's attempt saw holder %q, want %q", what, seen, "trace of "+holder.what)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}

		// A holder without annotation: the waiter sees none.
		l, err = holder.try(ctx, c, p)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen = nil
		if _, err := waiter.try(ctx, c, p, seeHolder(&seen)); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
		}
		if len(seen) != 1 || seen[0] != "" {
			t.Errorf("%s, holder without annotation: the waiter saw %q, want nothing", what, seen)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{keyOf(p, "m") + ":who", keyOf(p, "rw") + ":rw:who", keyOf(p, "s") + ":sem:who",
		keyOf(p, "f") + ":fair:who", keyOf(p, "x") + ":who", keyOf(p, "y") + ":who", keyOf(p, "z") + ":who"} {
		if v := do(t, b, "EXISTS", k); v != int64(0) {
			t.Errorf("%s is left after every holder released", k)
		}
	}
}
