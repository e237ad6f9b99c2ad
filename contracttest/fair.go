package contracttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// RunFair checks primitives.NewFairSemaphore and NewFairMutex.
func RunFair(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"SemaphoreGrantsInArrivalOrder", func(t *testing.T, h Harness) { testFairOrder(t, h, 3) }},
		{"MutexGrantsInArrivalOrder", func(t *testing.T, h Harness) { testFairOrder(t, h, 1) }},
		{"NeverOverLimit", testFairLimit},
		{"AbandonedWaiterDropsOut", testFairAbandoned},
		{"WaiterTakesOverAnExpiredHolder", testFairTakeOver},
		{"TryDoesNotQueue", testFairTry},
		{"BadInput", testFairBadInput},
	})
}

// fairAcquirer is what both fair primitives offer.
type fairAcquirer func(ctx context.Context) (latchkit.Lease, error)

func newFair(t testing.TB, b backend.Backend, name string, limit int, opts ...primitives.Option) fairAcquirer {
	t.Helper()
	if limit == 1 {
		m, err := primitives.NewFairMutex(clienttest.For(t, b), name, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m.Lock
	}
	s, err := primitives.NewFairSemaphore(clienttest.For(t, b), name, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s.Acquire
}

// queueLen counts the tickets in the queue of the fair primitive name.
func queueLen(t testing.TB, b backend.Backend, p, name string) int64 {
	return do(t, b, "ZCARD", keyOf(p, name)+":fair:queue").(int64)
}

// testFairOrder: limit holders hold; 20 waiters arrive one at a time (each
// is in the queue before the next starts, over several clients); the
// holders release and every grant must follow arrival order.
func testFairOrder(t *testing.T, h Harness, limit int) {
	p := prefix(t)
	ctx := ctxT(t, time.Minute)
	clients := []backend.Backend{h.NewClient(t).Backend, h.NewClient(t).Backend, h.NewClient(t).Backend}
	first := newFair(t, clients[0], "q", limit, primitives.WithPrefix(p))
	var held []latchkit.Lease
	for i := 0; i < limit; i++ {
		l, err := first(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	const waiters = 20
	var (
		mu     sync.Mutex
		fences = map[int64]int{} // fence -> waiter, fences being the server's grant order
		wg     sync.WaitGroup
	)
	for i := 0; i < waiters; i++ {
		acquire := newFair(t, clients[i%len(clients)], "q", limit, primitives.WithPrefix(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			fences[l.Fence()] = i
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		want := int64(limit + i + 1)
		eventually(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool { return queueLen(t, clients[0], p, "q") == want })
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	// Fences strictly increase in the server's grant order.
	var order []int
	for _, f := range slices.Sorted(maps.Keys(fences)) {
		if f <= held[len(held)-1].Fence() {
			t.Fatalf("a waiter's fence %d is not above the first holders' %d", f, held[len(held)-1].Fence())
		}
		order = append(order, fences[f])
	}
	// The first limit live tickets hold: when a waiter is granted, fewer
	// than limit waiters that arrived before it may still be waiting. With
	// limit 1 that is arrival order exactly; with more, eligible waiters
	// may take their permits in any order among themselves.
	granted := map[int]bool{}
	for _, i := range order {
		waiting := 0
		for j := 0; j < i; j++ {
			if !granted[j] {
				waiting++
			}
		}
		if waiting >= limit {
			t.Fatalf("grant order %v: waiter %d granted while %d earlier arrivals still waited (limit %d)", order, i, waiting, limit)
		}
		granted[i] = true
	}
	t.Logf("grant order %v", order)
}

func testFairLimit(t *testing.T, h Harness) {
	const goroutines, rounds, limit = 24, 5, 3
	p := prefix(t)
	ctx := ctxT(t, 2*time.Minute)
	clients := []backend.Backend{h.NewClient(t).Backend, h.NewClient(t).Backend}
	var holders gauge
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		s, _ := primitives.NewFairSemaphore(clienttest.For(t, clients[g%2]), "l", limit, primitives.WithPrefix(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := s.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n := holders.enter(); n > limit {
					t.Errorf("%d holders, limit %d", n, limit)
				}
				time.Sleep(10 * time.Millisecond)
				holders.leave()
				l.Release(ctx)
			}
		}()
	}
	wg.Wait()
	if holders.peak.Load() != limit {
		t.Errorf("peak %d, want %d", holders.peak.Load(), limit)
	}
	if n := queueLen(t, clients[0], p, "l"); n != 0 {
		t.Errorf("%d tickets left in the queue", n)
	}
}

// deadWaiter enqueues a ticket as a waiter whose process died would leave
// it: a ticket and a liveness entry expiring ARGV[2] ms from now.
var deadWaiter = backend.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], n, ARGV[1])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return n`)

// testFairAbandoned: a waiter that vanished ahead of us blocks the queue
// only until its heartbeat runs out on the server's clock.
func testFairAbandoned(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	base := keyOf(p, "a") + ":fair"
	s, _ := primitives.NewFairSemaphore(clienttest.For(t, b), "a", 1, primitives.WithPrefix(p), primitives.WithWaiterTimeout(300*time.Millisecond))
	if _, err := b.Eval(ctx, deadWaiter, []string{base + ":queue", base + ":alive", base + ":tickets"}, []string{"ghost", "300"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("behind a live ticket: %v", err)
	}
	advance(t, h, 400*time.Millisecond)
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("after the ghost's timeout: %v", err)
	}
	l.Release(ctx)
	// A waiter whose Acquire gave up leaves at once.
	held, _ := s.TryAcquire(ctx)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.Acquire(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter: %v", err)
	}
	if n := queueLen(t, b, p, "a"); n != 1 {
		t.Errorf("%d tickets queued after the waiter gave up, want the holder's only", n)
	}
	held.Release(ctx)
}

func testFairTry(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 10*time.Second)
	m, _ := primitives.NewFairMutex(clienttest.For(t, b), "t", primitives.WithPrefix(p))
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("TryLock while held: %v", err)
		}
	}
	if n := queueLen(t, b, p, "t"); n != 1 {
		t.Errorf("failed TryLocks left tickets: queue %d", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("second release: %v, want nil (what the first returned)", err)
	}
}

func testFairBadInput(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 10*time.Second)
	for _, limit := range []int{0, -1} {
		if s, err := primitives.NewFairSemaphore(clienttest.For(t, b), "x", limit); !errors.Is(err, latchkit.ErrInvalid) || s != nil {
			t.Errorf("limit %d: %v", limit, err)
		}
	}
	if m, err := primitives.NewFairMutex(clienttest.For(t, b), ""); !errors.Is(err, latchkit.ErrInvalid) || m != nil {
		t.Errorf("empty name: %v", err)
	}
	key := keyOf(p, "w") + ":fair:queue"
	do(t, b, "SET", key, "precious")
	s, _ := primitives.NewFairSemaphore(clienttest.For(t, b), "w", 2, primitives.WithPrefix(p))
	if _, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("queue key is a string: %v", err)
	}
	if v := do(t, b, "GET", key); v != "precious" {
		t.Errorf("value changed to %v", v)
	}
	for _, k := range []string{":fair:alive", ":fair:tickets", ":fair:fence", ":fair:holders"} {
		if v := do(t, b, "EXISTS", keyOf(p, "w")+k); v != int64(0) {
			t.Errorf("%s written", k)
		}
	}
}

// testFairTakeOver: a holder that stops renewing (its process died) frees
// its permit silently, at its TTL: a waiter must take it over then, told
// by its wait hint (the holder's expiry), not at its next heartbeat (a
// third of its waiter timeout: 10 s here) nor its retry policy (30 s).
func testFairTakeOver(t *testing.T, h Harness) {
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			p := prefix(t)
			dead := newFair(t, h.NewClient(t).Backend, "t", limit, primitives.WithPrefix(p),
				primitives.WithTTL(400*time.Millisecond), primitives.WithAutoExtend(false))
			for i := 0; i < limit; i++ {
				if _, err := dead(ctx); err != nil { // never released
					t.Fatal(err)
				}
			}
			waiter := newFair(t, h.NewClient(t).Backend, "t", limit, primitives.WithPrefix(p),
				primitives.WithWaiterTimeout(30*time.Second), primitives.WithRetry(retry.Constant(30*time.Second)))
			start := time.Now()
			l, err := waiter(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the waiter took over %v after it began waiting for holders of a 400 ms TTL", d)
			}
		})
	}
}
