package contracttest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// resend runs the next acquire script of a Mutex twice, as go-redis does
// after a read timeout: once, then, after again() reports true, again,
// returning the second reply.
type resend struct {
	backend.Backend
	armed atomic.Bool
	first chan struct{} // closed once the first run is done
	again func() bool
}

// Cluster passes on what the wrapped backend says.
func (r *resend) Cluster() bool { return backend.IsCluster(r.Backend) }

func (r *resend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if !r.armed.CompareAndSwap(true, false) {
		return r.Backend.Eval(ctx, s, keys, args)
	}
	if _, err := r.Backend.Eval(ctx, s, keys, args); err != nil {
		return nil, err
	}
	close(r.first)
	for !r.again() {
		time.Sleep(5 * time.Millisecond)
	}
	return r.Backend.Eval(ctx, s, keys, args)
}

// testResentFirstAttempt: a waiting Lock's first attempt queues it (the
// lock is held), and a resent copy of that attempt runs after the holder's
// lock expired and wins it. The grant takes its queue entry out, so its
// release hands the lock to the waiter behind it at once, not to itself.
func testResentFirstAttempt(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, 30*time.Second)
	key := keyOf(p, "r")
	holderM, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "r", primitives.WithPrefix(p),
		primitives.WithTTL(300*time.Millisecond), primitives.WithAutoExtend(false))
	if _, err := holderM.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	check := h.NewClient(t).Backend
	r := &resend{Backend: h.NewClient(t).Backend, first: make(chan struct{}),
		again: func() bool { return lockFree(t, check, key) }}
	r.armed.Store(true)
	w1, _ := primitives.NewMutex(clienttest.For(t, r), "r", primitives.WithPrefix(p))
	w2, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "r", primitives.WithPrefix(p))
	got1 := make(chan latchkit.Lease, 1)
	go func() {
		l, err := w1.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got1 <- l
	}()
	l1 := <-got1 // granted by the resent copy of its first attempt
	if l1 == nil {
		return
	}
	queued := do(t, check, "ZCARD", key+":q").(int64)
	got2 := make(chan time.Time, 1)
	go func() { // w2 queues behind w1
		l, err := w2.Lock(ctx)
		if err != nil {
			t.Error(err)
			got2 <- time.Time{}
			return
		}
		got2 <- time.Now()
		l.Release(ctx)
	}()
	eventually(t, 5*time.Second, "w2 queued", func() bool { return do(t, check, "ZCARD", key+":q") == queued+1 })
	released := time.Now()
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got2:
		if d := at.Sub(released); at.IsZero() || d > time.Second {
			t.Fatalf("the waiter behind was granted %v after the release: the lock went back to the releaser's own stale queue entry", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind was not granted")
	}
}

// testHandOverSkipsReleaser: a release never hands the lock to the
// releasing token, even when a stale entry of that token heads the queue.
func testHandOverSkipsReleaser(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, 30*time.Second)
	key := keyOf(p, "s")
	b := h.NewClient(t).Backend
	m1, _ := primitives.NewMutex(clienttest.For(t, b), "s", primitives.WithPrefix(p))
	l1, err := m1.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	do(t, b, "ZADD", key+":q", "1", l1.Token())
	do(t, b, "ZADD", key+":qlive", "99999999999999", l1.Token())
	m2, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "s", primitives.WithPrefix(p))
	got := make(chan time.Time, 1)
	go func() {
		l, err := m2.Lock(ctx)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		l.Release(ctx)
	}()
	eventually(t, 5*time.Second, "m2 queued", func() bool { return do(t, b, "ZCARD", key+":q") == int64(2) })
	released := time.Now()
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if d := at.Sub(released); at.IsZero() || d > time.Second {
		t.Fatalf("the waiter was granted %v after the release: the lock was handed to the releasing token", d)
	}
}

// testForeignQueueKey: a Mutex's queue key holding another type. A
// TryLock and its Release still work (the release copes with the queue
// it cannot read: the lock is freed); a waiting Lock that would queue is
// refused with ErrInvalid and changes nothing.
func testForeignQueueKey(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	b := h.NewClient(t).Backend
	key := keyOf(p, "f")
	do(t, b, "SET", key+":q", "not a zset")
	for _, mk := range []func() (primitives.Mutex, error){
		func() (primitives.Mutex, error) {
			return primitives.NewMutex(clienttest.For(t, b), "f", primitives.WithPrefix(p))
		},
		func() (primitives.Mutex, error) {
			return primitives.NewMultiLock(clienttest.For(t, b), []string{"f", "f2"}, primitives.WithPrefix(p))
		},
	} {
		m, _ := mk()
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release with a foreign queue key: %v (the lock stays held for its TTL)", err)
		}
		if !lockFree(t, b, key) {
			t.Fatal("the lock is still held after its Release")
		}
	}
	holder, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "f", primitives.WithPrefix(p))
	hl, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Release(ctx)
	waiter, _ := primitives.NewMutex(clienttest.For(t, b), "f", primitives.WithPrefix(p))
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := waiter.Lock(wctx); !errors.Is(err, latchkit.ErrInvalid) {
		t.Fatalf("a waiting Lock that must queue in a foreign key: %v, want ErrInvalid", err)
	}
	if v := do(t, b, "GET", key+":q"); v != "not a zset" {
		t.Errorf("the foreign key now holds %v", v)
	}
	if n := do(t, b, "EXISTS", key+":qlive"); n != int64(0) {
		t.Error("a refused Lock wrote the queue's liveness key")
	}
}

// testMultiLockWoken: a MultiLock waiting on a name a Mutex holds is
// granted within moments of the Mutex's release, not when the Mutex's TTL
// would have run out.
func testMultiLockWoken(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, 30*time.Second)
	mu, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "a", primitives.WithPrefix(p), primitives.WithTTL(20*time.Second))
	l, err := mu.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ml, _ := primitives.NewMultiLock(clienttest.For(t, h.NewClient(t).Backend), []string{"a", "b"}, primitives.WithPrefix(p))
	got := make(chan time.Time, 1)
	go func() {
		ll, err := ml.Lock(ctx)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		ll.Release(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if d := at.Sub(released); at.IsZero() || d > time.Second {
		t.Fatalf("the MultiLock was granted %v after the Mutex's release", d)
	}
}

// testMultiLockNotStarved: with two clients looping on a Mutex of one of
// its names (each release hands the lock to the other), a waiting
// MultiLock still gets its turn.
func testMultiLockNotStarved(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, 30*time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var grants atomic.Int64
	for range 2 {
		mu, _ := primitives.NewMutex(clienttest.For(t, h.NewClient(t).Backend), "a", primitives.WithPrefix(p))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := mu.Lock(ctx)
				if err != nil {
					return
				}
				grants.Add(1)
				time.Sleep(time.Millisecond)
				l.Release(ctx)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	eventually(t, 5*time.Second, "the Mutex loop runs", func() bool { return grants.Load() > 10 })
	ml, _ := primitives.NewMultiLock(clienttest.For(t, h.NewClient(t).Backend), []string{"a", "b"}, primitives.WithPrefix(p))
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	before := grants.Load()
	start := time.Now()
	l, err := ml.Lock(mctx)
	if err != nil {
		t.Fatalf("MultiLock starved: %v after %v while the Mutex was granted %d times", err, time.Since(start), grants.Load()-before)
	}
	t.Logf("MultiLock granted after %v (%d Mutex grants meanwhile)", time.Since(start), grants.Load()-before)
	l.Release(ctx)
}
