package contracttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/primitives"
)

// RunMutex checks primitives.NewMutex on the backend.
func RunMutex(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"MutualExclusionAndFences", testMutexExclusion},
		{"TryLock", testTryLock},
		{"LostLeaseCannotTouchNextHolder", testLostLease},
		{"LockHonoursDeadline", testLockDeadline},
		{"AutoExtend", testAutoExtend},
		{"WakeOnRelease", testWakeOnRelease},
		{"CommandsPerAcquisition", testCommandsPerAcquisition},
		{"WaitersSurviveDroppedSubscription", testDroppedSubscriptionWaiters},
		{"BadInput", testMutexBadInput},
		{"TTLAtOrBelowDrift", testTTLAtOrBelowDrift},
		{"OddNames", testOddNames},
	})
}

// testMutexExclusion: 32 goroutines x 200 increments of a counter kept in
// Redis by a plain GET then SET (deliberately non-atomic) under the mutex.
// A single overlap of two holders loses an update; fences are recorded in
// grant order and must strictly increase.
func testMutexExclusion(t *testing.T, h Harness) {
	// 1,600 grants in the fast lane, 6,400 in the long: every release
	// remembers its token for a minute, and miniredis's sorted sets slow
	// down with thousands of them on one name.
	goroutines, rounds := 32, lane.Pick(50, 200)
	p := prefix(t)
	counter := p + "counter"
	clients := make([]backend.Backend, 4)
	for i := range clients {
		clients[i] = h.NewClient(t).Backend
	}
	ctx := ctxT(t, 3*time.Minute)
	var (
		mu     sync.Mutex // guards fences; taken only inside the lock
		fences []int64
		inside atomic.Int32
		wg     sync.WaitGroup
	)
	for g := 0; g < goroutines; g++ {
		b := clients[g%len(clients)]
		m, err := primitives.NewMutex(clienttest.For(t, b), "counter", primitives.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				fences = append(fences, l.Fence())
				mu.Unlock()
				if err := incr(ctx, b, counter, 0); err != nil {
					t.Error(err)
					return
				}
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := do(t, clients[0], "GET", counter); got != fmt.Sprint(goroutines*rounds) {
		t.Errorf("counter = %v, want %d: an update was lost, two holders overlapped", got, goroutines*rounds)
	}
	if len(fences) != goroutines*rounds {
		t.Fatalf("%d fences recorded", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence went from %d to %d at grant %d", fences[i-1], fences[i], i)
		}
	}
}

func testTryLock(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	m, err := primitives.NewMutex(clienttest.For(t, b), "t", primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if len(l.Token()) != 32 || l.Name() != "t" || l.Fence() < 1 {
		t.Errorf("lease: token %d chars, name %q, fence %d", len(l.Token()), l.Name(), l.Fence())
	}
	if got := do(t, b, "GET", keyOf(p, "t")); got != lockValue(l) {
		t.Errorf("key holds %v, want the token and the fence", got)
	}
	start := time.Now()
	_, err = m.TryLock(ctx)
	if !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("second TryLock: %v, want ErrNotAcquired", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryLock waited %v", d)
	}
	d, err := l.TTL(ctx)
	if err != nil || d <= 0 || d > defaultTTL {
		t.Errorf("TTL = %v, %v", d, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.TTL(ctx); d <= defaultTTL {
		t.Errorf("TTL after Extend(1m) = %v", d)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
	default:
		t.Error("Context not done after Release")
	}
	// A second Release returns what the first did (the lease was released,
	// not lost), and TTL and Extend say it was released.
	if err := l.Release(ctx); err != nil {
		t.Errorf("second Release: %v, want nil", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("TTL after Release: %v, want ErrLeaseLost", err)
	}
	if !lockFree(t, b, keyOf(p, "t")) {
		t.Errorf("the lock is held after Release")
	}
}

// testLostLease: a lease whose key expired, or was deleted behind its back,
// cannot release or extend the next holder's lock.
func testLostLease(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	key := keyOf(p, "l")
	m, err := primitives.NewMutex(clienttest.For(t, b), "l", primitives.WithPrefix(p), primitives.WithTTL(200*time.Millisecond), primitives.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	next, err := primitives.NewMutex(clienttest.For(t, b), "l", primitives.WithPrefix(p), primitives.WithTTL(time.Minute), primitives.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"expired", "deleted"} {
		a, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if how == "expired" {
			advance(t, h, 300*time.Millisecond)
		} else {
			do(t, b, "DEL", key)
			// Time passes between two grants (the README's clock
			// assumption): a fence is the server's clock in µs, and a
			// miniredis clock stands still until moved.
			advance(t, h, time.Millisecond)
		}
		bl, err := next.TryLock(ctx)
		if err != nil {
			t.Fatalf("%s: next holder: %v", how, err)
		}
		if bl.Fence() <= a.Fence() {
			t.Errorf("%s: next fence %d not above %d", how, bl.Fence(), a.Fence())
		}
		if err := a.Extend(ctx, time.Hour); !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("%s: old Extend: %v, want ErrLeaseLost", how, err)
		}
		if _, err := a.TTL(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("%s: old TTL: %v, want ErrLeaseLost", how, err)
		}
		if err := a.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("%s: old Release: %v, want ErrLeaseLost", how, err)
		}
		select {
		case <-a.Context().Done():
		default:
			t.Errorf("%s: old lease's Context not done", how)
		}
		if got := do(t, b, "GET", key); got != lockValue(bl) {
			t.Errorf("%s: the next holder's key was touched: holds %v", how, got)
		}
		if d := do(t, b, "PTTL", key).(int64); d < 50_000 || d > 60_000 {
			t.Errorf("%s: the next holder's TTL was changed to %dms", how, d)
		}
		if err := bl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func testLockDeadline(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	m, err := primitives.NewMutex(clienttest.For(t, b), "d", primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	held, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for _, d := range []time.Duration{10 * time.Millisecond, 200 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		_, err = m.Lock(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("deadline %v: %v, want DeadlineExceeded", d, err)
		}
		if took > d+150*time.Millisecond {
			t.Errorf("deadline %v: Lock returned after %v", d, took)
		}
	}
}

// testAutoExtend: a 600ms lease stays alive for 3s; deleting its key ends
// its Context within TTL/3 plus a margin. (With 300ms, renewals 100ms
// apart fell behind now and then on a machine loaded 2.5x its cores: the
// renewer's goroutine, or the server, was not scheduled for 200ms.)
func testAutoExtend(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	const ttl = 600 * time.Millisecond
	m, err := primitives.NewMutex(clienttest.For(t, b), "a", primitives.WithPrefix(p), primitives.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// 2.5 TTLs (7 renewals) in the fast lane, 5 in the long.
	for end := time.Now().Add(lane.Pick(1500*time.Millisecond, 3*time.Second)); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		if other, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
			// Renewals can fall behind on a starved machine; the holder
			// must have been told first, though.
			if lerr := l.Context().Err(); err == nil && lerr == nil {
				t.Fatalf("another client was granted the lock while the holder's Context was live: two holders")
			}
			if other != nil {
				other.Release(ctx)
			}
			t.Fatalf("lease lapsed (renewals fell behind; the holder was told: %v): TryLock by another: %v", context.Cause(l.Context()), err)
		}
		select {
		case <-l.Context().Done():
			t.Fatalf("Context ended while renewals succeed: %v", context.Cause(l.Context()))
		default:
		}
	}
	do(t, b, "DEL", keyOf(p, "a"))
	deleted := time.Now()
	select {
	case <-l.Context().Done():
		took := time.Since(deleted)
		t.Logf("Context done %v after the key was deleted", took)
		if !errors.Is(context.Cause(l.Context()), latchkit.ErrLeaseLost) {
			t.Errorf("cause %v, want ErrLeaseLost", context.Cause(l.Context()))
		}
	case <-time.After(ttl/3 + 200*time.Millisecond):
		t.Fatal("Context not done within TTL/3 after the key was deleted")
	}
	if err := l.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Release of a lost lease: %v", err)
	}
}

// defaultTTL is the lease time of a primitive made without WithTTL.
const defaultTTL = 10 * time.Second
