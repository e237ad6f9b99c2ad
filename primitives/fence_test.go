package primitives

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/internal/redistest"
)

// every primitive kind, locked once on b under prefix p with opts.
var fenceKinds = map[string]func(c *Client, opts ...Option) (func(context.Context) (latchkit.Lease, error), error){
	"Mutex": func(c *Client, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		m, err := NewMutex(c, "f", opts...)
		return tryOf(m, err)
	},
	"MultiLock": func(c *Client, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		m, err := NewMultiLock(c, []string{"f", "g"}, opts...)
		return tryOf(m, err)
	},
	"FairMutex": func(c *Client, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		m, err := NewFairMutex(c, "f", opts...)
		return tryOf(m, err)
	},
	"RWLock": func(c *Client, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		rw, err := NewRWLock(c, "f", opts...)
		if err != nil {
			return nil, err
		}
		return rw.TryLock, nil
	},
	"Semaphore": func(c *Client, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		s, err := NewSemaphore(c, "f", 2, opts...)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire, nil
	},
}

func tryOf(m Mutex, err error) (func(context.Context) (latchkit.Lease, error), error) {
	if err != nil {
		return nil, err
	}
	return m.TryLock, nil
}

// fenceOnce takes and releases the primitive, returning the grant's fence.
func fenceOnce(t *testing.T, try func(context.Context) (latchkit.Lease, error)) int64 {
	t.Helper()
	l, err := try(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l.Fence()
}

// Fences keep increasing across a Redis that lost its data: FLUSHALL, and
// a kill and restart without persistence. (Before: they restarted at 1.)
func TestFencesSurviveDataLoss(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	ctx := context.Background()
	for name, open := range fenceKinds {
		t.Run(name, func(t *testing.T) {
			try, err := open(testClient(t, b), WithPrefix(name+":"), WithAutoExtend(false))
			if err != nil {
				t.Fatal(err)
			}
			f1 := fenceOnce(t, try)
			f2 := fenceOnce(t, try)
			if err := c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			f3 := fenceOnce(t, try)
			srv.Kill()
			srv.Restart(t)
			var f4 int64
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if l, err := try(ctx); err == nil {
					f4 = l.Fence()
					l.Release(ctx)
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("after the restart: %v", err)
				}
			}
			if !(f1 < f2 && f2 < f3 && f3 < f4) {
				t.Errorf("fences %d, %d, then after FLUSHALL %d, after a restart without persistence %d: not strictly increasing", f1, f2, f3, f4)
			}
		})
	}
}

// A name nobody uses for the retention leaves no key at all, and its next
// grant's fence is still above the last one's.
func TestRetentionLeavesNoKey(t *testing.T) {
	m := miniredis.RunT(t)
	start := time.Now()
	m.SetTime(start)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	for name, open := range fenceKinds {
		t.Run(name, func(t *testing.T) {
			try, err := open(testClient(t, b), WithPrefix(name+":"), WithAutoExtend(false), WithRetention(time.Hour), WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			f1 := fenceOnce(t, try)
			if len(m.Keys()) == 0 {
				t.Fatal("no key at all after a grant: the check below would prove nothing")
			}
			// An hour and more without a grant, on the server's clock.
			start = start.Add(time.Hour + 2*time.Minute)
			m.SetTime(start)
			m.FastForward(time.Hour + 2*time.Minute)
			if keys := m.Keys(); len(keys) != 0 {
				t.Fatalf("keys left after the retention: %v", keys)
			}
			if f2 := fenceOnce(t, try); f2 <= f1 {
				t.Errorf("fence %d after the retention, not above %d", f2, f1)
			}
			m.FlushAll()
		})
	}
}

// Once its last lease has ended, a name of the Mutex layout (Mutex,
// MultiLock, Election, Redlock) keeps one key, the tokens that finished,
// and only for markerTTL: its fence lives in the lock's value while held,
// and beside the finished tokens only while it may be ahead of the
// server's clock (and markerTTL more). (Before: a fence counter too, for the retention, 24 h
// by default.)
func TestIdleNameKeepsOneKey(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	m.SetTime(time.Now())
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	opts := []Option{WithAutoExtend(false), WithRetention(time.Hour), WithTTL(time.Minute)}
	kinds := map[string]struct {
		names int
		take  func() (latchkit.Lease, error)
	}{
		"Mutex": {1, func() (latchkit.Lease, error) {
			mu, err := NewMutex(testClient(t, b), "m", append(opts, WithPrefix("mutex:"))...)
			if err != nil {
				return nil, err
			}
			return mu.Lock(ctx)
		}},
		"MultiLock": {2, func() (latchkit.Lease, error) {
			mu, err := NewMultiLock(testClient(t, b), []string{"f", "g"}, append(opts, WithPrefix("multi:"))...)
			if err != nil {
				return nil, err
			}
			return mu.Lock(ctx)
		}},
		"Redlock": {1, func() (latchkit.Lease, error) {
			mu, err := NewRedlock(testClients(t, []backend.Backend{b}), "r", append(redlockOptions(opts), WithPrefix("redlock:"))...)
			if err != nil {
				return nil, err
			}
			return mu.TryLock(ctx)
		}},
	}
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			m.FlushAll()
			l, err := k.take()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			keys := m.Keys()
			if len(keys) != k.names {
				t.Fatalf("keys left by %d idle name(s): %v, want one a name (the finished tokens)", k.names, keys)
			}
			for _, key := range keys {
				// A Redlock's fence is ahead of the clock by fenceLead,
				// and kept until the clock passed it, and markerTTL more.
				if ttl := m.TTL(key); ttl <= 0 || ttl > kit.MarkerTTL+fenceLead+time.Second {
					t.Errorf("key %s lives %v: want an expiry within %v", key, ttl, kit.MarkerTTL+fenceLead)
				}
			}
		})
	}
}

// A fence ahead of the server's clock outlives its lock. miniredis's TIME
// stands still (FastForward moves only expiries), so after a first lease
// released, every fence is one above the last and ahead of the clock, as
// after a hand-over within one µs or a Redlock's lead: a lease that then
// expires unreleased leaves its fence beside the finished tokens, and the
// next grant's is above it. Without keep_fence at such a grant, the
// Mutex-layout kinds granted the same fence twice. (A fence equal to the
// clock needs no memory once its lock expired: the next grant's clock is
// later, under the README's clock assumption, which a clock standing
// still for the whole TTL does not meet.)
func TestFenceAheadOfClockOutlivesExpiry(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.Now())
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	ctx := context.Background()
	for name, open := range fenceKinds {
		t.Run(name, func(t *testing.T) {
			try, err := open(testClient(t, b), WithPrefix(name+":"), WithAutoExtend(false), WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			last := fenceOnce(t, try) // at the clock; released
			for i := range 3 {
				l, err := try(ctx)
				if err != nil {
					t.Fatalf("grant %d: %v", i, err)
				}
				if l.Fence() <= last {
					t.Fatalf("grant %d after the last lease expired unreleased: fence %d, not above %d", i, l.Fence(), last)
				}
				last = l.Fence()
				m.FastForward(2 * time.Second) // the lease expires; TIME stands still
			}
		})
	}
}
