package contracttest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// testHandOverWithdraw: a waiter whose context ends leaves the queue, and
// the release goes to the waiter behind it at once.
func testHandOverWithdraw(t *testing.T, h Harness) {
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	inspect := h.NewClient(t).Backend
	opts := []primitives.Option{primitives.WithPrefix(p), primitives.WithWaiterTimeout(time.Minute)}
	holder, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "g", opts...)
	quitter, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "g", opts...)
	next, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "g", opts...)
	l, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithCancel(ctx)
	quit := make(chan error, 1)
	go func() { _, err := quitter.Lock(qctx); quit <- err }()
	eventually(t, 10*time.Second, "the quitter queued", func() bool { return queued(t, inspect, p, "g") == 1 })
	got := lockAsync(ctx, next)
	eventually(t, 10*time.Second, "the next waiter queued", func() bool { return queued(t, inspect, p, "g") == 2 })
	cancel()
	if err := <-quit; !errors.Is(err, context.Canceled) {
		t.Fatalf("the quitter's Lock: %v", err)
	}
	// The give-back a caller waits for is bounded (GiveBackTimeout); on a
	// slow server the rest goes on in the background, and the place is
	// gone soon after the call returned.
	eventually(t, 5*time.Second, "the quitter's place left the queue", func() bool { return queued(t, inspect, p, "g") == 1 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitGrant(t, ctx, got, "the waiter behind the one that gave up was not handed the lock")
}

// lockResult is what a waiting Lock run by lockAsync returned.
type lockResult struct {
	l   latchkit.Lease
	err error
}

// lockAsync runs m.Lock(ctx) in a goroutine and sends what it returned:
// the goroutine never touches the test, which may have ended first.
func lockAsync(ctx context.Context, m primitives.Mutex) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := m.Lock(ctx)
		got <- lockResult{l, err}
	}()
	return got
}

// awaitGrant waits for the lease a waiting Lock sends on got and releases
// it.
func awaitGrant(t *testing.T, ctx context.Context, got <-chan lockResult, failure string) {
	t.Helper()
	select {
	case g := <-got:
		if g.err != nil {
			t.Fatalf("%s: the waiter's Lock: %v", failure, g.err)
		}
		g.l.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal(failure)
	}
}

// testHandOverDeadWaiters: queue entries of waiters that stopped
// heartbeating (a crashed process) are skipped by a release: the live
// waiter behind them gets the lock, and the dead entries are gone.
func testHandOverDeadWaiters(t *testing.T, h Harness) {
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	b := h.NewClient(t).Backend
	opts := []primitives.Option{primitives.WithPrefix(p), primitives.WithWaiterTimeout(time.Minute)}
	holder, _ := primitives.NewMutex(clienttest.For(t, b), "d", opts...)
	l, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Two entries of crashed waiters, ahead of everyone, whose liveness
	// ran out long ago (expiry 1 ms after the epoch).
	q := keyOf(p, "d")
	for i, tok := range []string{"dead-1", "dead-2"} {
		do(t, b, "ZADD", q+":q", strconv.Itoa(i), tok)
		do(t, b, "ZADD", q+":qlive", "1", tok)
	}
	waiter, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "d", opts...)
	got := lockAsync(ctx, waiter)
	eventually(t, 10*time.Second, "the live waiter queued", func() bool { return queued(t, b, p, "d") == 3 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitGrant(t, ctx, got, "the live waiter behind dead entries was not handed the lock")
	if n := queued(t, b, p, "d"); n != 0 {
		t.Fatalf("%d entries left in the queue", n)
	}
}

// testHandOverUnconfirmed: a release hands the lock to a waiter that is
// alive by its heartbeat but never confirms (it crashed right after its
// last attempt). The lock frees itself after the waiter timeout, not the
// TTL, and goes to the next Lock.
func testHandOverUnconfirmed(t *testing.T, h Harness) {
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	b := h.NewClient(t).Backend
	const waitTimeout = 300 * time.Millisecond
	opts := []primitives.Option{primitives.WithPrefix(p), primitives.WithWaiterTimeout(waitTimeout), primitives.WithTTL(time.Minute)}
	holder, _ := primitives.NewMutex(clienttest.For(t, b), "u", opts...)
	l, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := keyOf(p, "u")
	do(t, b, "ZADD", q+":q", "0", "ghost")
	do(t, b, "ZADD", q+":qlive", "99999999999999", "ghost")
	// A waiter that queues marks the lock (flag q), so that its release
	// looks at the queue.
	v, _ := do(t, b, "GET", q).(string)
	do(t, b, "SET", q, v+" q", "KEEPTTL")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := do(t, b, "GET", q).(string); !strings.HasPrefix(v, "ghost ") {
		t.Fatalf("lock holds %v after the release, want it handed to the queued ghost", v)
	}
	pttl, _ := do(t, b, "PTTL", q).(int64)
	if pttl <= 0 || time.Duration(pttl)*time.Millisecond > waitTimeout {
		t.Fatalf("a handed-over lock lives %d ms before its holder confirms, want at most the waiter timeout %v", pttl, waitTimeout)
	}
	advance(t, h, waitTimeout+50*time.Millisecond)
	m, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "u", opts...)
	nl, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("after the waiter timeout: %v", err)
	}
	nl.Release(ctx)
}
