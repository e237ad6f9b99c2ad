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
	"github.com/latchkit/latchkit/primitives"
)

// RunGiveUp checks that every acquisition that ends without a grant leaves
// the primitive clean (no grant nobody holds, no queue place that is handed
// the primitive), and that a release wakes whoever waits, whatever
// primitive they wait with.
func RunGiveUp(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"LostTryReply", testLostTryReply},
		{"DeadlineMidAttempt", testDeadlineMidAttempt},
		{"LateAttemptRefused", testLateAttemptRefused},
		{"ResentFirstAttempt", testResentFirstAttempt},
		{"HandOverSkipsReleaser", testHandOverSkipsReleaser},
		{"ForeignQueueKey", testForeignQueueKey},
		{"MultiLockWokenByMutexRelease", testMultiLockWoken},
		{"MultiLockNotStarvedByMutexes", testMultiLockNotStarved},
	})
}

// exclusive is a primitive of one holder at a time, opened on a backend:
// its waiting and single-attempt acquisitions.
type exclusive struct {
	name string
	open func(b backend.Backend, p string) (lock, try func(context.Context) (latchkit.Lease, error))
}

func mutexOf(ctor func(backend.Backend, string, ...primitives.Option) (primitives.Mutex, error), name string) func(backend.Backend, string) (lock, try func(context.Context) (latchkit.Lease, error)) {
	return func(b backend.Backend, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		m, err := ctor(b, name, primitives.WithPrefix(p))
		if err != nil {
			panic(err)
		}
		return m.Lock, m.TryLock
	}
}

func semOf(ctor func(backend.Backend, string, int, ...primitives.Option) (primitives.Semaphore, error)) func(backend.Backend, string) (lock, try func(context.Context) (latchkit.Lease, error)) {
	return func(b backend.Backend, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		s, err := ctor(b, "g", 1, primitives.WithPrefix(p))
		if err != nil {
			panic(err)
		}
		return s.Acquire, s.TryAcquire
	}
}

// exclusives are every primitive, opened with one permit.
var exclusives = []exclusive{
	{"Mutex", mutexOf(primitives.NewMutex, "g")},
	{"ReentrantMutex", func(b backend.Backend, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		m, _ := primitives.NewReentrantMutex(b, "g", primitives.WithPrefix(p))
		owner := newID()
		return func(ctx context.Context) (latchkit.Lease, error) { return m.Lock(primitives.WithOwner(ctx, owner)) },
			func(ctx context.Context) (latchkit.Lease, error) { return m.TryLock(primitives.WithOwner(ctx, owner)) }
	}},
	{"FairMutex", mutexOf(primitives.NewFairMutex, "g")},
	{"MultiLock", func(b backend.Backend, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		m, _ := primitives.NewMultiLock(b, []string{"g", "g2"}, primitives.WithPrefix(p))
		return m.Lock, m.TryLock
	}},
	{"Semaphore(1)", semOf(primitives.NewSemaphore)},
	{"FairSemaphore(1)", semOf(primitives.NewFairSemaphore)},
	{"RWLock/write", func(b backend.Backend, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		rw, _ := primitives.NewRWLock(b, "g", primitives.WithPrefix(p))
		return rw.Lock, rw.TryLock
	}},
	{"RWLock/read", func(b backend.Backend, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		rw, _ := primitives.NewRWLock(b, "g", primitives.WithPrefix(p))
		return rw.RLock, rw.TryRLock // checked against a writer below
	}},
}

// rival opens what excludes e's holder: a writer against a reader, the
// primitive itself otherwise.
func (e exclusive) rival(b backend.Backend, p string) func(context.Context) (latchkit.Lease, error) {
	if e.name == "RWLock/read" {
		rw, _ := primitives.NewRWLock(b, "g", primitives.WithPrefix(p))
		return rw.TryLock
	}
	_, try := e.open(b, p)
	return try
}

