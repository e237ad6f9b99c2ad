package contracttest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// RunRWLock checks primitives.NewRWLock on the backend.
func RunRWLock(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"ReadersShareWritersExclude", testRWExclusion},
		{"WriterNotStarved", testRWWriterNotStarved},
		{"CrashedReaderExpires", testRWCrashedReader},
		{"GaveUpWriterWithdraws", testRWGaveUpWriter},
		{"AbandonedWriterIntentExpires", testRWAbandonedIntent},
		{"BadInput", testRWBadInput},
	})
}

// testRWExclusion: readers overlap (observed concurrency above 1); a writer
// never overlaps a reader or another writer, shown by in-process counters
// recorded inside every lease, and by a GET-then-SET counter in Redis that a
// second writer would make lose an update.
func testRWExclusion(t *testing.T, h Harness) {
	p := prefix(t)
	clients := []backend.Backend{h.NewClient(t).Backend, h.NewClient(t).Backend, h.NewClient(t).Backend}
	ctx := ctxT(t, 3*time.Minute)
	counter := p + "counter"
	var readers gauge
	var writers atomic.Int32
	var writes atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 12; g++ {
		b := clients[g%len(clients)]
		rw, err := primitives.NewRWLock(clienttest.For(t, b), "rw", primitives.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		writer := g%4 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				if writer {
					l, err := rw.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if n := writers.Add(1); n != 1 || readers.n.Load() != 0 {
						t.Errorf("writer overlaps: %d writers, %d readers", n, readers.n.Load())
					}
					if err := incr(ctx, b, counter, time.Millisecond); err != nil {
						t.Error(err)
					}
					writes.Add(1)
					writers.Add(-1)
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				l, err := rw.RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				readers.enter()
				if writers.Load() != 0 {
					t.Errorf("reader overlaps a writer")
				}
				time.Sleep(3 * time.Millisecond)
				readers.leave()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := do(t, clients[0], "GET", counter); got != strconv.FormatInt(writes.Load(), 10) {
		t.Errorf("counter %v after %d writes: two writers overlapped", got, writes.Load())
	}
	if readers.peak.Load() < 2 {
		t.Errorf("readers never overlapped (max %d at once)", readers.peak.Load())
	}
	t.Logf("max %d readers at once", readers.peak.Load())
}

// testRWWriterNotStarved: with 8 readers re-acquiring in a tight loop (each
// holding 5ms), a writer gets the lock within a bound: its intent stops new
// readers, so it waits for the readers already in (one hold) plus hand-off,
// never for the stream. We allow 1s, 200 times a reader's hold.
func testRWWriterNotStarved(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, time.Minute)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for g := 0; g < 8; g++ {
		rw, _ := primitives.NewRWLock(clienttest.For(t, h.NewClient(t).Backend), "s", primitives.WithPrefix(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := rw.RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				time.Sleep(5 * time.Millisecond)
				l.Release(ctx)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(100 * time.Millisecond) // let the stream run
	rw, _ := primitives.NewRWLock(clienttest.For(t, h.NewClient(t).Backend), "s", primitives.WithPrefix(p))
	var worst time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := rw.Lock(wctx)
		cancel()
		if err != nil {
			t.Fatalf("writer starved: %v after %d reads", err, reads.Load())
		}
		worst = max(worst, time.Since(start))
		time.Sleep(2 * time.Millisecond)
		l.Release(ctx)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("writer's worst wait %v behind 8 looping readers (%d reads)", worst, reads.Load())
	if worst > time.Second {
		t.Errorf("writer waited %v, bound 1s", worst)
	}
}

// testRWCrashedReader: a reader that never releases blocks a writer for at
// most its TTL, measured on the server's clock.
func testRWCrashedReader(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	crashed, _ := primitives.NewRWLock(clienttest.For(t, b), "c", primitives.WithPrefix(p), primitives.WithTTL(400*time.Millisecond), primitives.WithAutoExtend(false))
	if _, err := crashed.TryRLock(ctx); err != nil {
		t.Fatal(err)
	}
	rw, _ := primitives.NewRWLock(clienttest.For(t, b), "c", primitives.WithPrefix(p))
	if _, err := rw.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("writer while read-held: %v", err)
	}
	// A TryLock leaves no intent: readers are still welcome.
	if l, err := rw.TryRLock(ctx); err != nil {
		t.Fatalf("reader after a writer's TryLock: %v", err)
	} else {
		l.Release(ctx)
	}
	advance(t, h, 500*time.Millisecond)
	l, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatalf("writer after the crashed reader's ttl: %v", err)
	}
	if _, err := crashed.TryRLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Errorf("reader while write-held: %v", err)
	}
	l.Release(ctx)
}

// testRWGaveUpWriter: a writer whose Lock gave up takes its intent back at
// once, so readers are not held up by it.
func testRWGaveUpWriter(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	rw, _ := primitives.NewRWLock(clienttest.For(t, b), "a", primitives.WithPrefix(p))
	r, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = rw.Lock(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer: %v", err)
	}
	l, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatalf("a reader is kept out by a writer that gave up: %v", err)
	}
	l.Release(ctx)
	r.Release(ctx)
}

func testRWBadInput(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 10*time.Second)
	if rw, err := primitives.NewRWLock(clienttest.For(t, b), "", primitives.WithPrefix(p)); !errors.Is(err, latchkit.ErrInvalid) || rw != nil {
		t.Errorf("empty name: %v", err)
	}
	if rw, err := primitives.NewRWLock(nil, "x"); !errors.Is(err, latchkit.ErrInvalid) || rw != nil {
		t.Errorf("nil client: %v", err)
	}
	if rw, err := primitives.NewRWLock(clienttest.For(t, b), "x", primitives.WithWaiterTimeout(time.Millisecond)); !errors.Is(err, latchkit.ErrInvalid) || rw != nil {
		t.Errorf("waiter timeout 1ms: %v", err)
	}
	key := keyOf(p, "w") + ":rw:readers"
	do(t, b, "SET", key, "precious")
	rw, _ := primitives.NewRWLock(clienttest.For(t, b), "w", primitives.WithPrefix(p))
	for _, f := range []func(context.Context) (latchkit.Lease, error){rw.TryRLock, rw.TryLock, rw.Lock, rw.RLock} {
		if _, err := f(ctx); !errors.Is(err, latchkit.ErrInvalid) {
			t.Errorf("readers key is a string: %v, want ErrInvalid", err)
		}
	}
	if v := do(t, b, "GET", key); v != "precious" {
		t.Errorf("value changed to %v", v)
	}
	for _, k := range []string{":rw:writer", ":rw:waiting", ":rw:fence"} {
		if v := do(t, b, "EXISTS", keyOf(p, "w")+k); v != int64(0) {
			t.Errorf("%s was written", k)
		}
	}
}

// intentScript leaves a writer's intent as a process that died while
// waiting would: expiring ARGV[2] ms from the server's now.
var intentScript = backend.NewScript(`
local t = redis.call('TIME')
return redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]), ARGV[1])`)

// testRWAbandonedIntent: the intent of a writer whose process died keeps
// readers out only until the waiter timeout runs out on the server's clock.
func testRWAbandonedIntent(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	if _, err := b.Eval(ctx, intentScript, []string{keyOf(p, "d") + ":rw:waiting"}, []string{"dead-writer", "300"}); err != nil {
		t.Fatal(err)
	}
	rw, _ := primitives.NewRWLock(clienttest.For(t, b), "d", primitives.WithPrefix(p))
	if _, err := rw.TryRLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("reader behind a live intent: %v, want ErrNotAcquired", err)
	}
	advance(t, h, 400*time.Millisecond)
	l, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatalf("reader after the intent's timeout: %v", err)
	}
	l.Release(ctx)
}
