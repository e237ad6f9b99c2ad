package primitives_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// TestFencesOfHoldersInOneMicrosecond (issue 39, item 2): the kinds with
// several holders at once take their fences from the server's clock
// (no counter), so grants in one µs of it must still take increasing
// fences. On a miniredis whose clock stands still (every script runs in
// the same µs), a first holder alone is granted and released, then
// holders are granted, released in a random order and granted again, 200
// times: every grant's fence is above every earlier one, whichever holder
// left (the highest fence held, or the one kept beside the given-back
// tokens once its holder left). An RWLock's writer,
// granted once its readers left, is above them, and readers after it
// above it.
func TestFencesOfHoldersInOneMicrosecond(t *testing.T) {
	ctx := context.Background()
	kinds := map[string]func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error){
		"Semaphore": func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
			s, err := primitives.NewSemaphore(c, "n", 4, opts...)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire, nil
		},
		"FairSemaphore": func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
			s, err := primitives.NewFairSemaphore(c, "n", 4, opts...)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire, nil
		},
		"RWLock/read": func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
			rw, err := primitives.NewRWLock(c, "n", opts...)
			if err != nil {
				return nil, err
			}
			return rw.TryRLock, nil
		},
	}
	for name, open := range kinds {
		t.Run(name, func(t *testing.T) {
			m := miniredis.RunT(t)
			m.SetTime(time.Now())
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			cl := clienttest.For(t, goredis.New(c))
			try, err := open(cl, primitives.WithAutoExtend(false), primitives.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			var held []latchkit.Lease
			var last int64
			grant := func(i int) {
				l, err := try(ctx)
				if err != nil {
					t.Fatalf("grant %d with %d held: %v", i, len(held), err)
				}
				if l.Fence() <= last {
					t.Fatalf("grant %d with %d held: fence %d, not above %d", i, len(held), l.Fence(), last)
				}
				last = l.Fence()
				held = append(held, l)
			}
			// The first holder of the µs, alone, leaves: its fence, the
			// clock's, is kept beside the given-back tokens.
			grant(-1)
			if err := held[0].Release(ctx); err != nil {
				t.Fatal(err)
			}
			held = nil
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 200 {
				for len(held) < 4 && (len(held) == 0 || rng.IntN(2) == 0) {
					grant(i)
				}
				j := rng.IntN(len(held))
				if err := held[j].Release(ctx); err != nil {
					t.Fatal(err)
				}
				held = append(held[:j], held[j+1:]...)
			}
			if name != "RWLock/read" {
				return
			}
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			rw, _ := primitives.NewRWLock(cl, "n", primitives.WithAutoExtend(false), primitives.WithTTL(time.Minute))
			w, err := rw.TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if w.Fence() <= last {
				t.Errorf("the writer after the readers: fence %d, not above %d", w.Fence(), last)
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r, err := rw.TryRLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.Fence() <= w.Fence() {
				t.Errorf("a reader after the writer: fence %d, not above %d", r.Fence(), w.Fence())
			}
		})
	}
}

// TestWaiterWokenByLoneHoldersRelease (issue 39): a lone holder (a
// Semaphore's only permit holder, an RWLock's only reader, kept in one
// member) is released without looking for waiters, so the scripts must
// spread it before a waiter leaves its mark (a Semaphore) or its intent
// (an RWLock's writer). A waiter whose retry policy and heartbeat are
// 30 s is granted within a second of the lone holder's release: only the
// release's message can have woken it.
func TestWaiterWokenByLoneHoldersRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	slow := []primitives.Option{primitives.WithRetry(retry.Constant(30 * time.Second)), primitives.WithWaiterTimeout(30 * time.Second), primitives.WithTTL(time.Minute)}
	kinds := map[string]func(cl *primitives.Client, holder bool) (func(context.Context) (latchkit.Lease, error), error){
		"Semaphore": func(cl *primitives.Client, holder bool) (func(context.Context) (latchkit.Lease, error), error) {
			s, err := primitives.NewSemaphore(cl, "s", 1, slow...)
			if err != nil {
				return nil, err
			}
			if holder {
				return s.TryAcquire, nil
			}
			return s.Acquire, nil
		},
		"RWLock": func(cl *primitives.Client, holder bool) (func(context.Context) (latchkit.Lease, error), error) {
			rw, err := primitives.NewRWLock(cl, "rw", slow...)
			if err != nil {
				return nil, err
			}
			if holder {
				return rw.TryRLock, nil
			}
			return rw.Lock, nil
		},
	}
	for name, open := range kinds {
		t.Run(name, func(t *testing.T) {
			hold, err := open(clienttest.For(t, b), true)
			if err != nil {
				t.Fatal(err)
			}
			wait, err := open(clienttest.For(t, b), false)
			if err != nil {
				t.Fatal(err)
			}
			h, err := hold(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := wait(ctx)
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			time.Sleep(200 * time.Millisecond) // the waiter's first attempt, refused, and its subscription
			released := time.Now()
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("the waiter was granted %v after the release", time.Since(released).Round(time.Millisecond))
			case <-time.After(time.Second):
				t.Fatal("the waiter was not woken by the lone holder's release")
			}
		})
	}
}
