package contracttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// testFairHeadNotOvertaken: with 3 of 4 permits held, a waiter for 4 at the
// head of the queue is not overtaken by a waiter for 1 behind it, although
// one permit is free, nor by a TryAcquire: it is granted first once the 3
// are released, and the one behind it only once it has released.
func testFairHeadNotOvertaken(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	mk := func() primitives.Semaphore {
		return semKinds[1].make(t, h.NewClient(t).Backend, "h", 4)
	}
	ob := h.NewClient(t).Backend
	holder, big, small := mk(), mk(), mk()
	l3, err := holder.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who string
		l   latchkit.Lease
		err error
	}
	got := make(chan result, 2)
	go func() { l, err := big.AcquireN(ctx, 4); got <- result{"big", l, err} }()
	eventually(t, 5*time.Second, "the waiter for 4 is queued", func() bool { return queueLen(t, ob, prefix(t), "h") == 2 })
	go func() { l, err := small.Acquire(ctx); got <- result{"small", l, err} }()
	eventually(t, 5*time.Second, "the waiter for 1 is queued", func() bool { return queueLen(t, ob, prefix(t), "h") == 3 })
	if l, err := holder.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("TryAcquire overtook the waiter for 4 at the head: %v", err)
		l.Release(ctx)
	}
	select {
	case r := <-got:
		t.Fatalf("%s granted while 3 of 4 permits are held and the waiter for 4 is at the head: %v", r.who, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.who != "big" {
		t.Fatalf("first granted after the release: %s (%v), want the waiter for 4", r.who, r.err)
	}
	select {
	case r2 := <-got:
		t.Fatalf("%s granted while the waiter for 4 holds all 4: %v", r2.who, r2.err)
	case <-time.After(300 * time.Millisecond):
	}
	r.l.Release(ctx)
	r2 := <-got
	if r2.err != nil {
		t.Fatalf("the waiter for 1 after the waiter for 4 released: %v", r2.err)
	}
	if r2.l.Fence() <= r.l.Fence() {
		t.Errorf("fences %d then %d", r.l.Fence(), r2.l.Fence())
	}
	r2.l.Release(ctx)
}

// testFairHeavyWaiter: a waiter for 4 permits at the head when SetLimit
// lowers the limit to 3 can never be granted: it fails with ErrInvalid
// (woken by SetLimit, not at its next heartbeat), and the waiter behind it
// is granted without waiting for it to leave.
func testFairHeavyWaiter(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	slow := []primitives.Option{primitives.WithRetry(retry.Constant(30 * time.Second)), primitives.WithWaiterTimeout(time.Minute)}
	mk := func() primitives.Semaphore { return semKinds[1].make(t, h.NewClient(t).Backend, "v", 4, slow...) }
	ob := h.NewClient(t).Backend
	holder, big, small := mk(), mk(), mk()
	l2, err := holder.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	bigErr, smallErr := make(chan error, 1), make(chan error, 1)
	go func() { _, err := big.AcquireN(ctx, 4); bigErr <- err }()
	eventually(t, 5*time.Second, "the waiter for 4 is queued", func() bool { return queueLen(t, ob, prefix(t), "v") == 2 })
	go func() {
		l, err := small.AcquireN(ctx, 1)
		if err == nil {
			defer l.Release(ctx)
		}
		smallErr <- err
	}()
	eventually(t, 5*time.Second, "the waiter for 1 is queued", func() bool { return queueLen(t, ob, prefix(t), "v") == 3 })
	if err := holder.SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		what string
		c    chan error
		want error
	}{{"the waiter for 1", smallErr, nil}, {"the waiter for 4", bigErr, latchkit.ErrInvalid}} {
		select {
		case err := <-w.c:
			if (w.want == nil && err != nil) || (w.want != nil && !errors.Is(err, w.want)) {
				t.Errorf("%s after the limit was lowered to 3: %v, want %v", w.what, err, w.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no outcome 10 s after SetLimit (its retry policy sleeps 30 s)", w.what)
		}
	}
	eventually(t, 5*time.Second, "the waiter for 4 leaves the queue", func() bool { return queueLen(t, ob, prefix(t), "v") <= 1 })
}

// testFairMutexIgnoresLimit: a FairMutex is one permit, whatever limit a
// FairSemaphore of the same name stored.
func testFairMutexIgnoresLimit(t *testing.T, h Harness) {
	ctx := ctxT(t, 20*time.Second)
	b := h.NewClient(t).Backend
	s := semKinds[1].make(t, b, "m", 1)
	if err := s.SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	m, err := primitives.NewFairMutex(clienttest.For(t, b), "m", primitives.WithPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l2, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Errorf("a second FairMutex holder after a FairSemaphore stored the limit 3: %v", err)
		l2.Release(ctx)
	}
}

// testWeightedWaiterStallsNobody: on a Semaphore of 2 permits, both held,
// a waiter for 2 and then a waiter for 1 wait in one process. A release of
// one permit cannot serve the first; it must still wake the second, which
// fits, rather than only the oldest waiter: the holders' TTL (the wait
// hint) is 30 s and the waiters' retry policy sleeps 30 s.
func testWeightedWaiterStallsNobody(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	slow := []primitives.Option{primitives.WithRetry(retry.Constant(30 * time.Second)),
		primitives.WithWaiterTimeout(time.Minute), primitives.WithTTL(30 * time.Second)}
	b := h.NewClient(t).Backend
	s := semKinds[0].make(t, b, "st", 2, slow...)
	h1, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release(ctx)
	bigCtx, cancelBig := context.WithCancel(ctx)
	defer cancelBig()
	go func() {
		if l, err := s.AcquireN(bigCtx, 2); err == nil {
			l.Release(ctx)
		}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter for 2 is the oldest, asleep
	got := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx)
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the waiter for 1 was granted %v after the release", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter for 1 was not granted within 10 s of a release that freed the permit it needs (woken: only the waiter for 2 ahead of it?)")
	}
}
