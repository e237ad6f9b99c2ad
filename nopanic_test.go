package latchkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
	"github.com/latchkit/latchkit/middleware"
	"github.com/latchkit/latchkit/primitives"
)

// Issue 38, finding 5: every exported function and method of package
// latchkit with bad input (nil receivers, nil functions, zero values, nil
// contexts; a Lease's methods on every kind of lease latchkit hands out,
// released, and after its Client closed) returns an error (ErrInvalid for
// bad input) or is a documented no-op, never panics. apicover.Check
// requires a case for each.
func TestNoPanicOnBadInput(t *testing.T) {
	var nilCtx context.Context
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = primitives.WithOwner(ctx, "owner")
	inv := latchkit.ErrInvalid
	req := &latchkit.Request{Name: "x", Kind: latchkit.KindMutex}
	granted := func(context.Context, *latchkit.Request) (latchkit.Lease, error) { return nil, nil }

	// leases returns one lease of each kind latchkit hands out (a
	// Mutex's, a reentrant level, a MultiLease, one wrapped by Tracing),
	// and the Client they are on.
	m := miniredis.RunT(t)
	leases := func(t *testing.T) (map[string]latchkit.Lease, *primitives.Client) {
		t.Helper()
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		cl, err := primitives.NewClient(goredis.New(rdb))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close(context.Background()) })
		p := primitives.WithPrefix(t.Name() + ":")
		out := map[string]latchkit.Lease{}
		for kind, mk := range map[string]func() (primitives.Mutex, error){
			"Mutex":          func() (primitives.Mutex, error) { return primitives.NewMutex(cl, "m", p) },
			"ReentrantMutex": func() (primitives.Mutex, error) { return primitives.NewReentrantMutex(cl, "r", p) },
			"MultiLock":      func() (primitives.Mutex, error) { return primitives.NewMultiLock(cl, []string{"a", "b"}, p) },
			"traced Mutex": func() (primitives.Mutex, error) {
				return primitives.NewMutex(cl, "t", p, primitives.WithMiddleware(middleware.Tracing()))
			},
		} {
			mu, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			l, err := mu.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out[kind] = l
		}
		return out, cl
	}
	// each runs f on every kind of lease, live, then again released and
	// after its Client closed.
	each := func(t *testing.T, f func(t *testing.T, what string, l latchkit.Lease, live bool)) {
		ls, cl := leases(t)
		for k, l := range ls {
			f(t, k, l, true)
		}
		for k, l := range ls {
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%s: release: %v", k, err)
			}
			f(t, k+" released", l, false)
		}
		ls, cl = leases(t)
		if err := cl.Close(ctx); err != nil {
			t.Fatal(err)
		}
		for k, l := range ls {
			f(t, k+" after Close", l, false)
		}
	}

	cases := map[string]func(t *testing.T){
		"Chain": func(t *testing.T) {
			apicover.Must(t, "Chain(nil)(ctx, req)", func() error { _, err := latchkit.Chain(nil)(ctx, req); return err }, inv)
			apicover.Must(t, "Chain(nil, mw)(ctx, req)", func() error {
				mw := func(next latchkit.Acquire) latchkit.Acquire { return next }
				_, err := latchkit.Chain(nil, mw)(ctx, req)
				return err
			}, inv)
			apicover.Must(t, "Chain(a, a middleware returning nil)(ctx, req)", func() error {
				_, err := latchkit.Chain(granted, func(latchkit.Acquire) latchkit.Acquire { return nil })(ctx, req)
				return err
			}, inv)
			// Nil middleware are skipped: documented.
			if err := apicover.Calm(t, "Chain(a, nil, nil)", func() error { _, err := latchkit.Chain(granted, nil, nil)(ctx, req); return err }); err != nil {
				t.Errorf("Chain(a, nil, nil): %v, want a's outcome", err)
			}
		},
		"Innermost": func(t *testing.T) {
			var got latchkit.Lease
			apicover.Calm(t, "Innermost(nil)", func() error { got = latchkit.Innermost(nil); return nil })
			if got != nil {
				t.Errorf("Innermost(nil) = %v", got)
			}
		},
		"HeldError.Error": func(t *testing.T) {
			for _, e := range []*latchkit.HeldError{nil, {}, {WaitHint: -1}, {WaitHint: time.Second, AtLeast: true}} {
				apicover.Calm(t, "HeldError.Error", func() error { _ = e.Error(); return nil })
			}
		},
		"HeldError.Is": func(t *testing.T) {
			var e *latchkit.HeldError
			apicover.Calm(t, "(*HeldError)(nil).Is", func() error { _ = e.Is(nil); _ = e.Is(latchkit.ErrNotAcquired); return nil })
		},
		"OpError.Error": func(t *testing.T) {
			for _, e := range []*latchkit.OpError{nil, {}} {
				apicover.Calm(t, "OpError.Error", func() error { _ = e.Error(); return nil })
			}
		},
		"OpError.Unwrap": func(t *testing.T) {
			for _, e := range []*latchkit.OpError{nil, {}} {
				apicover.Calm(t, "OpError.Unwrap", func() error { return e.Unwrap() })
			}
		},
		"Lease.Name": func(t *testing.T) {
			each(t, func(t *testing.T, what string, l latchkit.Lease, _ bool) {
				apicover.Calm(t, what+".Name", func() error { _ = l.Name(); return nil })
			})
		},
		"Lease.Token": func(t *testing.T) {
			each(t, func(t *testing.T, what string, l latchkit.Lease, _ bool) {
				apicover.Calm(t, what+".Token", func() error { _ = l.Token(); return nil })
			})
		},
		"Lease.Fence": func(t *testing.T) {
			each(t, func(t *testing.T, what string, l latchkit.Lease, _ bool) {
				apicover.Calm(t, what+".Fence", func() error { _ = l.Fence(); return nil })
			})
		},
		"Lease.Context": func(t *testing.T) {
			each(t, func(t *testing.T, what string, l latchkit.Lease, live bool) {
				apicover.Calm(t, what+".Context", func() error {
					if err := l.Context().Err(); (err == nil) != live {
						t.Errorf("%s: Context().Err() = %v", what, err)
					}
					return nil
				})
			})
		},
		"Lease.TTL": func(t *testing.T) {
			each(t, func(t *testing.T, what string, l latchkit.Lease, live bool) {
				apicover.Must(t, what+".TTL(nil ctx)", func() error { _, err := l.TTL(nilCtx); return err }, inv)
				if !live {
					apicover.Must(t, what+".TTL", func() error { _, err := l.TTL(ctx); return err }, latchkit.ErrLeaseLost, latchkit.ErrClosed)
				}
			})
		},
		"Lease.Extend": func(t *testing.T) {
			each(t, func(t *testing.T, what string, l latchkit.Lease, live bool) {
				apicover.Must(t, what+".Extend(nil ctx)", func() error { return l.Extend(nilCtx, time.Second) }, inv)
				for _, d := range []time.Duration{0, -1, primitives.MinTTL - 1} {
					apicover.Must(t, what+".Extend(bad ttl)", func() error { return l.Extend(ctx, d) }, inv)
				}
				if !live {
					apicover.Must(t, what+".Extend", func() error { return l.Extend(ctx, time.Second) }, latchkit.ErrLeaseLost, latchkit.ErrClosed)
				}
			})
		},
		"Lease.Release": func(t *testing.T) {
			each(t, func(t *testing.T, what string, l latchkit.Lease, live bool) {
				apicover.Must(t, what+".Release(nil ctx)", func() error { return l.Release(nilCtx) }, inv)
				if live {
					if err := l.Context().Err(); err != nil {
						t.Errorf("%s: a refused Release ended the lease: %v", what, err)
					}
					return
				}
				// Released already: Release returns what the first one did
				// (documented), nil or, after Close, ErrClosed.
				if err := apicover.Calm(t, what+".Release again", func() error { return l.Release(ctx) }); err != nil && !errors.Is(err, latchkit.ErrClosed) {
					t.Errorf("%s: Release again: %v", what, err)
				}
			})
		},
	}
	apicover.Check(t, ".", cases)
}
