package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// onBothServers runs f on miniredis and on a real redis-server (whose
// error replies differ), each with an admin client and a go-redis backend.
func onBothServers(t *testing.T, f func(t *testing.T, c *redis.Client, b backend.Backend)) {
	servers := map[string]func(t *testing.T) string{
		"miniredis":    func(t *testing.T) string { return miniredis.RunT(t).Addr() },
		"redis-server": func(t *testing.T) string { return redistest.Start(t).Addr },
	}
	for _, what := range []string{"miniredis", "redis-server"} {
		t.Run(what, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: servers[what](t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			f(t, c, goredis.New(c))
		})
	}
}

// checkCleanRefusal fails t unless err is a refusal a user can act on:
// it matches latchkit.ErrInvalid and the server's reply error, shows no
// script SHA, Lua line or marker, and names key.
func checkCleanRefusal(t *testing.T, err error, key, what string) {
	t.Helper()
	if !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("%s: %v, want an error matching ErrInvalid", what, err)
		return
	}
	var re *backend.ReplyError
	if !errors.As(err, &re) {
		t.Errorf("%s: %v does not wrap the reply error (*backend.ReplyError)", what, err)
	}
	msg := err.Error()
	for _, bad := range []string{"user_script", "script:", "@", "LATCHKIT_INVALID"} {
		if strings.Contains(msg, bad) {
			t.Errorf("%s: the error shows %q: %v", what, bad, msg)
		}
	}
	if sha := regexp.MustCompile(`[0-9a-f]{40}`).FindString(msg); sha != "" {
		t.Errorf("%s: the error shows a script's SHA %s: %v", what, sha, msg)
	}
	if !strings.Contains(msg, key) {
		t.Errorf("%s: %v does not name the key %s", what, msg, key)
	}
}

// wrongTypeCase is a primitive whose acquire meets a key of another type.
type wrongTypeCase struct {
	kind   string
	layout keyspace.Layout
	name   string
	// unread are the indexes of the layout's keys this acquire does not
	// read (a Try's wait queue, the reserved keys of latchkit 0.x: the
	// Mutex layout's :fence and :released, the other kinds' fence and
	// ticket counters and holders' fences): it may succeed, and must leave
	// them be.
	unread []int
	// acquire makes the attempt: a lease (nil for a latch) or an error.
	acquire func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error)
}

// annotated makes every acquisition carry an annotation, so that the
// scripts write the annotations key too.
var annotated = primitives.WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
	return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		req.Annotation = "holder"
		return next(ctx, req)
	}
})

func wrongTypeCases(prefix string) []wrongTypeCase {
	opts := []primitives.Option{primitives.WithPrefix(prefix), primitives.WithTTL(time.Minute), annotated}
	return []wrongTypeCase{
		// A Mutex-layout acquire reads the given-back tokens (4) only
		// while its lock's key says some were given back (flag g).
		{"Mutex", keyspace.MutexLayout, "m", []int{1, 2, 4, 5, 6}, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			m, _ := primitives.NewMutex(c, name, opts...)
			return m.TryLock(ctx)
		}},
		{"Semaphore", keyspace.SemLayout, "s", []int{5, 6}, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			s, _ := primitives.NewSemaphore(c, name, 2, opts...)
			return s.TryAcquire(ctx)
		}},
		{"RWLock/write", keyspace.RWLayout, "w", []int{5, 6}, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			rw, _ := primitives.NewRWLock(c, name, opts...)
			return rw.TryLock(ctx)
		}},
		{"RWLock/read", keyspace.RWLayout, "r", []int{5, 6}, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			rw, _ := primitives.NewRWLock(c, name, opts...)
			return rw.TryRLock(ctx)
		}},
		{"FairSemaphore", keyspace.FairLayout, "f", []int{8, 9}, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			s, _ := primitives.NewFairSemaphore(c, name, 2, opts...)
			return s.TryAcquire(ctx)
		}},
		{"Latch/set", keyspace.LatchLayout, "l", nil, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			l, _ := primitives.NewLatch(c, name, primitives.WithPrefix(prefix))
			_, err := l.TrySetCount(ctx, 2)
			return nil, err
		}},
		{"Latch/countdown", keyspace.LatchLayout, "d", nil, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			l, _ := primitives.NewLatch(c, name, primitives.WithPrefix(prefix))
			return nil, l.CountDown(ctx)
		}},
		{"Election", keyspace.ElectionLayout, "e", []int{1, 2, 4, 5, 6}, func(ctx context.Context, c *primitives.Client, name string) (latchkit.Lease, error) {
			e, _ := primitives.NewElection(c, name, opts...)
			return e.TryCampaign(ctx, "me")
		}},
	}
}

