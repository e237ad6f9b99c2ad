package kit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	engine "github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// countingHook counts what a go-redis client sends: round trips (one per
// pipeline or single command) and the renewal calls among the commands
// (EVALSHA or EVAL of the test lock's extend).
type countingHook struct {
	trips, renewals atomic.Int64
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *countingHook) count(cmd redis.Cmder) {
	a := cmd.Args()
	if len(a) > 1 && (a[1] == lockExtend.Hash() || a[1] == lockExtend.Source()) {
		h.renewals.Add(1)
	}
}

// holdMany takes n test-lock leases named prefix+i on c with ttl,
// auto-extended.
func holdMany(tb testing.TB, c *redis.Client, prefix string, n int, d time.Duration) []latchkit.Lease {
	tb.Helper()
	cl := newClient(tb, goredis.New(c))
	leases := make([]latchkit.Lease, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	const workers = 64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				l, err := newTestLock(tb, cl, fmt.Sprint(i), ttl(d), prefixOf(prefix)).TryLock(context.Background())
				if err != nil {
					failed.Store(err)
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
	return leases
}

func releaseAll(tb testing.TB, leases []latchkit.Lease) {
	tb.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	const workers = 64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(leases); i += workers {
				if leases[i] == nil {
					continue
				}
				if err := leases[i].Release(context.Background()); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
}

// noRenewer waits until no renewer goroutine runs.
func noRenewer(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "(*renewer).run") {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("renewer still running after every lease was released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRenew10kLeases: 10,000 leases with a 3s TTL held for 4s all stay
// held (every key's PTTL stays positive, no Context ends), their renewals
// arrive in a few pipelines rather than a round trip each, and releasing
// them all stops the renewer.
func TestRenew10kLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 10,000 leases for 4s")
	}
	srv := redistest.Start(t)
	var hook countingHook
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	c.AddHook(&hook)
	t.Cleanup(func() { c.Close() })
	check := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { check.Close() })

	const n, d = 10_000, 3 * time.Second
	leases := holdMany(t, c, "r10k:", n, d)
	ctxs := make([]context.Context, n)
	for i, l := range leases {
		ctxs[i] = l.Context()
	}
	trips0, renewals0 := hook.trips.Load(), hook.renewals.Load()
	start := time.Now()
	for time.Since(start) < 4*time.Second {
		time.Sleep(500 * time.Millisecond)
		pipe := check.Pipeline()
		cmds := make([]*redis.DurationCmd, n)
		for i := range n {
			cmds[i] = pipe.PTTL(context.Background(), lockKey("r10k:", fmt.Sprint(i)))
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			if d := cmd.Val(); d <= 0 {
				t.Fatalf("after %v: lease %d: PTTL %v", time.Since(start).Round(time.Millisecond), i, d)
			}
		}
		for i, ctx := range ctxs {
			if ctx.Err() != nil {
				t.Fatalf("lease %d: Context ended: %v", i, context.Cause(ctx))
			}
		}
	}
	held := time.Since(start)
	trips, renewals := hook.trips.Load()-trips0, hook.renewals.Load()-renewals0
	t.Logf("%d leases held %v: %d renewals in %d round trips (%.0f renewals/s)", n, held.Round(time.Millisecond), renewals, trips, float64(renewals)/held.Seconds())
	// Each lease is renewed every second (ttl/3): about 4 renewals each.
	if renewals < 3*n {
		t.Errorf("%d renewals of %d leases in %v, want at least %d", renewals, n, held, 3*n)
	}
	if trips > renewals/100 {
		t.Errorf("%d round trips for %d renewals: not batched", trips, renewals)
	}
	releaseAll(t, leases)
	for i, ctx := range ctxs {
		if !errors.Is(context.Cause(ctx), engine.ErrReleased) {
			t.Fatalf("lease %d: cause after Release %v", i, context.Cause(ctx))
		}
	}
	noRenewer(t)
}

// An Extend racing with renewals keeps the Extend's TTL: a renewal computed
// with the old TTL never lands after it. TTLs only grow here, so a stale
// renewal would show as a PTTL below the last Extend's (miniredis keeps a
// TTL fixed while its clock stands still).
func TestExtendRacingRenewalsKeepsExtendTTL(t *testing.T) {
	m, b := newMini(t)
	mu := newTestLock(t, newClient(t, b), "x", ttl(30*time.Millisecond))
	ctx := context.Background()
	l, err := mu.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	key := lockKey(engine.DefaultPrefix, "x")
	for i := 1; i <= 60; i++ {
		d := 30*time.Millisecond + time.Duration(i)*time.Millisecond
		if err := l.Extend(ctx, d); err != nil {
			if errors.Is(err, latchkit.ErrLeaseLost) && strings.Contains(err.Error(), "ttl ran out before a renewal got through") {
				// Its deadline passed by the client's clock before this
				// Extend (a stalled process): the lease ended as it must,
				// and no renewal had a chance to land after an Extend.
				t.Skipf("the lease ran out by the client's clock before Extend(%v) (a busy machine): nothing to judge", d)
			}
			t.Fatal(err)
		}
		for range 2 {
			if got := m.TTL(key); got < d {
				if l.Context().Err() != nil {
					// Its deadline passed before the next renewal (a
					// stalled process): the expired lease gave its key
					// back, which is not a stale renewal.
					t.Skipf("the %v lease ran out by the client's clock before a renewal (a busy machine): nothing to judge", d)
				}
				t.Fatalf("Extend(%v): the key's TTL is %v", d, got)
			}
			time.Sleep(time.Duration(i%7) * time.Millisecond)
		}
	}
	select {
	case <-l.Context().Done():
		t.Fatalf("lease lost: %v", context.Cause(l.Context()))
	default:
	}
}

// A lease whose key is deleted behind its back is told at its next
// renewal: its Context ends with ErrLeaseLost, well before its TTL.
func TestRenewalFindsLeaseGone(t *testing.T) {
	m, b := newMini(t)
	// A renewal every 300 ms: the one after the delete comes some 600 ms
	// before the lease's deadline, so a late renewal on a busy machine
	// still tells the loss before the deadline does.
	const d = 900 * time.Millisecond
	ctx := context.Background()
	l, err := newTestLock(t, newClient(t, b), "gone", ttl(d)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx := l.Context()
	time.Sleep(d / 2) // one renewal has happened
	m.Del(lockKey(engine.DefaultPrefix, "gone"))
	deleted := time.Now()
	select {
	case <-lctx.Done():
		cause := context.Cause(lctx)
		if !errors.Is(cause, latchkit.ErrLeaseLost) || !strings.Contains(cause.Error(), "renewal found the lease gone") {
			t.Errorf("cause %v", cause)
		}
		t.Logf("told %v after the delete", time.Since(deleted))
	case <-time.After(d/3 + 100*time.Millisecond):
		t.Fatal("Context not done at the next renewal after the key was deleted")
	}
	if err := l.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Release: %v", err)
	}
	noRenewer(t)
}

// Without a Batcher the renewer runs concurrent Evals: 50 leases on a
// backend that only has Eval stay held through about three renewals each
// (miniredis runs one command at a time, slowly under -race: the TTL leaves
// room for that).
func TestRenewWithoutBatcher(t *testing.T) {
	_, b := newMini(t)
	cl := newClient(t, evalOnly{b})
	ctx := context.Background()
	leases := make([]latchkit.Lease, 50)
	for i := range leases {
		l, err := newTestLock(t, cl, fmt.Sprint(i), ttl(600*time.Millisecond)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	time.Sleep(time.Second)
	for i, l := range leases {
		if err := l.Context().Err(); err != nil {
			t.Fatalf("lease %d lost: %v", i, context.Cause(l.Context()))
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	noRenewer(t)
}

// BenchmarkRenew10k holds 10,000 auto-extended leases (TTL 300ms, so each
// is renewed about every 100ms) on a real redis-server and reports the
// renewal calls per second the renewer made, the round trips (pipelines)
// per second they took, and the heap bytes per held lease.
func BenchmarkRenew10k(b *testing.B) {
	srv := redistest.Start(b)
	var hook countingHook
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	c.AddHook(&hook)
	b.Cleanup(func() { c.Close() })
	const n, d = 10_000, 300 * time.Millisecond
	// Warm up the client's pool and the machinery.
	releaseAll(b, holdMany(b, c, "warm:", 100, d))
	noRenewer(b)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	leases := holdMany(b, c, "b10k:", n, d)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perLease := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n

	trips0, renewals0 := hook.trips.Load(), hook.renewals.Load()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		time.Sleep(time.Second)
	}
	held := time.Since(start)
	b.StopTimer()
	trips, renewals := hook.trips.Load()-trips0, hook.renewals.Load()-renewals0
	for i, l := range leases {
		if err := l.Context().Err(); err != nil {
			b.Fatalf("lease %d lost: %v", i, context.Cause(l.Context()))
		}
	}
	releaseAll(b, leases)
	b.ReportMetric(float64(renewals)/held.Seconds(), "renewals/s")
	b.ReportMetric(float64(trips)/held.Seconds(), "roundtrips/s")
	b.ReportMetric(perLease, "B/lease")
	b.ReportMetric(0, "ns/op")
}

// TestRenewerSleepsThroughShortHolds: leases taken and released long
// before their first renewal do not wake the renewer's goroutine. It
// sleeps until the earliest renewal (or its idle linger) while 200 leases
// of a 30 s TTL come and go one after the other beside one lease held
// throughout.
func TestRenewerSleepsThroughShortHolds(t *testing.T) {
	_, b := newMini(t)
	cl := newClient(t, b)
	ctx := context.Background()
	lock := func(name string) latchkit.Lease {
		l, err := newTestLock(t, cl, name, ttl(30*time.Second)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	kept := lock("kept")
	defer kept.Release(ctx)
	core := engine.ClientOf(cl)
	time.Sleep(20 * time.Millisecond) // the goroutine starts and goes to sleep
	before := core.RenewerWakes()
	for i := range 200 {
		if err := lock(fmt.Sprint("short", i)).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	woke := core.RenewerWakes() - before
	if woke > 2 {
		t.Errorf("the renewer woke %d times while 200 leases came and went, none due for renewal", woke)
	}
}
