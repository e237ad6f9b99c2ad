package primitives_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestGrantRefusedAfterWritingIsGivenBack: when the server refuses a
// command of an acquire script after the script wrote its grant (here an
// ACL without HSET, which the Election's seat and the Semaphore's
// annotations need), the acquisition fails and the grant is given back: the primitive
// is free for the next caller at once, not held by nobody for the TTL.
func TestGrantRefusedAfterWritingIsGivenBack(t *testing.T) {
	admin := aclServer(t, []any{"ACL", "SETUSER", "svc", "on", ">pw", "~latch:*", "&*", "+@all", "-hset"})
	c := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: "svc", Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	svc, full := goredis.New(c), goredis.New(admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := []primitives.Option{primitives.WithTTL(time.Minute)}

	t.Run("Election", func(t *testing.T) {
		e, _ := primitives.NewElection(clienttest.For(t, svc), "e", opts...)
		if l, err := e.Campaign(ctx, "a"); err == nil {
			l.Release(ctx)
			t.Fatal("Campaign led without HSET")
		} else {
			t.Logf("Campaign: %v", err)
		}
		other, _ := primitives.NewElection(clienttest.For(t, full), "e", opts...)
		l, err := other.TryCampaign(ctx, "b")
		if err != nil {
			t.Fatalf("TryCampaign after the refused Campaign: %v, want the seat free", err)
		}
		l.Release(ctx)
	})
	t.Run("Semaphore", func(t *testing.T) {
		// An annotation is written (HSET) after the permit: the grant
		// itself is one ZADD.
		s, _ := primitives.NewSemaphore(clienttest.For(t, svc), "s", 1, append(opts, primitives.WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
			return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
				req.Annotation = "holder"
				return next(ctx, req)
			}
		}))...)
		if l, err := s.Acquire(ctx); err == nil {
			l.Release(ctx)
			t.Fatal("Acquire granted without HSET")
		} else {
			t.Logf("Acquire: %v", err)
		}
		other, _ := primitives.NewSemaphore(clienttest.For(t, full), "s", 1, opts...)
		l, err := other.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire after the refused Acquire: %v, want the permit free", err)
		}
		l.Release(ctx)
	})
	noKeyWithoutExpiry(t, admin)
}

// TestWrongTypeAttemptChangesNothing: an attempt that meets a key holding
// something the script cannot use (a string where its holders or
// given-back tokens are, an annotations hash that is a string) fails with
// an error matching latchkit.ErrInvalid and changes nothing in Redis:
// every script checks the keys it touches before its first write.
func TestWrongTypeAttemptChangesNothing(t *testing.T) {
	s := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { admin.Close() })
	b := goredis.New(admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	annotate := primitives.WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			req.Annotation = "holder"
			return next(ctx, req)
		}
	})
	p := keyspace.DefaultPrefix
	cases := []struct {
		name    string
		key     string // set to bad before the attempt
		bad     string
		attempt func() (latchkit.Lease, error)
	}{
		{"Semaphore/holders", keyspace.SemLayout.KeysOf(p, "s1")[0], "not a zset", func() (latchkit.Lease, error) {
			sem, _ := primitives.NewSemaphore(clienttest.For(t, b), "s1", 1)
			return sem.TryAcquire(ctx)
		}},
		{"Semaphore/given-back tokens", keyspace.SemLayout.KeysOf(p, "s2")[1], "not a zset", func() (latchkit.Lease, error) {
			sem, _ := primitives.NewSemaphore(clienttest.For(t, b), "s2", 1)
			return sem.TryAcquire(ctx)
		}},
		{"RWLock/read given-back tokens", keyspace.RWLayout.KeysOf(p, "r1")[3], "not a zset", func() (latchkit.Lease, error) {
			rw, _ := primitives.NewRWLock(clienttest.For(t, b), "r1")
			return rw.TryRLock(ctx)
		}},
		{"RWLock/write annotations", keyspace.RWLayout.KeysOf(p, "r2")[4], "not a hash", func() (latchkit.Lease, error) {
			rw, _ := primitives.NewRWLock(clienttest.For(t, b), "r2", annotate)
			return rw.TryLock(ctx)
		}},
		{"RWLock/read annotations", keyspace.RWLayout.KeysOf(p, "r3")[4], "not a hash", func() (latchkit.Lease, error) {
			rw, _ := primitives.NewRWLock(clienttest.For(t, b), "r3", annotate)
			return rw.TryRLock(ctx)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := admin.Set(ctx, tc.key, tc.bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
			l, err := tc.attempt()
			if err == nil {
				l.Release(ctx)
			}
			if !errors.Is(err, latchkit.ErrInvalid) {
				t.Errorf("attempt: %v, want an error matching ErrInvalid", err)
			}
			keys, kerr := admin.Keys(ctx, "*").Result()
			if kerr != nil {
				t.Fatal(kerr)
			}
			if keys = keyspace.WithoutClientRecords(keys); len(keys) != 1 || keys[0] != tc.key {
				t.Errorf("keys after the attempt: %q, want only %q", keys, tc.key)
			}
			if v, _ := admin.Get(ctx, tc.key).Result(); v != tc.bad {
				t.Errorf("%s = %q after the attempt, want %q", tc.key, v, tc.bad)
			}
			admin.FlushAll(ctx)
		})
	}
}