// faulty runs the scripts of the backend it wraps; armed, it runs the next
// one and then fails it: the reply is lost (an unreachable Redis), or held
// back until the call's context ends (the caller gave up while its script
// ran).
type faulty struct {
	backend.Backend
	lose, late atomic.Int32
}

// Cluster passes on what the wrapped backend says: a MultiLock must split
// its names over slots exactly as it does without the wrapper.
func (f *faulty) Cluster() bool { return backend.IsCluster(f.Backend) }

func (f *faulty) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	v, err := f.Backend.Eval(context.WithoutCancel(ctx), s, keys, args)
	switch {
	case f.lose.Add(-1) >= 0:
		return nil, &backend.Error{Kind: backend.ErrUnavailable, Cause: errors.New("injected: reply lost, connection reset")}
	case f.late.Add(-1) >= 0:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return v, err
}

// testLostTryReply: a TryLock whose reply is lost fails, and what the
// server granted it is given back before it returns: the primitive is free
// at once for another client, not for the rest of the TTL.
func testLostTryReply(t *testing.T, h Harness) {
	for _, e := range exclusives {
		t.Run(e.name, func(t *testing.T) {
			p := prefix(t)
			ctx := ctxT(t, 20*time.Second)
			f := &faulty{Backend: h.NewClient(t).Backend}
			_, try := e.open(f, p)
			f.lose.Store(1)
			if l, err := try(ctx); err == nil {
				l.Release(ctx)
				t.Fatal("granted although its reply was lost")
			} else if !errors.Is(err, backend.ErrUnavailable) {
				t.Fatalf("lost reply: %v, want ErrUnavailable", err)
			}
			other := e.rival(h.NewClient(t).Backend, p)
			l, err := other(ctx)
			if err != nil {
				t.Fatalf("after a TryLock whose reply was lost, another client: %v: the grant nobody knows of was not given back", err)
			}
			l.Release(ctx)
		})
	}
}

// testDeadlineMidAttempt: a waiting Lock whose context ends while its
// attempt runs on the server (which grants it) returns the context's
// error, and what the server granted it is given back before it returns.
func testDeadlineMidAttempt(t *testing.T, h Harness) {
	for _, e := range exclusives {
		t.Run(e.name, func(t *testing.T) {
			p := prefix(t)
			ctx := ctxT(t, 20*time.Second)
			f := &faulty{Backend: h.NewClient(t).Backend}
			lock, _ := e.open(f, p)
			f.late.Store(1)
			lctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			start := time.Now()
			l, err := lock(lctx)
			took := time.Since(start)
			cancel()
			if err == nil {
				l.Release(ctx)
				t.Fatal("granted although its reply came after the deadline")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Lock past its deadline: %v, want DeadlineExceeded", err)
			}
			if took > 50*time.Millisecond+time.Second {
				t.Errorf("Lock returned %v after it began, deadline 50ms", took)
			}
			other := e.rival(h.NewClient(t).Backend, p)
			l, err = other(ctx)
			if err != nil {
				t.Fatalf("after a Lock gave up mid-attempt, another client: %v: the grant nobody knows of was not given back", err)
			}
			l.Release(ctx)
		})
	}
}

// stuck holds back the next script: the call fails when its context ends,
// and the script reaches the server only when run is closed (a command
// stuck in a socket behind a paused server, or retransmitted late).
type stuck struct {
	backend.Backend
	armed atomic.Bool
	run   chan struct{}
	ran   chan error
}

// Cluster passes on what the wrapped backend says.
func (s *stuck) Cluster() bool { return backend.IsCluster(s.Backend) }

func (s *stuck) Eval(ctx context.Context, sc *backend.Script, keys, args []string) (backend.Value, error) {
	if !s.armed.CompareAndSwap(true, false) {
		return s.Backend.Eval(ctx, sc, keys, args)
	}
	go func() {
		<-s.run
		_, err := s.Backend.Eval(context.Background(), sc, keys, args)
		s.ran <- err
	}()
	<-ctx.Done()
	return nil, &backend.Error{Kind: ctx.Err(), Cause: errors.New("injected: i/o timeout")}
}

