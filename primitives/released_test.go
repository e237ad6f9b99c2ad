package primitives_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// A lease released once: a second Release returns nil again (the lease is
// not held, as the caller wanted; reporting ErrLeaseLost would be a false
// alarm of a loss), and TTL and Extend return an error matching
// ErrLeaseLost that says the lease was released, without a round trip.
// Tried on every kind of lease, with a logger: nothing is logged (no
// "lease lost" warning for a lease that was released, not lost).
func TestCallsOnAReleasedLease(t *testing.T) {
	var bs []backend.Backend
	for range 3 {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		bs = append(bs, goredis.New(c))
	}
	b := bs[0]
	var buf syncBuffer
	opts := []primitives.Option{primitives.WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))}
	ctx := primitives.WithOwner(context.Background(), "owner")
	type acquire func(context.Context) (latchkit.Lease, error)
	must := func(a acquire, err error) acquire {
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	mutex := func(m primitives.Mutex, err error) acquire {
		if err != nil {
			t.Fatal(err)
		}
		return m.TryLock
	}
	sem := func(s primitives.Semaphore, err error) acquire {
		if err != nil {
			t.Fatal(err)
		}
		return s.TryAcquire
	}
	rw, err := primitives.NewRWLock(clienttest.For(t, b), "rw", opts...)
	if err != nil {
		t.Fatal(err)
	}
	wrw, err := primitives.NewRWLock(clienttest.For(t, b), "wrw", opts...)
	if err != nil {
		t.Fatal(err)
	}
	el, err := primitives.NewElection(clienttest.For(t, b), "election", opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		what string
		acq  acquire
	}{
		{"mutex", mutex(primitives.NewMutex(clienttest.For(t, b), "mutex", opts...))},
		{"reentrant mutex", mutex(primitives.NewReentrantMutex(clienttest.For(t, b), "reentrant", opts...))},
		{"rwlock read", must(rw.TryRLock, nil)},
		{"rwlock write", must(wrw.TryLock, nil)},
		{"semaphore", sem(primitives.NewSemaphore(clienttest.For(t, b), "sem", 2, opts...))},
		{"fair semaphore", sem(primitives.NewFairSemaphore(clienttest.For(t, b), "fair", 2, opts...))},
		{"multilock", mutex(primitives.NewMultiLock(clienttest.For(t, b), []string{"m1", "m2"}, opts...))},
		{"redlock", mutex(primitives.NewRedlock(clienttest.All(t, bs), "redlock", clienttest.Fitting[primitives.RedlockOption](opts)...))},
		{"election", func(ctx context.Context) (latchkit.Lease, error) { return el.TryCampaign(ctx, "me") }},
	} {
		l, err := k.acq(ctx)
		if err != nil {
			t.Fatalf("%s: %v", k.what, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", k.what, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: a second Release: %v, want nil (released already)", k.what, err)
		}
		if d, err := l.TTL(ctx); !errors.Is(err, latchkit.ErrLeaseLost) || !strings.Contains(err.Error(), "already released") {
			t.Errorf("%s: TTL after Release: %v, %v; want an error matching ErrLeaseLost saying it was released", k.what, d, err)
		}
		if err := l.Extend(ctx, 10e9); !errors.Is(err, latchkit.ErrLeaseLost) || !strings.Contains(err.Error(), "already released") {
			t.Errorf("%s: Extend after Release: %v; want an error matching ErrLeaseLost saying it was released", k.what, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: a third Release: %v, want nil", k.what, err)
		}
		if !errors.Is(context.Cause(l.Context()), context.Canceled) && context.Cause(l.Context()) == nil {
			t.Errorf("%s: the released lease's Context is not done", k.what)
		}
	}
	if out := buf.String(); out != "" {
		t.Errorf("calls on released leases logged:\n%s", out)
	}
}
