package primitives_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// oomServer is a redis-server with maxmemory-policy noeviction (the safe
// policy for a lock store) that a test pushes past maxmemory and back.
type oomServer struct {
	srv *redistest.Server
	c   *redis.Client
}

func startOOMServer(t *testing.T) *oomServer {
	t.Helper()
	s := redistest.Start(t, "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return &oomServer{srv: s, c: c}
}

// backend is a go-redis backend of its own (a process's connections).
func (s *oomServer) backend(t *testing.T) backend.Backend {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return goredis.New(c)
}

// junk writes an 8 MiB junk key, with no memory limit. A test writes it
// before it takes leases: under a loaded CPU, writing it stalls the server
// long enough to hold up a renewal.
func (s *oomServer) junk(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := s.c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// Built by the server: sent by the client, the junk would leave the
	// connection's query buffer as large, counted as used memory.
	if err := s.c.Eval(ctx, "redis.call('SET', KEYS[1], string.rep('x', tonumber(ARGV[1]))); return 1", []string{"junk"}, 8<<20).Err(); err != nil {
		t.Fatal(err)
	}
}

// fill sets maxmemory to half the memory used with the junk (see junk) in,
// so that the server stays out of memory whatever a release frees: every
// command flagged deny-oom (SET, ZADD, HSET, INCR, ...) is refused with
// the OOM reply, a script's too while it has written nothing. It checks
// that a SET is refused.
func (s *oomServer) fill(t *testing.T, ctx context.Context) {
	t.Helper()
	if n, err := s.c.Exists(ctx, "junk").Result(); err != nil || n != 1 {
		t.Fatalf("no junk to fill the memory with: %d, %v", n, err)
	}
	info, err := s.c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if used == 0 {
		t.Fatalf("no used_memory in INFO memory: %q", info)
	}
	if err := s.c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Set(ctx, "probe", "1", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("SET with used memory twice maxmemory: %v, want the OOM reply", err)
	}
}

// free deletes the junk, freed by a background thread (UNLINK): used
// memory falls well below maxmemory, which stays set.
func (s *oomServer) free(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := s.c.Unlink(ctx, "junk").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := s.c.Set(ctx, "probe", "1", 0).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET after the junk was deleted: %v", err)
		}
	}
}

// oomCount is a middleware that counts the attempts that got the OOM reply.
type oomCount struct {
	mu       sync.Mutex
	attempts int
	ooms     int
}

func (o *oomCount) middleware() latchkit.Middleware {
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			prev := req.OnAttempt
			req.OnAttempt = func(n int, err error) {
				o.mu.Lock()
				o.attempts++
				if err != nil && strings.Contains(err.Error(), "OOM command not allowed") {
					o.ooms++
				}
				o.mu.Unlock()
				if prev != nil {
					prev(n, err)
				}
			}
			return next(ctx, req)
		}
	}
}

func (o *oomCount) get() (attempts, ooms int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.attempts, o.ooms
}

// oomRow is one primitive of TestOOMWaitersRideItOut: hold takes it (the
// holder, before the server runs out of memory), wait waits for it (the
// waiter), try makes one attempt; each returns what releases its grant.
type oomRow struct {
	kind string
	// readOnly: the waiter's attempts never meet the OOM reply (they read,
	// or their first write is one the server lets through out of memory).
	readOnly bool
	// mk makes the primitive's calls on cl with opts: the holder's, the
	// waiter's and the single attempt's.
	mk func(t *testing.T, cl *primitives.Client, opts []primitives.Option) (hold, wait, try func(context.Context) (func(context.Context) error, error))
}