// testLateAttemptRefused: an acquisition gives up while its attempt is
// stuck on the way to the server; the attempt reaches the server only after
// the give-back. The server refuses it (the token was remembered as given
// back): no grant is left that nobody holds.
func testLateAttemptRefused(t *testing.T, h Harness) {
	for _, e := range exclusives {
		for _, try := range []bool{false, true} {
			name := e.name + "/Lock"
			if try {
				name = e.name + "/TryLock"
			}
			t.Run(name, func(t *testing.T) {
				p := prefix(t)
				ctx := ctxT(t, 20*time.Second)
				s := &stuck{Backend: h.NewClient(t).Backend, run: make(chan struct{}), ran: make(chan error, 1)}
				lock, tryLock := e.open(s, p)
				if try {
					lock = tryLock
				}
				s.armed.Store(true)
				lctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				_, err := lock(lctx)
				cancel()
				if err == nil {
					t.Fatal("granted although its attempt never reached the server")
				}
				close(s.run) // the attempt reaches the server now, after the give-back
				if err := <-s.ran; err != nil && !errors.Is(err, latchkit.ErrInvalid) {
					t.Logf("the late attempt: %v", err)
				}
				other := e.rival(h.NewClient(t).Backend, p)
				l, err := other(ctx)
				if err != nil {
					t.Fatalf("after a late copy of an attempt whose acquisition gave up, another client: %v: the late attempt was granted", err)
				}
				l.Release(ctx)
			})
		}
	}
}

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
	holderM, _ := primitives.NewMutex(h.NewClient(t).Backend, "r", primitives.WithPrefix(p),
		primitives.WithTTL(300*time.Millisecond), primitives.WithAutoExtend(false))
	if _, err := holderM.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	check := h.NewClient(t).Backend
	r := &resend{Backend: h.NewClient(t).Backend, first: make(chan struct{}),
		again: func() bool { return do(t, check, "EXISTS", key) == int64(0) }}
	r.armed.Store(true)
	w1, _ := primitives.NewMutex(r, "r", primitives.WithPrefix(p))
	w2, _ := primitives.NewMutex(h.NewClient(t).Backend, "r", primitives.WithPrefix(p))
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
	m1, _ := primitives.NewMutex(b, "s", primitives.WithPrefix(p))
	l1, err := m1.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	do(t, b, "ZADD", key+":q", "1", l1.Token())
	do(t, b, "ZADD", key+":qlive", "99999999999999", l1.Token())
	m2, _ := primitives.NewMutex(h.NewClient(t).Backend, "s", primitives.WithPrefix(p))
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
		func() (primitives.Mutex, error) { return primitives.NewMutex(b, "f", primitives.WithPrefix(p)) },
		func() (primitives.Mutex, error) {
			return primitives.NewMultiLock(b, []string{"f", "f2"}, primitives.WithPrefix(p))
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
		if n := do(t, b, "EXISTS", key); n != int64(0) {
			t.Fatal("the lock is still held after its Release")
		}
	}
	holder, _ := primitives.NewMutex(h.NewClient(t).Backend, "f", primitives.WithPrefix(p))
	hl, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Release(ctx)
	waiter, _ := primitives.NewMutex(b, "f", primitives.WithPrefix(p))
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
	mu, _ := primitives.NewMutex(h.NewClient(t).Backend, "a", primitives.WithPrefix(p), primitives.WithTTL(20*time.Second))
	l, err := mu.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ml, _ := primitives.NewMultiLock(h.NewClient(t).Backend, []string{"a", "b"}, primitives.WithPrefix(p))
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
		mu, _ := primitives.NewMutex(h.NewClient(t).Backend, "a", primitives.WithPrefix(p))
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
	ml, _ := primitives.NewMultiLock(h.NewClient(t).Backend, []string{"a", "b"}, primitives.WithPrefix(p))
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
