package primitives_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/contracttest"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"

	"github.com/redis/go-redis/v9"
)

// A grant a user middleware does not hand to the caller is released at
// once: the middleware returned an error (or no lease) after next granted,
// or panicked. The lock is free for the next caller, not held (and
// renewed) by a lease nobody has.
func TestGrantNotHandedOverIsReleased(t *testing.T) {
	srv := contracttest.StartMiniredis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addrs()[0]})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	errVeto := errors.New("vetoed by the middleware")
	for _, tc := range []struct {
		name string
		mw   latchkit.Middleware
	}{
		{"error after grant", func(next latchkit.Acquire) latchkit.Acquire {
			return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
				if _, err := next(ctx, req); err != nil {
					return nil, err
				}
				return nil, errVeto
			}
		}},
		{"no lease and no error", func(next latchkit.Acquire) latchkit.Acquire {
			return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
				_, err := next(ctx, req)
				return nil, err
			}
		}},
		{"panic after grant", func(next latchkit.Acquire) latchkit.Acquire {
			return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
				if _, err := next(ctx, req); err != nil {
					return nil, err
				}
				panic("middleware bug")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "unclaimed-" + tc.name
			m, err := primitives.NewMutex(clienttest.For(t, b), name, primitives.WithTTL(10*time.Second), primitives.WithMiddleware(tc.mw))
			if err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() { _ = recover() }()
				if l, err := m.TryLock(context.Background()); err == nil && l != nil {
					t.Fatalf("the middleware handed over a lease")
				}
			}()
			other, _ := primitives.NewMutex(clienttest.For(t, b), name, primitives.WithTTL(10*time.Second))
			l, err := other.TryLock(context.Background())
			if err != nil {
				t.Fatalf("after a grant the middleware kept from its caller (%s), TryLock: %v, want the lock free", tc.name, err)
			}
			_ = l.Release(context.Background())
		})
	}
}