func leaseCall(f func(context.Context) (latchkit.Lease, error)) func(context.Context) (func(context.Context) error, error) {
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := f(ctx)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

// must returns a function that returns v, failing t on err:
// must[T](t)(NewT(...)).
func must[V any](t *testing.T) func(v V, err error) V {
	return func(v V, err error) V {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func mutexCalls(m primitives.Mutex) (hold, wait, try func(context.Context) (func(context.Context) error, error)) {
	return leaseCall(m.Lock), leaseCall(m.Lock), leaseCall(m.TryLock)
}

func semCalls(s primitives.Semaphore) (hold, wait, try func(context.Context) (func(context.Context) error, error)) {
	return leaseCall(s.Acquire), leaseCall(s.Acquire), leaseCall(s.TryAcquire)
}

var oomRows = []oomRow{
	{"Mutex", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		return mutexCalls(must[primitives.Mutex](t)(primitives.NewMutex(cl, "x", o...)))
	}},
	{"ReentrantMutex", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		return mutexCalls(must[primitives.Mutex](t)(primitives.NewReentrantMutex(cl, "x", o...)))
	}},
	{"FairMutex", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		return mutexCalls(must[primitives.Mutex](t)(primitives.NewFairMutex(cl, "x", o...)))
	}},
	{"MultiLock", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		return mutexCalls(must[primitives.Mutex](t)(primitives.NewMultiLock(cl, []string{"x", "y"}, o...)))
	}},
	{"Semaphore", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		return semCalls(must[primitives.Semaphore](t)(primitives.NewSemaphore(cl, "x", 1, o...)))
	}},
	{"FairSemaphore", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		return semCalls(must[primitives.Semaphore](t)(primitives.NewFairSemaphore(cl, "x", 1, o...)))
	}},
	{"RWLock write", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		rw, err := primitives.NewRWLock(cl, "x", o...)
		if err != nil {
			t.Fatal(err)
		}
		return leaseCall(rw.Lock), leaseCall(rw.Lock), leaseCall(rw.TryLock)
	}},
	{"RWLock read", true, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		rw, err := primitives.NewRWLock(cl, "x", o...)
		if err != nil {
			t.Fatal(err)
		}
		// The single attempt is a writer's: a reader's would share the
		// waiter's read lease.
		return leaseCall(rw.Lock), leaseCall(rw.RLock), leaseCall(rw.TryLock)
	}},
	{"Election", false, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		e, err := primitives.NewElection(cl, "x", o...)
		if err != nil {
			t.Fatal(err)
		}
		campaign := func(f func(context.Context, string) (latchkit.Lease, error), v string) func(context.Context) (func(context.Context) error, error) {
			return leaseCall(func(ctx context.Context) (latchkit.Lease, error) { return f(ctx, v) })
		}
		return campaign(e.Campaign, "holder"), campaign(e.Campaign, "waiter"), campaign(e.TryCampaign, "try")
	}},
	{"Latch", true, func(t *testing.T, cl *primitives.Client, o []primitives.Option) (h, w, y func(context.Context) (func(context.Context) error, error)) {
		// The holder sets the count (its release counts down), the waiter
		// waits for zero; a Latch has no single attempt that writes but
		// TrySetCount.
		l, err := primitives.NewLatch(cl, "x", clienttest.Fitting[primitives.LatchOption](o)...)
		if err != nil {
			t.Fatal(err)
		}
		h = func(ctx context.Context) (func(context.Context) error, error) {
			if ok, err := l.TrySetCount(ctx, 1); !ok || err != nil {
				return nil, errors.Join(err, errors.New("latch already set"))
			}
			return l.CountDown, nil
		}
		w = func(ctx context.Context) (func(context.Context) error, error) {
			return func(context.Context) error { return nil }, l.Wait(ctx)
		}
		y = func(ctx context.Context) (func(context.Context) error, error) {
			ok, err := l.TrySetCount(ctx, 1)
			if err == nil && !ok {
				err = latchkit.ErrNotAcquired // set already
			}
			return nil, err
		}
		return h, w, y
	}},
}

