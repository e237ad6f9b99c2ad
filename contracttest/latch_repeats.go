package contracttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/primitives"
)

// recorder is a backend that records the script calls made through it
// and, when twice is set, runs each of them twice (returning the second
// reply), as a driver that resends a command after a read timeout does.
type recorder struct {
	backend.Backend
	twice atomic.Bool
	mu    sync.Mutex
	calls []recorded
}

type recorded struct {
	s          *backend.Script
	keys, args []string
}

func (r *recorder) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	r.mu.Lock()
	r.calls = append(r.calls, recorded{s, keys, args})
	r.mu.Unlock()
	v, err := r.Backend.Eval(ctx, s, keys, args)
	if err == nil && r.twice.Load() {
		v, err = r.Backend.Eval(ctx, s, keys, args)
	}
	return v, err
}

// last returns the last call recorded and forgets every call.
func (r *recorder) last(t testing.TB) recorded {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		t.Fatal("no call recorded")
	}
	c := r.calls[len(r.calls)-1]
	r.calls = nil
	return c
}

// replay runs c again, as a late copy of the call would.
func (c recorded) replay(t testing.TB, b backend.Backend) backend.Value {
	t.Helper()
	v, err := b.Eval(context.Background(), c.s, c.keys, c.args)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	return v
}

// testLatchRepeats: every TrySetCount and CountDown call may reach the
// server twice (a resend after a read timeout, a retry after a lost
// reply): the second copy changes nothing more. A CountDown run twice
// counts once; a TrySetCount run twice reports true; a copy of a round's
// CountDown or TrySetCount that arrives after the latch reached zero and
// was set again does not touch the new round.
func testLatchRepeats(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	rec := &recorder{Backend: b}
	rec.twice.Store(true)
	twice := newLatch(t, rec, "r", primitives.WithPrefix(p))
	plain := newLatch(t, b, "r", primitives.WithPrefix(p))

	if ok, err := twice.TrySetCount(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetCount(3) run twice: %v, %v; want true (the second copy finds its own count)", ok, err)
	}
	wantCount(t, ctx, plain, 3, "after a TrySetCount run twice")
	for want := int64(2); want >= 0; want-- {
		if err := twice.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		wantCount(t, ctx, plain, want, "after a CountDown run twice")
	}

	// Round A of one count-down, then round B: late copies of A's calls
	// change nothing.
	rec.twice.Store(false)
	if ok, _ := twice.TrySetCount(ctx, 1); !ok {
		t.Fatal("TrySetCount(1) at zero refused")
	}
	setA := rec.last(t)
	if err := twice.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	downA := rec.last(t)
	wantCount(t, ctx, plain, 0, "round A done")
	if ok, _ := plain.TrySetCount(ctx, 2); !ok {
		t.Fatal("TrySetCount(2) for round B refused")
	}
	if v := downA.replay(t, b); fmt.Sprint(v) != "2" {
		t.Errorf("a late copy of round A's CountDown answered %v", v)
	}
	wantCount(t, ctx, plain, 2, "after a late copy of round A's CountDown")
	if v := setA.replay(t, b); v != int64(1) {
		t.Errorf("a late copy of round A's TrySetCount answered %v, want 1: that call did set the latch", v)
	}
	wantCount(t, ctx, plain, 2, "after a late copy of round A's TrySetCount")
	// A copy of round B's own count-down, made again while B is open.
	if err := twice.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	downB := rec.last(t)
	downB.replay(t, b)
	downB.replay(t, b)
	wantCount(t, ctx, plain, 1, "after one CountDown of round B run three times")
}

// testLatchConcurrent: 50 goroutines on 4 clients count a latch of 50
// down, once each (overlapping, their starts spread over 150 ms), while
// 10 waiters on 3 other clients wait. No waiter
// returns before the 50th CountDown call has started (the count can only
// reach zero then); every waiter returns soon after the last CountDown
// returned; the count ends at 0.
func testLatchConcurrent(t *testing.T, h Harness) {
	const downs, waiters = 50, 10
	p := prefix(t)
	ctx := ctxT(t, time.Minute)
	clients := make([]backend.Backend, 7)
	for i := range clients {
		clients[i] = h.NewClient(t).Backend
	}
	if ok, err := newLatch(t, clients[0], "c", primitives.WithPrefix(p)).TrySetCount(ctx, downs); !ok || err != nil {
		t.Fatalf("TrySetCount(%d): %v, %v", downs, ok, err)
	}
	var started, returned atomic.Int32
	type woke struct {
		started int32
		at      time.Time
		err     error
	}
	woken := make(chan woke, waiters)
	for w := 0; w < waiters; w++ {
		l := newLatch(t, clients[4+w%3], "c", primitives.WithPrefix(p))
		go func() {
			err := l.Wait(ctx)
			woken <- woke{started.Load(), time.Now(), err}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the waiters subscribe
	// The count-downs start spread over 150 ms, in random order, so that
	// a latch that opened early (a count-down counted twice) is seen
	// opening while some have not started.
	go1 := make(chan struct{})
	var wg sync.WaitGroup
	for g, at := range rand.Perm(downs) {
		l := newLatch(t, clients[g%4], "c", primitives.WithPrefix(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-go1
			time.Sleep(time.Duration(at) * 3 * time.Millisecond)
			started.Add(1)
			if err := l.CountDown(ctx); err != nil {
				t.Error(err)
			}
			returned.Add(1)
		}()
	}
	close(go1)
	wg.Wait()
	last := time.Now()
	for w := 0; w < waiters; w++ {
		select {
		case r := <-woken:
			if r.err != nil {
				t.Errorf("waiter: %v", r.err)
			}
			if r.started < downs {
				t.Errorf("a waiter returned when only %d of %d CountDown calls had started", r.started, downs)
			}
			if d := r.at.Sub(last); d > 2*time.Second {
				t.Errorf("a waiter returned %v after the last CountDown returned", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d waiters still waiting 10 s after the last CountDown returned", waiters-w, waiters)
		}
	}
	wantCount(t, ctx, newLatch(t, clients[0], "c", primitives.WithPrefix(p)), 0, "after 50 count-downs")
}
