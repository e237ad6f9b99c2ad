package primitives

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/redistest"
)

// Sequences of FairSemaphore and FairMutex operations that once broke a
// promise (issue 28), each run on miniredis (its clock set by the test,
// key expiry following it) and on a real redis-server.

// fairServer is one Redis a sequence runs on.
type fairServer struct {
	b backend.Backend
	c *redis.Client // the test's own view: SCAN, PTTL
	// pass lets d go by on the server's clock: at once on miniredis, by
	// sleeping on redis-server.
	pass func(d time.Duration)
	// expireAll moves the server's clock far ahead, past every TTL a
	// sequence sets (it reports false where it cannot: redis-server).
	expireAll func() bool
	mini      *miniredis.Miniredis // nil on redis-server
}

// onFairServers runs seq on a miniredis whose clock only the test moves
// (ClockTTL: keys expire by that clock, as scripts see it in TIME) and on
// a redis-server.
func onFairServers(t *testing.T, seq func(t *testing.T, srv fairServer)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		var mu sync.Mutex
		now := time.Now()
		m.SetTime(now)
		m.ClockTTL(true)
		move := func(d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(d)
			m.SetTime(now)
		}
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		seq(t, fairServer{b: goredis.New(c), c: c, pass: move, mini: m,
			expireAll: func() bool { move(48 * time.Hour); return true }})
	})
	t.Run("redis-server", func(t *testing.T) {
		redistest.Require(t)
		srv := redistest.Start(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		seq(t, fairServer{b: goredis.New(c), c: c, pass: time.Sleep, expireAll: func() bool { return false }})
	})
}

// keysWithoutExpiry returns the keys matching pattern that have no expiry
// (PTTL -1): what "bounded memory" forbids a script to leave.
func keysWithoutExpiry(ctx context.Context, c *redis.Client, pattern string) ([]string, error) {
	var out []string
	iter := c.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		d, err := c.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			return nil, err
		}
		if d == -1 { // go-redis returns -1 (ns) for "no expiry"
			out = append(out, iter.Val())
		}
	}
	return out, iter.Err()
}

// checkEveryKeyExpires fails t when a key under prefix has no expiry, and,
// where the server's clock can be moved (miniredis), when a key is left
// once every TTL and the retention have run out.
func checkEveryKeyExpires(t *testing.T, ctx context.Context, srv fairServer, prefix, after string) {
	t.Helper()
	keys, err := keysWithoutExpiry(ctx, srv.c, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("after %s: keys without an expiry (PTTL -1): %v", after, keys)
	}
	if srv.expireAll() {
		var left []string
		for _, k := range srv.mini.Keys() {
			if strings.HasPrefix(k, prefix) {
				left = append(left, k)
			}
		}
		if len(left) > 0 {
			t.Errorf("after %s, 48 h later on the server's clock: keys left for ever: %v", after, left)
		}
	}
}

// fairHeld sums the permits held of a FairSemaphore, wherever each
// holder's ticket is in the queue: every live holder's weight.
var fairHeld = backend.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sum = 0
for _, tok in ipairs(redis.call('HKEYS', KEYS[5])) do
  local alive = redis.call('ZSCORE', KEYS[2], tok)
  if alive and tonumber(alive) > now then sum = sum + tonumber(redis.call('HGET', KEYS[9], tok) or '1') end