// Issue 38, finding 9: under maxmemory with noeviction, a waiting
// acquisition rides out the OOM reply as it rides out an unreachable
// Redis. For every primitive: a holder holds; a waiter (another Client)
// waits; the server runs out of memory; a single attempt gets a clear
// error (the primitive held, or Redis unavailable saying OOM); the holder
// releases, which works out of memory (a latch's CountDown, whose first
// write is refused out of memory, waits for memory like a waiter); the
// waiter goes on waiting, its attempts getting the OOM reply; the junk is
// deleted and the waiter is granted, and nobody else is meanwhile.
//
// Redis 7.0 refuses a script's command flagged deny-oom (SET, ZADD, HSET,
// INCR) with the OOM reply only while the script has run no write command
// (scriptVerifyOOM in script.c; checked here by TestOOMRefusesFirstWriteOnly),
// so an OOM reply means the script wrote nothing: trying again is safe.
func TestOOMWaitersRideItOut(t *testing.T) {
	lane.ParallelFast(t)
	s := startOOMServer(t)
	for _, row := range oomRows {
		t.Run(row.kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Cleanup(func() { _ = s.c.Del(context.Background(), "junk").Err() })
			counted := &oomCount{}
			// A short waiter timeout makes waiting attempts come back
			// every 100ms (their heartbeat), so that they run while the
			// server is out of memory.
			base := []primitives.Option{primitives.WithPrefix("oom:" + strings.ReplaceAll(row.kind, " ", "-") + ":"),
				primitives.WithWaiterTimeout(300 * time.Millisecond)}
			hold, _, _ := row.mk(t, clienttest.For(t, s.backend(t)), base)
			_, wait, _ := row.mk(t, clienttest.For(t, s.backend(t)), append(base, primitives.WithMiddleware(counted.middleware())))
			_, _, try := row.mk(t, clienttest.For(t, s.backend(t)), base)

			s.junk(t, ctx)
			release, err := hold(primitives.WithOwner(ctx, "holder"))
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			type result struct {
				release func(context.Context) error
				err     error
				at      time.Time
			}
			waited := make(chan result, 1)
			go func() {
				r, err := wait(primitives.WithOwner(ctx, "waiter"))
				waited <- result{r, err, time.Now()}
			}()
			// The waiter has found the primitive held (a latch's Wait
			// reads only: give it a moment).
			for deadline := time.Now().Add(5 * time.Second); ; {
				if n, _ := counted.get(); n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the waiter made no attempt in 5s")
				}
				time.Sleep(time.Millisecond)
			}

			s.fill(t, ctx)
			time.Sleep(300 * time.Millisecond) // waiting attempts meet the OOM reply
			tctx, tcancel := context.WithTimeout(primitives.WithOwner(ctx, "try"), 200*time.Millisecond)
			rel, err := try(tctx)
			tcancel()
			switch {
			case err == nil:
				if rel != nil {
					_ = rel(ctx)
				}
				t.Errorf("single attempt out of memory, the primitive held: granted")
			case errors.Is(err, latchkit.ErrNotAcquired):
			case errors.Is(err, latchkit.ErrUnavailable) && strings.Contains(err.Error(), "OOM"):
			case row.kind == "Latch" && errors.Is(err, context.DeadlineExceeded) && errors.Is(err, latchkit.ErrUnavailable):
				// TrySetCount retries while Redis cannot serve it.
			default:
				t.Errorf("single attempt out of memory: %v; want ErrNotAcquired, or ErrUnavailable saying OOM", err)
			}

			// The holder releases out of memory.
			released := make(chan error, 1)
			go func() { released <- release(ctx) }()
			if row.kind != "Latch" {
				if err := <-released; err != nil {
					t.Errorf("release out of memory: %v", err)
				}
			}
			time.Sleep(500 * time.Millisecond) // the waiter's attempts meet the OOM reply again
			select {
			case r := <-waited:
				if r.err != nil {
					t.Fatalf("the waiter ended out of memory: %v", r.err)
				}
				// Granted meanwhile (a hand-over's message grants a waiting
				// Mutex without a write): fine, as long as it holds.
				waited <- r
			default:
			}
			freed := time.Now()
			s.free(t, ctx)
			if row.kind == "Latch" {
				select {
				case err := <-released:
					if err != nil {
						t.Fatalf("CountDown: %v", err)
					}
				case <-ctx.Done():
					t.Fatal("CountDown did not return once memory was freed")
				}
			}
			var r result
			select {
			case r = <-waited:
			case <-ctx.Done():
				t.Fatal("the waiter was not granted in 30s")
			}
			if r.err != nil {
				t.Fatalf("the waiter: %v", r.err)
			}
			attempts, ooms := counted.get()
			t.Logf("waiter: %d attempts, %d got the OOM reply; granted %v after memory was freed", attempts, ooms, r.at.Sub(freed).Round(time.Millisecond))
			if row.kind != "Latch" {
				// Nobody else is granted while the waiter holds.
				tctx, tcancel := context.WithTimeout(primitives.WithOwner(ctx, "third"), 2*time.Second)
				if rel, err := try(tctx); !errors.Is(err, latchkit.ErrNotAcquired) {
					if rel != nil {
						_ = rel(ctx)
					}
					t.Errorf("single attempt while the waiter holds: %v, want ErrNotAcquired", err)
				}
				tcancel()
			}
			if ooms == 0 && !row.readOnly {
				t.Errorf("no waiting attempt met the OOM reply: the test did not exercise it")
			}
			if err := r.release(ctx); err != nil {
				t.Errorf("waiter's release: %v", err)
			}
		})
	}
}

