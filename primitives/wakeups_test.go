package primitives_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// refusesSubscribe is a backend behind a proxy that refuses SUBSCRIBE
// (twemproxy, Envoy's Redis proxy): scripts run, every Subscribe fails.
type refusesSubscribe struct {
	backend.Backend
	tries atomic.Int64
}

func (r *refusesSubscribe) Subscribe(context.Context, backend.Handler) (backend.Subscription, error) {
	r.tries.Add(1)
	return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("injected: ERR unknown command 'SUBSCRIBE'")}
}

// TestWithoutWakeUpsWaitersPoll: a Client made WithWakeUps(false) never
// subscribes, and each kind of waiting call still ends as soon as it can,
// polling: a Lock and an Acquire get what a release freed, a latch's Wait
// returns once the count is zero, a Campaign leads once the leader
// resigned, and Observe reports the new leader. The same calls on a
// Client with wake-ups on, behind the same proxy, succeed too (they fall
// back to the same timers) while the Client tries to subscribe.
func TestWithoutWakeUpsWaitersPoll(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	for _, wakeUps := range []bool{false, true} {
		t.Run(map[bool]string{false: "WithWakeUps(false)", true: "wake-ups on"}[wakeUps], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rc := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rc.Close() })
			b := &refusesSubscribe{Backend: goredis.New(rc)}
			cl, err := primitives.NewClient(b, primitives.WithWakeUps(wakeUps))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close(context.Background()) })
			prefix := primitives.WithPrefix(t.Name() + ":")
			opts := []primitives.Option{prefix, primitives.WithTTL(10 * time.Second), primitives.WithRetry(retry.Constant(20 * time.Millisecond))}
			// freedWithin runs wait, frees what it waits for, and checks
			// that wait returns within a second of it.
			freedWithin := func(what string, wait func() error, free func()) {
				t.Helper()
				done := make(chan error, 1)
				go func() { done <- wait() }()
				time.Sleep(100 * time.Millisecond) // it waits
				select {
				case err := <-done:
					t.Fatalf("%s returned before it was freed: %v", what, err)
				default:
				}
				freed := time.Now()
				free()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					t.Logf("%s returned %v after it was freed", what, time.Since(freed).Round(time.Millisecond))
				case <-time.After(time.Second):
					t.Fatalf("%s had not returned a second after it was freed", what)
				}
			}

			mu, _ := primitives.NewMutex(cl, "m", opts...)
			held, err := mu.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			freedWithin("Mutex.Lock", func() error {
				l, err := mu.Lock(ctx)
				if err == nil {
					err = l.Release(ctx)
				}
				return err
			}, func() { held.Release(ctx) })

			sem, _ := primitives.NewSemaphore(cl, "s", 1, opts...)
			permit, err := sem.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			freedWithin("Semaphore.Acquire", func() error {
				l, err := sem.Acquire(ctx)
				if err == nil {
					err = l.Release(ctx)
				}
				return err
			}, func() { permit.Release(ctx) })

			latch, _ := primitives.NewLatch(cl, "l", prefix, primitives.WithRetry(retry.Constant(20*time.Millisecond)))
			if ok, err := latch.TrySetCount(ctx, 1); !ok || err != nil {
				t.Fatalf("TrySetCount: %v, %v", ok, err)
			}
			freedWithin("Latch.Wait", func() error { return latch.Wait(ctx) }, func() { latch.CountDown(ctx) })

			el, _ := primitives.NewElection(cl, "e", opts...)
			lead, err := el.Campaign(ctx, "first")
			if err != nil {
				t.Fatal(err)
			}
			octx, ocancel := context.WithCancel(ctx)
			defer ocancel()
			seen := el.Observe(octx)
			var next latchkit.Lease
			freedWithin("Election.Campaign", func() (err error) {
				next, err = el.Campaign(ctx, "second")
				return err
			}, func() { lead.Release(ctx) })
			for deadline := time.After(time.Second); ; {
				select {
				case info := <-seen:
					if info.Value != "second" {
						continue
					}
				case <-deadline:
					t.Fatal("Observe had not reported the second leader a second after it was seated")
				}
				break
			}
			next.Release(ctx)

			if n := b.tries.Load(); !wakeUps && n != 0 {
				t.Errorf("a Client made WithWakeUps(false) tried to subscribe %d times", n)
			} else if wakeUps && n == 0 {
				t.Error("a Client with wake-ups on never tried to subscribe: the test shows nothing")
			} else {
				t.Logf("subscribe tries: %d", n)
			}
		})
	}
}
