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
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
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
		{"LateAttemptBehindHolderNotQueued", testLateAttemptBehindHolder},
		{"ResentFirstAttempt", testResentFirstAttempt},
		{"HandOverSkipsReleaser", testHandOverSkipsReleaser},
		{"ForeignQueueKey", testForeignQueueKey},
		{"WaiterAcrossHang", testWaiterAcrossHang},
		{"MultiLockWokenByMutexRelease", testMultiLockWoken},
		{"MultiLockNotStarvedByMutexes", testMultiLockNotStarved},
	})
}

// exclusive is a primitive of one holder at a time, opened on a client:
// its waiting and single-attempt acquisitions.
type exclusive struct {
	name string
	open func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error))
}

func mutexOf(ctor func(*primitives.Client, string, ...primitives.Option) (primitives.Mutex, error), name string) func(*primitives.Client, string) (lock, try func(context.Context) (latchkit.Lease, error)) {
	return func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		m, err := ctor(c, name, primitives.WithPrefix(p))
		if err != nil {
			panic(err)
		}
		return m.Lock, m.TryLock
	}
}

func semOf(ctor func(*primitives.Client, string, int, ...primitives.Option) (primitives.Semaphore, error)) func(*primitives.Client, string) (lock, try func(context.Context) (latchkit.Lease, error)) {
	return func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		s, err := ctor(c, "g", 1, primitives.WithPrefix(p))
		if err != nil {
			panic(err)
		}
		return s.Acquire, s.TryAcquire
	}
}

// exclusives are every primitive, opened with one permit.
var exclusives = []exclusive{
	{"Mutex", mutexOf(primitives.NewMutex, "g")},
	{"ReentrantMutex", func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		m, _ := primitives.NewReentrantMutex(c, "g", primitives.WithPrefix(p))
		owner := newID()
		return func(ctx context.Context) (latchkit.Lease, error) { return m.Lock(primitives.WithOwner(ctx, owner)) },
			func(ctx context.Context) (latchkit.Lease, error) { return m.TryLock(primitives.WithOwner(ctx, owner)) }
	}},
	{"FairMutex", mutexOf(primitives.NewFairMutex, "g")},
	{"MultiLock", func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		m, _ := primitives.NewMultiLock(c, []string{"g", "g2"}, primitives.WithPrefix(p))
		return m.Lock, m.TryLock
	}},
	{"Semaphore(1)", semOf(primitives.NewSemaphore)},
	{"FairSemaphore(1)", semOf(primitives.NewFairSemaphore)},
	{"RWLock/write", func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		rw, _ := primitives.NewRWLock(c, "g", primitives.WithPrefix(p))
		return rw.Lock, rw.TryLock
	}},
	{"RWLock/read", func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		rw, _ := primitives.NewRWLock(c, "g", primitives.WithPrefix(p))
		return rw.RLock, rw.TryRLock // checked against a writer below
	}},
}

// rival opens what excludes e's holder: a writer against a reader, the
// primitive itself otherwise.
func (e exclusive) rival(c *primitives.Client, p string) func(context.Context) (latchkit.Lease, error) {
	if e.name == "RWLock/read" {
		rw, _ := primitives.NewRWLock(c, "g", primitives.WithPrefix(p))
		return rw.TryLock
	}
	_, try := e.open(c, p)
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
	if !keyspace.OfPrimitive(keys) {
		return f.Backend.Eval(ctx, s, keys, args) // the Client's record
	}
	v, err := f.Backend.Eval(context.WithoutCancel(ctx), s, keys, args)
	switch {
	case f.lose.Add(-1) >= 0:
		return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("injected: reply lost, connection reset")}
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
			_, try := e.open(clienttest.For(t, f), p)
			f.lose.Store(1)
			if l, err := try(ctx); err == nil {
				l.Release(ctx)
				t.Fatal("granted although its reply was lost")
			} else if !errors.Is(err, backend.ErrUnavailable) {
				t.Fatalf("lost reply: %v, want ErrUnavailable", err)
			}
			rivalGets(t, ctx, h, e, p, "after a TryLock whose reply was lost", "the grant nobody knows of was not given back")
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
			lock, _ := e.open(clienttest.For(t, f), p)
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
			rivalGets(t, ctx, h, e, p, "after a Lock gave up mid-attempt", "the grant nobody knows of was not given back")
		})
	}
}

// hung is a backend whose server hangs (SIGSTOP) as rueidis sees it: once
// hang is called, the next script has already reached the server's socket
// and runs only when resume is called (before anything sent after it),
// and every call made meanwhile fails a moment later with what the driver
// reports when the handshake of its new connection times out: its own
// context.DeadlineExceeded, classified by backend.Wrap while the caller's
// context is live.
type hung struct {
	backend.Backend
	mu   sync.Mutex
	on   bool
	late func() // the script in the socket
}

// Cluster passes on what the wrapped backend says.
func (h *hung) Cluster() bool { return backend.IsCluster(h.Backend) }

func (h *hung) hang() {
	h.mu.Lock()
	h.on = true
	h.mu.Unlock()
}

// resume runs the script that was in the socket, then lets calls through.
func (h *hung) resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.late != nil {
		h.late()
	}
	h.on, h.late = false, nil
}