end
return sum`)

func heldPermits(t *testing.T, ctx context.Context, s *fairSemaphore) int64 {
	t.Helper()
	v, err := s.b.Eval(ctx, fairHeld, s.keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v.(int64)
}

// newFairT is newFairSemaphore for a test (a FairMutex's when limit is 0),
// without auto-extend: no goroutine outlives the sequence.
func newFairT(t *testing.T, b backend.Backend, name string, limit int, opts ...Option) *fairSemaphore {
	t.Helper()
	kind := latchkit.KindFairSemaphore
	if limit == 0 {
		kind, limit = latchkit.KindFairMutex, 1
	}
	s, err := newFairSemaphore(kind, b, name, limit, append([]Option{WithAutoExtend(false), WithTTL(10 * time.Second)}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// deadWaiter queues a waiting ticket for n permits as a waiter's first
// attempt does, under token tok, and no more: the waiter's process died
// right after (SIGKILL), leaving its ticket live until its heartbeat runs
// out and no give-back.
func deadWaiter(t *testing.T, ctx context.Context, s *fairSemaphore, tok string, n int) {
	t.Helper()
	args := append(append([]string{tok}, s.args[:5]...), strconv.Itoa(n), s.stored, "", s.cfg.retArg)
	v, err := s.b.Eval(ctx, fairAcquire, s.keys, args)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := v.([]backend.Value); !ok || r[0] != int64(0) {
		t.Fatalf("dead waiter %s: %v, want queued", tok, v)
	}
}

// TestFairKeysExpireAfterHandOverToDeadWaiter: "bounded memory", every key
// a script writes has an expiry, when a hand-over grants a waiter that has
// just died. (Before: the release deleted the holders hash's last field,
// Redis dropped the key, and the hand-over wrote it again with HSET and no
// expiry; only the new holder's renewal would have set one. Seen: the
// holders hash still there 75 s after a release with a 2 s retention.)
// The same for the hand-over of SetLimit and of a withdrawal.
func TestFairKeysExpireAfterHandOverToDeadWaiter(t *testing.T) {
	opts := []Option{WithRetention(2 * time.Second), WithWaiterTimeout(time.Second)}
	onFairServers(t, func(t *testing.T, srv fairServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t.Run("FairMutexRelease", func(t *testing.T) {
			m := newFairT(t, srv.b, "m", 0, append(opts, WithPrefix("rel:"))...)
			l, err := m.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			deadWaiter(t, ctx, m, "ghost", 1)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			checkEveryKeyExpires(t, ctx, srv, "rel:", "a release handed the lock to a dead waiter")
		})
		t.Run("FairSemaphoreRelease", func(t *testing.T) {
			s := newFairT(t, srv.b, "s", 3, append(opts, WithPrefix("wrel:"))...)
			l, err := s.TryAcquireN(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			deadWaiter(t, ctx, s, "ghost", 2)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			checkEveryKeyExpires(t, ctx, srv, "wrel:", "a release handed 2 permits to a dead waiter")
		})
		t.Run("SetLimit", func(t *testing.T) {
			s := newFairT(t, srv.b, "s", 6, append(opts, WithPrefix("lim:"))...)
			l, err := s.TryAcquireN(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			deadWaiter(t, ctx, s, "ghost", 5)
			if err := s.SetLimit(ctx, 2); err != nil { // the ghost is passed over
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil { // no holder left: the hash goes
				t.Fatal(err)
			}
			if err := s.SetLimit(ctx, 6); err != nil { // hands 5 to the ghost
				t.Fatal(err)
			}
			if n := heldPermits(t, ctx, s); n != 5 {
				t.Fatalf("%d permits held after SetLimit(6), want the ghost's 5", n)
			}
			checkEveryKeyExpires(t, ctx, srv, "lim:", "SetLimit handed 5 permits to a dead waiter")
		})
		t.Run("Withdraw", func(t *testing.T) {
			m := newFairT(t, srv.b, "m", 0, append(opts, WithPrefix("wd:"))...)
			l, err := m.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			deadWaiter(t, ctx, m, "quitter", 1)
			deadWaiter(t, ctx, m, "ghost", 1)
			if err := l.Release(ctx); err != nil { // hands the lock to quitter
				t.Fatal(err)
			}
			// quitter's acquisition ends without a grant (its context
			// ended before the hand-over's message came): its give-back
			// passes the lock on, to the ghost.
			if err := m.withdrawFn(ctx, "quitter"); err != nil {
				t.Fatal(err)
			}
			if ok, err := srv.c.HExists(ctx, m.keys[4], "ghost").Result(); err != nil || !ok {
				t.Fatalf("the withdrawal did not hand the lock to the ghost: %v %v", ok, err)
			}
			checkEveryKeyExpires(t, ctx, srv, "wd:", "a withdrawal handed the lock to a dead waiter")
		})
	})
}
