package primitives

import (
	"context"
	"errors"
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
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
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
		for _, k := range keyspace.WithoutClientRecords(srv.mini.Keys()) {
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
for _, tok in ipairs(redis.call('HKEYS', KEYS[3])) do
  local alive = redis.call('ZSCORE', KEYS[2], tok)
  if alive and tonumber(alive) > now then sum = sum + tonumber(redis.call('HGET', KEYS[7], tok) or '1') end
end
return sum`)

func heldPermits(t *testing.T, ctx context.Context, s *fairSemaphore) int64 {
	t.Helper()
	v, err := s.B.Eval(ctx, fairHeld, s.Keys, nil)
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
	s, err := newFairSemaphore(kind, core(testClient(t, b)), name, limit, append([]Option{WithAutoExtend(false), WithTTL(10 * time.Second)}, opts...))
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
	args := append(append([]string{tok}, s.args[:5]...), strconv.Itoa(n), s.stored, "", s.Cfg.RetArg)
	v, err := s.B.Eval(ctx, fairAcquire, s.Keys, args)
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
			if ok, err := srv.c.HExists(ctx, m.Keys[2], "ghost").Result(); err != nil || !ok {
				t.Fatalf("the withdrawal did not hand the lock to the ghost: %v %v", ok, err)
			}
			checkEveryKeyExpires(t, ctx, srv, "wd:", "a withdrawal handed the lock to a dead waiter")
		})
	})
}

// The sequences that once granted more permits than the limit.

// client is a second connection to the same server: another process.
func (srv fairServer) client(t *testing.T) backend.Backend {
	c := redis.NewClient(&redis.Options{Addr: srv.c.Options().Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return goredis.New(c)
}

// waitUntil polls cond every few ms for at most d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// queued counts the tickets in s's queue.
func queued(t *testing.T, ctx context.Context, srv fairServer, s *fairSemaphore) int64 {
	t.Helper()
	n, err := srv.c.ZCard(ctx, s.Keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pausedWaiter is a waiting AcquireN in a process that pauses (SIGSTOP, a
// GC pause, a VM migration) once it has queued: from pause() on it makes
// no attempt and no heartbeat until resume().
type pausedWaiter struct {
	hb     *hangs
	cancel context.CancelFunc
	done   chan struct{}
	lease  latchkit.Lease
	err    error
}

func startPausedWaiter(t *testing.T, ctx context.Context, srv fairServer, name string, limit, n int, opts ...Option) *pausedWaiter {
	t.Helper()
	w := &pausedWaiter{hb: newHangs(srv.client(t)), done: make(chan struct{})}
	s := newFairT(t, w.hb, name, limit, opts...)
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.lease, w.err = s.AcquireN(wctx, n)
	}()
	t.Cleanup(w.stop)
	return w
}

// pause stops the waiter's process: its calls hang from now on, and pause
// returns once none sent before is still in flight (an attempt sent just
// before, answered after the test moved on, would be granted on a state
// the test did not mean to show it).
func (w *pausedWaiter) pause(t *testing.T) {
	t.Helper()
	w.hb.stop("")
	if !w.hb.settle(5 * time.Second) {
		t.Fatal("the paused waiter's last call still in flight after 5s")
	}
}

func (w *pausedWaiter) resume() { w.hb.resume() }

// granted reports whether the waiter's AcquireN returned a lease within d.
func (w *pausedWaiter) granted(d time.Duration) bool {
	select {
	case <-w.done:
		return w.err == nil
	case <-time.After(d):
		return false
	}
}

// stop ends the waiter and releases what it got.
func (w *pausedWaiter) stop() {
	w.hb.resume()
	w.cancel()
	<-w.done
	if w.lease != nil {
		w.lease.Release(context.Background())
	}
}

// TestFairNeverOverLimitAfterPassedOverWaiter: "never over the limit,
// counting weights", with a waiter that SetLimit made heavier than the
// limit. A holds 3 of 6 and W waits for 5; W's process pauses; SetLimit(2)
// passes W over; A releases; B's TryAcquireN(2) is granted (W does not
// count while it cannot be granted); SetLimit(6). W, back in the running,
// must wait for B's 2 permits: 5 beside them is 7 of 6. (Before: the
// hand-over and W's own attempt counted only the tickets ahead of W, not
// B's permits behind it, and granted W.) W keeps its place: it is granted
// as soon as B releases, before anyone who came after it.
func TestFairNeverOverLimitAfterPassedOverWaiter(t *testing.T) {
	onFairServers(t, func(t *testing.T, srv fairServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := newFairT(t, srv.b, "f", 6)
		a, err := s.TryAcquireN(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		w := startPausedWaiter(t, ctx, srv, "f", 6, 5)
		waitUntil(t, 5*time.Second, "W queued", func() bool { return queued(t, ctx, srv, s) == 2 })
		w.pause(t)
		if err := s.SetLimit(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := s.TryAcquireN(ctx, 2)
		if err != nil {
			t.Fatalf("B's TryAcquireN(2) with 2 of 2 free and W (5) passed over: %v", err)
		}
		defer b.Release(ctx)
		if err := s.SetLimit(ctx, 6); err != nil {
			t.Fatal(err)
		}
		if n := heldPermits(t, ctx, s); n > 6 {
			t.Errorf("after SetLimit(6): %d permits held of 6 (B's 2 and W's 5: the hand-over granted W)", n)
		}
		w.resume()
		if w.granted(300 * time.Millisecond) {
			t.Errorf("W granted 5 permits beside B's 2: %d of 6", heldPermits(t, ctx, s))
		}
		if n := heldPermits(t, ctx, s); n > 6 {
			t.Fatalf("after W's attempt: %d permits held of 6", n)
		}
		// A newcomer does not overtake W, which is back in the running.
		if l, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
			if l != nil {
				l.Release(ctx)
			}
			t.Errorf("a TryAcquire with W (5) waiting at the head and B holding 2 of 6: %v, want ErrNotAcquired", err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !w.granted(5 * time.Second) {
			t.Fatalf("W not granted once B released: %v", w.err)
		}
		if n := heldPermits(t, ctx, s); n != 5 {
			t.Errorf("W holding: %d permits held, want 5", n)
		}
	})
}

// TestFairNeverOverLimitLoweredBelowHolderBehindWaiter: "never over the
// limit" with one-permit tickets, when a holder's ticket is behind a
// waiter's. Limit 3: A, X and Y hold, W waits; W's process pauses; X and Y
// die (their TTL runs out); C's TryAcquire sweeps them and is granted
// behind W (A, W and C fit in 3). SetLimit(2): A and C hold 2 of 2, so
// nothing may be granted. (Before: the hand-over counted only the tickets
// ahead of W, A's one, and granted W: 3 of 2; so did W's own attempt.)
func TestFairNeverOverLimitLoweredBelowHolderBehindWaiter(t *testing.T) {
	onFairServers(t, func(t *testing.T, srv fairServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := newFairT(t, srv.b, "f", 3)
		short := newFairT(t, srv.b, "f", 3, WithTTL(100*time.Millisecond))
		a, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, who := range []string{"X", "Y"} {
			if _, err := short.TryAcquire(ctx); err != nil {
				t.Fatalf("%s: %v", who, err)
			}
		}
		w := startPausedWaiter(t, ctx, srv, "f", 3, 1)
		waitUntil(t, 5*time.Second, "W queued", func() bool { return queued(t, ctx, srv, s) == 4 })
		w.pause(t)
		srv.pass(150 * time.Millisecond) // X and Y are dead
		c, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("C's TryAcquire with A holding, W waiting and X, Y dead (3 of 3): %v", err)
		}
		defer c.Release(ctx)
		if err := s.SetLimit(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if n := heldPermits(t, ctx, s); n > 2 {
			t.Errorf("after SetLimit(2): %d permits held of 2 (A, C and W: the hand-over granted W)", n)
		}
		w.resume()
		if w.granted(300 * time.Millisecond) {
			t.Errorf("W granted beside A and C: %d of 2", heldPermits(t, ctx, s))
		}
		if n := heldPermits(t, ctx, s); n > 2 {
			t.Fatalf("after W's attempt: %d permits held of 2", n)
		}
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !w.granted(5 * time.Second) {
			t.Fatalf("W not granted once C released: %v", w.err)
		}
		a.Release(ctx)
	})
}
