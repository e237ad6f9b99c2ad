package faults_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestGiveUpInFlight gives up a waiting Lock while its attempt is on its
// way: Redis is stopped (SIGSTOP) when the Lock starts, its deadline
// (100 ms) passes while the attempt waits in the server's socket, and
// Redis continues 300 ms later and runs it. The attempt grants a free
// primitive to a caller that has already returned an error: a ghost grant
// that nobody holds and nobody renews (30 s TTL here) unless the give-up
// takes it back. Checked: once Redis runs again, every permit is free
// within a second (a give-up that could not reach Redis may finish after
// the Lock returned, but must finish).
func TestGiveUpInFlight(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	for _, d := range lane.Subset(drivers, 1, 1) {
		for _, p := range prims {
			t.Run(d.name+"/"+p.name, func(t *testing.T) {
				srv := redistest.Start(t)
				opts := []primitives.Option{primitives.WithTTL(30 * time.Second), primitives.WithPrefix("u:")}
				lock, _, _, err := p.open(clienttest.For(t, d.new(t, srv.Addr)), 0, opts...)
				if err != nil {
					t.Fatal(err)
				}
				_, try, _, _ := p.open(clienttest.For(t, d.new(t, srv.Addr)), 0, opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				// Connections up and scripts loaded: the attempt that will
				// wait in the socket is the acquire script itself.
				l, err := lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				violations, ops := 0, 2

				srv.Pause()
				resumed := make(chan struct{})
				go func() {
					defer close(resumed)
					time.Sleep(300 * time.Millisecond)
					srv.Resume()
				}()
				lctx, lcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				start := time.Now()
				l, err = lock(lctx)
				took := time.Since(start)
				lcancel()
				ops++
				<-resumed
				if err == nil {
					// A driver that ignores deadlines waited for Redis and
					// was granted: a lease its caller holds, no ghost.
					t.Logf("Lock with a 100ms deadline on a stopped Redis granted after %v: the driver ignored the deadline", took.Round(time.Millisecond))
					l.Release(ctx)
				} else {
					t.Logf("Lock given up after %v: %v", took.Round(time.Millisecond), err)
				}

				// Every permit free within a second of Redis running again.
				left, last := p.limit, error(nil)
				if left > 2 {
					left = 1 // an RWLock's writer
				}
				permits := left
				for deadline := time.Now().Add(time.Second); ; {
					var held []latchkit.Lease
					for len(held) < permits {
						ops++
						l, err := try(ctx)
						if err != nil {
							last = err
							break
						}
						held = append(held, l)
					}
					left = permits - len(held)
					for _, l := range held {
						l.Release(ctx)
					}
					if left == 0 || time.Now().After(deadline) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if left > 0 {
					violations++
					t.Errorf("%d of %d permits still held 1s after Redis ran the attempt of a Lock that had given up (%v): a ghost grant (last TryLock: %v)", left, permits, err, last)
				}
				table.mu.Lock()
				table.rows = append(table.rows, row{"give-up in flight", d.name, p.name, ops, "Redis stopped (SIGSTOP) while a waiting Lock's attempt is in flight, until 200ms after the Lock's deadline; the attempt then runs", violations})
				table.mu.Unlock()
			})
		}
	}
}

// TestResentQueueingAttempt resends a waiting Lock's first attempt, the
// one that queues it, after the holder's lease expired, as a driver does
// after a read timeout or a reset: the first run finds the lock held and
// queues waiter W1, the second (the reply W1 sees) finds it free and
// grants it. W1's place in the queue must not outlive the grant: when W1
// releases, the lock goes to W2, queued behind it, at once, never back to
// W1's own token (which nobody waits for: the lock would sit for the
// waiter timeout, 3 s, before W2 could have it).
//
// Checked: W2 is granted within 500 ms of W1's release (a hand-over takes
// a round trip and a message; 500 ms is slack for a loaded machine), the
// lock key never holds W1's token after its release, and no hand-over
// message names W1's token.
func TestResentQueueingAttempt(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	// The holder's lease, and when W1's first attempt runs again: after
	// the lease ran out, and before rueidis (ConnWriteTimeout 500 ms in
	// the drivers' set-up) gives up on a reply.
	const slack, holderTTL, resendAfter = 500 * time.Millisecond, 150 * time.Millisecond, 350 * time.Millisecond
	kinds := []struct {
		name       string
		mutexKeys  bool // uses the Mutex keys (prefix{name}), whose value we can read
		ctor       func(cl *primitives.Client, name string, opts ...primitives.Option) (primitives.Mutex, error)
		withOwners bool
	}{
		{"Mutex", true, primitives.NewMutex, false},
		{"ReentrantMutex", true, primitives.NewReentrantMutex, true},
		{"FairMutex", false, primitives.NewFairMutex, false},
	}
	for _, d := range lane.Subset(drivers, 2, 1) {
		for _, k := range kinds {
			t.Run(d.name+"/"+k.name, func(t *testing.T) {
				srv := redistest.Start(t)
				px := faultproxy.Start(t, srv.Addr)
				const prefix, name = "g:", "q"
				opts := []primitives.Option{primitives.WithPrefix(prefix)}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				owner := func(id string) context.Context {
					if k.withOwners {
						return primitives.WithOwner(ctx, id)
					}
					return ctx
				}
				violations, ops := 0, 0
				fail := func(format string, a ...any) { violations++; t.Errorf(format, a...) }

				// Every client made first, so that W1's first attempt
				// follows the holder's grant at once.
				m1, err := k.ctor(clienttest.For(t, d.new(t, px.Addr)), name, opts...)
				if err != nil {
					t.Fatal(err)
				}
				m2, err := k.ctor(clienttest.For(t, d.new(t, srv.Addr)), name, opts...)
				if err != nil {
					t.Fatal(err)
				}

				// The holder: a short lease, not renewed.
				hm, err := k.ctor(clienttest.For(t, d.new(t, srv.Addr)), name, append(opts, primitives.WithTTL(holderTTL), primitives.WithAutoExtend(false))...)
				if err != nil {
					t.Fatal(err)
				}
				hl, err := hm.Lock(owner("holder"))
				ops++
				if err != nil {
					t.Fatal(err)
				}
				heldAt := time.Now()

				// W1's first attempt runs now (queued: the lock is held),
				// and again after the holder's lease ran out.
				r := px.ResendNext(faultproxy.Command("EVALSHA", "EVAL"), resendAfter)
				queued := make(chan int64, 1)
				go func() {
					<-r.Executed()
					n := int64(-1)
					if k.mutexKeys {
						v, _ := srv.Do(ctx, "ZCARD", prefix+"{"+name+"}:q")
						n, _ = v.(int64)
					}
					queued <- n
				}()
				l1, err := m1.Lock(owner("w1"))
				ops++
				if err != nil {
					t.Fatalf("W1: %v", err)
				}
				if n := <-queued; n == 0 {
					t.Skipf("W1's first attempt did not queue: the holder's %v lease had run out before it ran (a machine too slow for this test)", holderTTL)
				}
				select {
				case <-r.Done():
				default:
					t.Fatalf("W1 was granted without the resend (%q)", r.Args())
				}
				t.Logf("W1 granted %v after the holder's %v lease began, by its resent first attempt", time.Since(heldAt).Round(time.Millisecond), holderTTL)
				_ = hl // expired; its Release would only report ErrLeaseLost

				// W2 queues behind.
				type result struct {
					l  latchkit.Lease
					at time.Time
					er error
				}
				w2 := make(chan result, 1)
				go func() {
					c, cancel := context.WithTimeout(owner("w2"), 8*time.Second)
					defer cancel()
					l, err := m2.Lock(c)
					w2 <- result{l, time.Now(), err}
				}()
				waitQueued(ctx, srv, prefix, name, k.mutexKeys, l1.Token())

				// Hand-over messages, watched from here on.
				msgs := watchReleases(t, srv.Addr, prefix+"{"+name+"}*")

				released := time.Now()
				err = l1.Release(ctx)
				ops++
				if err != nil {
					fail("W1's release: %v", err)
				}
				if k.mutexKeys {
					if v, err := srv.Do(ctx, "GET", prefix+"{"+name+"}"); err == nil && v == l1.Token() {
						fail("after W1's release the lock holds W1's own token: the release handed the lock to the releasing token (its stale queue place)")
					}
				}
				res := <-w2
				ops++
				switch {
				case res.er != nil:
					fail("W2, queued behind W1: not granted (%v); W1 released %v ago", res.er, time.Since(released).Round(time.Millisecond))
				case res.at.Sub(released) > slack:
					fail("W2 granted %v after W1's release, want within %v", res.at.Sub(released).Round(time.Millisecond), slack)
				default:
					t.Logf("W2 granted %v after W1's release", res.at.Sub(released).Round(time.Millisecond))
				}
				if res.l != nil {
					res.l.Release(ctx)
				}
				digest := "=" + wakeDigest(l1.Token())
				for _, m := range msgs() {
					if m == digest {
						fail("a hand-over message names W1's token, the releasing one")
					}
				}
				table.mu.Lock()
				table.rows = append(table.rows, row{"resent queueing attempt", d.name, k.name, ops, "a waiter's first (queueing) attempt run again after the holder's lease expired, only the second reply seen; a second waiter queued behind it", violations})
				table.mu.Unlock()
			})
		}
	}
}

// waitQueued waits (up to a second) until the queue of the Mutex name
// holds an entry that is not token's: the second waiter queued. For a
// primitive whose queue it cannot read, it waits 300 ms.
func waitQueued(ctx context.Context, srv *redistest.Server, prefix, name string, mutexKeys bool, token string) {
	if !mutexKeys {
		time.Sleep(300 * time.Millisecond)
		return
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		v, err := srv.Do(ctx, "ZRANGE", prefix+"{"+name+"}:q", 0, -1)
		if err != nil {
			continue
		}
		entries, _ := v.([]any)
		for _, e := range entries {
			if s, ok := e.(string); ok && !strings.HasPrefix(s, token) {
				return
			}
		}
	}
}

// watchReleases subscribes to the channels matching pattern on addr and
// returns a func reporting the payloads received so far.
func watchReleases(t *testing.T, addr, pattern string) func() []string {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sub := c.PSubscribe(ctx, pattern)
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("PSUBSCRIBE: %v", err)
	}
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.Channel() {
			mu.Lock()
			got = append(got, m.Payload)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { sub.Close(); <-done })
	return func() []string {
		time.Sleep(50 * time.Millisecond) // let messages in flight arrive
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// wakeDigest is how a hand-over message names the waiter it wakes: the
// first 16 hex digits of the SHA-1 of its token.
func wakeDigest(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}