// TestWrongTypeKeyRefusedByName (issue 28, finding 11c): a key of another
// type (a list: no primitive keeps one) planted at each of a primitive's
// keys makes its acquire fail with an error matching ErrInvalid and the
// reply error, naming the key, without the script's SHA or Lua line, and
// nothing under the prefix changes. The keys an acquire does not read (a
// Try's wait queue, a Mutex's reserved keys, and its given-back tokens
// while none were given back) are left as they were.
func TestWrongTypeKeyRefusedByName(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, b backend.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const prefix = "wt:"
		for _, tc := range wrongTypeCases(prefix) {
			for i, key := range tc.layout.KeysOf(prefix, tc.name) {
				what := fmt.Sprintf("%s with a list at %s", tc.kind, key)
				c.FlushAll(ctx)
				if err := c.RPush(ctx, key, "not latchkit's").Err(); err != nil {
					t.Fatal(err)
				}
				before := primitives.RedisState(t, ctx, c, prefix+"*")
				l, err := tc.acquire(ctx, clienttest.For(t, b), tc.name)
				if slices.Contains(tc.unread, i) {
					if err != nil && !errors.Is(err, latchkit.ErrInvalid) {
						t.Errorf("%s: %v", what, err)
					}
					if after := primitives.RedisState(t, ctx, c, key); after[key] != before[key] {
						t.Errorf("%s changed it: %q, was %q", what, after[key], before[key])
					}
					if l != nil {
						l.Release(ctx)
					}
					continue
				}
				if l != nil {
					l.Release(ctx)
				}
				checkCleanRefusal(t, err, key, what)
				primitives.CheckUnchanged(t, ctx, c, prefix+"*", before, what)
			}
		}
	})
}

// TestForeignLockKeyWithoutExpiry (issue 28, finding 11d): latchkit writes
// every lock key that is a string with a PX expiry, so a string without
// one at a lock key ("SET latch:{x} hello") is not latchkit's: an acquire
// refuses it with an error matching ErrInvalid that names the key and
// says so, and changes nothing, instead of reading it as held for ever.
// Mutex (a Try and a waiting Lock), MultiLock, Election, RWLock's writer
// key (read and write), and Redlock over three databases, each holding
// the string.
func TestForeignLockKeyWithoutExpiry(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, b backend.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const prefix = "nx:"
		opts := []primitives.Option{primitives.WithPrefix(prefix), annotated}
		var rl []backend.Backend
		var dbs []*redis.Client
		for db := range 3 {
			o := *c.Options()
			o.DB = db
			dc := redis.NewClient(&o)
			t.Cleanup(func() { dc.Close() })
			dbs = append(dbs, dc)
			rl = append(rl, goredis.New(dc))
		}
		mutexKey := func(name string) string { return keyspace.MutexLayout.KeysOf(prefix, name)[0] }
		cases := []struct {
			kind    string
			key     string
			clients []*redis.Client
			acquire func(ctx context.Context) (latchkit.Lease, error)
		}{
			{"Mutex/TryLock", mutexKey("m"), dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				m, _ := primitives.NewMutex(clienttest.For(t, b), "m", opts...)
				return m.TryLock(ctx)
			}},
			{"Mutex/Lock", mutexKey("m"), dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				m, _ := primitives.NewMutex(clienttest.For(t, b), "m", opts...)
				return m.Lock(ctx)
			}},
			{"MultiLock/TryLock", mutexKey("b"), dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				m, _ := primitives.NewMultiLock(clienttest.For(t, b), []string{"a", "b", "c"}, opts...)
				return m.TryLock(ctx)
			}},
			{"MultiLock/Lock", mutexKey("b"), dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				m, _ := primitives.NewMultiLock(clienttest.For(t, b), []string{"a", "b", "c"}, opts...)
				return m.Lock(ctx)
			}},
			{"Election/Campaign", keyspace.ElectionLayout.KeysOf(prefix, "e")[0], dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				e, _ := primitives.NewElection(clienttest.For(t, b), "e", opts...)
				return e.Campaign(ctx, "me")
			}},
			{"RWLock/TryLock", keyspace.RWLayout.KeysOf(prefix, "w")[1], dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				rw, _ := primitives.NewRWLock(clienttest.For(t, b), "w", opts...)
				return rw.TryLock(ctx)
			}},
			{"RWLock/Lock", keyspace.RWLayout.KeysOf(prefix, "w")[1], dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				rw, _ := primitives.NewRWLock(clienttest.For(t, b), "w", opts...)
				return rw.Lock(ctx)
			}},
			{"RWLock/RLock", keyspace.RWLayout.KeysOf(prefix, "w")[1], dbs[:1], func(ctx context.Context) (latchkit.Lease, error) {
				rw, _ := primitives.NewRWLock(clienttest.For(t, b), "w", opts...)
				return rw.RLock(ctx)
			}},
			{"Redlock/Lock", mutexKey("r"), dbs, func(ctx context.Context) (latchkit.Lease, error) {
				r, err := primitives.NewRedlock(clienttest.All(t, rl), "r", clienttest.Fitting[primitives.RedlockOption](opts)...)
				if err != nil {
					t.Fatal(err)
				}
				return r.Lock(ctx)
			}},
		}
		for _, tc := range cases {
			what := fmt.Sprintf("%s with %s = \"hello\" without expiry", tc.kind, tc.key)
			before := map[int]map[string]string{}
			for i, dc := range dbs {
				dc.FlushDB(ctx)
				if i < len(tc.clients) {
					dc.Set(ctx, tc.key, "hello", 0)
				}
				before[i] = primitives.RedisState(t, ctx, dc, prefix+"*")
			}
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			start := time.Now()
			l, err := tc.acquire(actx)
			acancel()
			if l != nil {
				l.Release(ctx)
			}
			checkCleanRefusal(t, err, tc.key, what)
			if err != nil && !strings.Contains(err.Error(), "latchkit did not write") {
				t.Errorf("%s: %v, want it to say latchkit did not write the key", what, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("%s took %v: the refusal must not wait", what, d)
			}
			for i, dc := range dbs {
				primitives.CheckUnchanged(t, ctx, dc, prefix+"*", before[i], fmt.Sprintf("%s (db %d)", what, i))
			}
		}
	})
}