// TestOOMRefusesFirstWriteOnly checks on redis-server what the
// classification of the OOM reply rests on (issue 38, finding 9): out of
// memory, a script's command flagged deny-oom is refused only while the
// script has run no write command (Redis 7.0, scriptVerifyOOM in
// script.c: "only if this is the first write in the context of this
// script"), so a script that got the OOM reply wrote nothing, a write it
// ran under redis.pcall that was refused included; once it has run a write
// (even a DEL of no key) its later writes are let through.
func TestOOMRefusesFirstWriteOnly(t *testing.T) {
	s := startOOMServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.junk(t, ctx)
	s.fill(t, ctx)
	defer s.free(t, ctx)
	for _, c := range []struct {
		src  string
		keys []string
		oom  bool
	}{
		{"redis.call('GET', KEYS[1]); return redis.call('SET', KEYS[1], '1')", []string{"a"}, true},
		{"redis.call('SET', KEYS[1], '1'); return redis.call('SET', KEYS[2], '1')", []string{"a", "b"}, true},
		{"redis.pcall('SET', KEYS[1], '1'); return redis.call('ZADD', KEYS[2], 1, 'm')", []string{"a", "b"}, true},
		{"redis.call('DEL', KEYS[1]); return redis.call('SET', KEYS[2], '1')", []string{"none", "c"}, false},
	} {
		err := s.c.Eval(ctx, c.src, c.keys).Err()
		if got := err != nil && strings.HasPrefix(err.Error(), "OOM"); got != c.oom {
			t.Errorf("%s: %v, want the OOM reply: %v", c.src, err, c.oom)
		}
		n, err := s.c.Exists(ctx, "a", "b").Result()
		if err != nil || n != 0 {
			t.Fatalf("%s: EXISTS a b = %d, %v: a refused script wrote", c.src, n, err)
		}
	}
	if n, err := s.c.Exists(ctx, "c").Result(); err != nil || n != 1 {
		t.Errorf("a script's SET after its DEL: EXISTS = %d, %v, want 1", n, err)
	}
}

// Issue 38, finding 9: a lease is renewed while the server is out of
// memory (a renewal rewrites what the lease holds, and grows no memory),
// so an OOM that lasts longer than the TTL loses no lease; a waiter
// handed a permit out of memory holds on it (see TestOOMWaitersRideItOut).
func TestOOMLeasesRenewed(t *testing.T) {
	// Not beside the parallel tests: its leases (TTL 150 ms) must be
	// renewed on time (a renewal ran late under the race detector there).
	s := startOOMServer(t)
	const ttl = 150 * time.Millisecond
	rows := []struct {
		kind string
		lock func(context.Context, *primitives.Client, ...primitives.Option) (latchkit.Lease, error)
	}{
		{"Mutex", func(ctx context.Context, cl *primitives.Client, o ...primitives.Option) (latchkit.Lease, error) {
			return must[primitives.Mutex](t)(primitives.NewMutex(cl, "x", o...)).Lock(ctx)
		}},
		{"Semaphore", func(ctx context.Context, cl *primitives.Client, o ...primitives.Option) (latchkit.Lease, error) {
			return must[primitives.Semaphore](t)(primitives.NewSemaphore(cl, "x", 2, o...)).Acquire(ctx)
		}},
		{"FairSemaphore", func(ctx context.Context, cl *primitives.Client, o ...primitives.Option) (latchkit.Lease, error) {
			return must[primitives.Semaphore](t)(primitives.NewFairSemaphore(cl, "x", 2, o...)).Acquire(ctx)
		}},
		{"RWLock read", func(ctx context.Context, cl *primitives.Client, o ...primitives.Option) (latchkit.Lease, error) {
			return must[primitives.RWLock](t)(primitives.NewRWLock(cl, "x", o...)).RLock(ctx)
		}},
		{"RWLock write", func(ctx context.Context, cl *primitives.Client, o ...primitives.Option) (latchkit.Lease, error) {
			return must[primitives.RWLock](t)(primitives.NewRWLock(cl, "x", o...)).Lock(ctx)
		}},
		{"MultiLock", func(ctx context.Context, cl *primitives.Client, o ...primitives.Option) (latchkit.Lease, error) {
			return must[primitives.Mutex](t)(primitives.NewMultiLock(cl, []string{"x", "y"}, o...)).Lock(ctx)
		}},
		{"Election", func(ctx context.Context, cl *primitives.Client, o ...primitives.Option) (latchkit.Lease, error) {
			return must[primitives.Election](t)(primitives.NewElection(cl, "x", o...)).Campaign(ctx, "v")
		}},
	}
	for _, row := range rows {
		t.Run(row.kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Cleanup(func() { _ = s.c.Del(context.Background(), "junk").Err() })
			prefix := primitives.WithPrefix("oomrenew:" + strings.ReplaceAll(row.kind, " ", "-") + ":")
			s.junk(t, ctx)
			l, err := row.lock(ctx, clienttest.For(t, s.backend(t)), prefix, primitives.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			s.fill(t, ctx)
			time.Sleep(4 * ttl)
			if err := l.Context().Err(); err != nil {
				t.Errorf("lease out of memory for 4 TTLs: %v (%v)", err, context.Cause(l.Context()))
			}
			s.free(t, ctx)
			if err := l.Release(ctx); err != nil {
				t.Errorf("release: %v", err)
			}
		})
	}
}
