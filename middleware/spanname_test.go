package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/middleware"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/ratelimit"
)

// TestSpanNamedAfterTheMethod: an acquisition's span is named after the
// primitive's method it stands for (Request.Op), for every kind, whatever
// Tracing knows of kinds; a Request without an Op gets "latchkit.Acquire".
func TestSpanNamedAfterTheMethod(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	cl := clienttest.For(t, goredis.New(rdb))
	tel := newTelemetry(t)
	ctx := context.Background()
	tr := tel.tracing()
	release := func(l latchkit.Lease, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
	mu, _ := primitives.NewMutex(cl, "m", tr)
	release(mu.Lock(ctx))
	release(mu.TryLock(ctx))
	rw, _ := primitives.NewRWLock(cl, "rw", tr)
	release(rw.RLock(ctx))
	release(rw.TryRLock(ctx))
	release(rw.Lock(ctx))
	sem, _ := primitives.NewSemaphore(cl, "s", 2, tr)
	release(sem.Acquire(ctx))
	release(sem.TryAcquireN(ctx, 2))
	fm, _ := primitives.NewFairMutex(cl, "fm", tr)
	release(fm.Lock(ctx))
	fs, _ := primitives.NewFairSemaphore(cl, "fs", 2, tr)
	release(fs.TryAcquire(ctx))
	rm, _ := primitives.NewReentrantMutex(cl, "rm", tr)
	release(rm.Lock(primitives.WithOwner(ctx, "o")))
	ml, _ := primitives.NewMultiLock(cl, []string{"a", "b"}, tr)
	release(ml.TryLock(ctx))
	rl, _ := primitives.NewRedlock([]*primitives.Client{cl}, "r", tr)
	release(rl.Lock(ctx))
	el, _ := primitives.NewElection(cl, "e", tr)
	release(el.Campaign(ctx, "v"))
	release(el.TryCampaign(ctx, "v"))
	l, _ := primitives.NewLatch(cl, "l", tr)
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	lim, _ := ratelimit.New(cl, "rl", 2, time.Minute, tr) // a primitive written on package kit
	if err := lim.Take(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lim.TryTake(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name string
		kind latchkit.Kind
	}{
		{"latchkit.Lock", latchkit.KindMutex}, {"latchkit.TryLock", latchkit.KindMutex},
		{"latchkit.RLock", latchkit.KindReadLock}, {"latchkit.TryRLock", latchkit.KindReadLock},
		{"latchkit.Lock", latchkit.KindWriteLock},
		{"latchkit.Acquire", latchkit.KindSemaphore}, {"latchkit.TryAcquire", latchkit.KindSemaphore},
		{"latchkit.Campaign", latchkit.KindElection}, {"latchkit.TryCampaign", latchkit.KindElection},
		{"latchkit.Wait", latchkit.KindLatch},
		{"latchkit.Lock", latchkit.KindFairMutex}, {"latchkit.TryAcquire", latchkit.KindFairSemaphore},
		{"latchkit.Lock", latchkit.KindReentrantMutex}, {"latchkit.TryLock", latchkit.KindMultiLock},
		{"latchkit.Lock", latchkit.KindRedlock},
		{"latchkit.Take", ratelimit.KindRateLimiter}, {"latchkit.TryTake", ratelimit.KindRateLimiter},
	} {
		if n := len(tel.ended(want.name, want.kind)); n != 1 {
			t.Errorf("%d spans %q of kind %s, want 1", n, want.name, want.kind)
		}
	}

	// A user's own acquisition, through the middleware alone.
	acq := middleware.Tracing(middleware.WithTracerProvider(tel.tp), middleware.WithMeterProvider(tel.mp))(
		func(context.Context, *latchkit.Request) (latchkit.Lease, error) { return nil, nil })
	acq(ctx, &latchkit.Request{Name: "x", Kind: "ratelimit", Op: "Take"})
	acq(ctx, &latchkit.Request{Name: "x", Kind: "ratelimit"})
	if len(tel.ended("latchkit.Take", "ratelimit")) != 1 || len(tel.ended("latchkit.Acquire", "ratelimit")) != 1 {
		t.Errorf("a user's kind: spans %v, want latchkit.Take and latchkit.Acquire", spanNames(tel))
	}
}

func spanNames(tel *telemetry) (out []string) {
	for _, s := range tel.spans.Ended() {
		out = append(out, s.Name())
	}
	return out
}