func (h *hung) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	h.mu.Lock()
	if !h.on {
		h.mu.Unlock()
		return h.Backend.Eval(ctx, s, keys, args)
	}
	if h.late == nil {
		h.late = func() { _, _ = h.Backend.Eval(context.Background(), s, keys, args) }
	}
	h.mu.Unlock()
	select {
	case <-time.After(10 * time.Millisecond):
	case <-ctx.Done():
	}
	return nil, backend.Wrap(ctx, context.DeadlineExceeded, nil, func(error) (string, bool) { return "", false })
}

// hangKinds are the primitives of testWaiterAcrossHang, opened with opts.
var hangKinds = []struct {
	name string
	open func(c *primitives.Client, p string, opts ...primitives.Option) func(context.Context) (latchkit.Lease, error)
}{
	{"Mutex", func(c *primitives.Client, p string, opts ...primitives.Option) func(context.Context) (latchkit.Lease, error) {
		m, _ := primitives.NewMutex(c, "g", append(opts, primitives.WithPrefix(p))...)
		return m.Lock
	}},
	{"FairMutex", func(c *primitives.Client, p string, opts ...primitives.Option) func(context.Context) (latchkit.Lease, error) {
		m, _ := primitives.NewFairMutex(c, "g", append(opts, primitives.WithPrefix(p))...)
		return m.Lock
	}},
	{"FairSemaphore(1)", func(c *primitives.Client, p string, opts ...primitives.Option) func(context.Context) (latchkit.Lease, error) {
		s, _ := primitives.NewFairSemaphore(c, "g", 1, append(opts, primitives.WithPrefix(p))...)
		return s.Acquire
	}},
	{"Semaphore(1)", func(c *primitives.Client, p string, opts ...primitives.Option) func(context.Context) (latchkit.Lease, error) {
		s, _ := primitives.NewSemaphore(c, "g", 1, append(opts, primitives.WithPrefix(p))...)
		return s.Acquire
	}},
	{"RWLock/write", func(c *primitives.Client, p string, opts ...primitives.Option) func(context.Context) (latchkit.Lease, error) {
		rw, _ := primitives.NewRWLock(c, "g", append(opts, primitives.WithPrefix(p))...)
		return rw.Lock
	}},
	{"MultiLock", func(c *primitives.Client, p string, opts ...primitives.Option) func(context.Context) (latchkit.Lease, error) {
		m, _ := primitives.NewMultiLock(c, []string{"g", "g2"}, append(opts, primitives.WithPrefix(p))...)
		return m.Lock
	}},
}

// testWaiterAcrossHang: a client waits (Lock) for a primitive another
// holds; the server hangs with the waiter's next attempt in its socket,
// past the holder's TTL and past the give-back window, and resumes. The
// waiting Lock rides the hang out (its driver's own timeouts are not its
// caller's deadline: it never returns while its context is live) and is
// granted at once after the resume, by the attempt that sat in the socket.
// A Lock that took its driver's timeout for its deadline gave up, and so
// did the next ones; the give-back of the first never reached the hung
// server, and its attempt, run at the resume, was granted to nobody for
// the whole TTL: every later Lock waited behind it. Every primitive at
// once, each on its own hung client.
func testWaiterAcrossHang(t *testing.T, h Harness) {
	const (
		holderTTL = 300 * time.Millisecond
		waiterTTL = 10 * time.Second // how long a grant nobody holds blocks
		// The hang outlasts the holder's TTL, and the give-back window
		// (1 s) of an acquisition that gave up at the first call it made
		// in the hang (at most a waiter's wait hint, 1 s, after it began).
		hangFor = 2500 * time.Millisecond
		bound   = 2 * time.Second
	)
	p := prefix(t)
	ctx := ctxT(t, 30*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type waiter struct {
		name    string
		hb      *hung
		done    chan struct{}
		early   []string // errors of Locks that returned with wctx live
		granted time.Time
	}
	var ws []*waiter
	for _, k := range hangKinds {
		kp := p + k.name + ":"
		hl, err := k.open(clienttest.For(t, h.NewClient(t).Backend), kp, primitives.WithTTL(holderTTL), primitives.WithAutoExtend(false))(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer hl.Release(ctx)
		w := &waiter{name: k.name, hb: &hung{Backend: h.NewClient(t).Backend}, done: make(chan struct{})}
		lock := k.open(clienttest.For(t, w.hb), kp, primitives.WithTTL(waiterTTL))
		ws = append(ws, w)
		go func() {
			defer close(w.done)
			for wctx.Err() == nil {
				l, err := lock(wctx)
				if err == nil {
					w.granted = time.Now()
					l.Release(ctx)
					return
				}
				if wctx.Err() == nil {
					w.early = append(w.early, err.Error())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // the waiters wait
	for _, w := range ws {
		w.hb.hang()
	}
	time.Sleep(hangFor)
	resumed := time.Now()
	for _, w := range ws {
		w.hb.resume()
	}
	bctx, bcancel := context.WithTimeout(ctx, bound)
	defer bcancel()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-bctx.Done():
		}
	}
	cancel()
	for _, w := range ws {
		<-w.done
		switch {
		case len(w.early) > 0:
			t.Errorf("%s: %d waiting Locks returned while their context was live, the first: %s", w.name, len(w.early), w.early[0])
		case w.granted.IsZero():
			t.Errorf("%s: the waiter was not granted within %v of the resume", w.name, bound)
		default:
			t.Logf("%s: granted %v after the resume", w.name, w.granted.Sub(resumed).Round(time.Millisecond))
		}
		if len(w.early) > 0 && w.granted.IsZero() {
			t.Errorf("%s: ... and no later Lock was granted within %v of the resume", w.name, bound)
		}
	}
}
