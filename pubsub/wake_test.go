package pubsub_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/pubsub"
	"github.com/latchkit/latchkit/retry"
)

type fakeLease struct{ name string }

func (l *fakeLease) Name() string                                { return l.name }
func (l *fakeLease) Token() string                               { return "00" }
func (l *fakeLease) Fence() int64                                { return 1 }
func (l *fakeLease) Context() context.Context                    { return context.Background() }
func (l *fakeLease) TTL(context.Context) (time.Duration, error)  { return time.Second, nil }
func (l *fakeLease) Extend(context.Context, time.Duration) error { return nil }
func (l *fakeLease) Release(context.Context) error               { return nil }

// lockSim is a fake innermost Acquire over an in-memory mutex: an attempt
// fails with ErrNotAcquired (and the configured WaitHint) while the mutex is
// held. It records when each attempt was made.
type lockSim struct {
	mu       sync.Mutex
	held     bool
	hint     time.Duration
	freeAt   int // when > 0, the attempt with this number finds it free
	attempts []time.Time
	attemptC chan int
	// before, when set, runs at the start of every attempt.
	before func(req *latchkit.Request)
}

func newSim(held bool) *lockSim {
	return &lockSim{held: held, attemptC: make(chan int, 1000)}
}

func (s *lockSim) acquire(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
	if s.before != nil {
		s.before(req)
	}
	req.Attempts++
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts, time.Now())
	n := len(s.attempts)
	s.attemptC <- n
	if s.held && n != s.freeAt {
		req.WaitHint = s.hint
		return nil, &latchkit.OpError{Op: "lock", Kind: req.Kind, Name: req.Name, Err: latchkit.ErrNotAcquired}
	}
	req.WaitHint = 0
	s.held = true
	return &fakeLease{name: req.Name}, nil
}

func (s *lockSim) setHeld(held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = held
}

func (s *lockSim) attemptTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.attempts...)
}

// nextAttempt waits up to d for the next attempt and returns its number, or
// 0 if none came.
func (s *lockSim) nextAttempt(d time.Duration) int {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case n := <-s.attemptC:
		return n
	case <-t.C:
		return 0
	}
}

// chain is the primitives' acquisition path: wake-on-release, then retry,
// then one attempt.
func chain(s *lockSim, p retry.Policy, opts ...pubsub.Option) latchkit.Acquire {
	// No linger unless a test asks: tests check that channels go.
	return latchkit.Chain(s.acquire, pubsub.WakeOnRelease(append([]pubsub.Option{pubsub.WithLinger(0)}, opts...)...), retry.Middleware(p))
}

func (e *env) request(channel string) *latchkit.Request {
	return &latchkit.Request{Name: "m", Kind: latchkit.KindMutex, TTL: time.Second,
		Backend: e.fb, Channels: []string{channel}}
}

type lockResult struct {
	l   latchkit.Lease
	err error
}

func lockAsync(ctx context.Context, acq latchkit.Acquire, req *latchkit.Request) <-chan lockResult {
	res := make(chan lockResult, 1)
	go func() {
		l, err := acq(ctx, req)
		res <- lockResult{l, err}
	}()
	return res
}

func TestWakeOnReleaseEndsOnMessage(t *testing.T) {
	const fallback = 5 * time.Second
	e := newEnv(t)
	sim := newSim(true)
	req := e.request("rel:m")
	ctx, cancel := context.WithCancel(context.Background())
	res := lockAsync(ctx, chain(sim, retry.Constant(fallback)), req)
	defer func() { // end the Lock also when the test fails early
		cancel()
		if res != nil {
			<-res
		}
	}()

	if sim.nextAttempt(wait) != 1 || sim.nextAttempt(wait) != 2 {
		t.Fatal("no second attempt")
	}
	at := sim.attemptTimes()
	if gap := at[1].Sub(at[0]); gap > fallback/5 {
		t.Fatalf("the first wait took %v: it must subscribe and return at once", gap)
	}
	if n := e.m.PubSubNumSub("rel:m")["rel:m"]; n != 1 {
		t.Fatalf("%d subscribers, want 1", n)
	}
	h := pubsub.For(e.fb, pubsub.WithLinger(0)) // the shared Hub the waiter uses
	// Subscribed, the second wait sleeps until a message (or the fallback).
	if n := sim.nextAttempt(200 * time.Millisecond); n != 0 {
		t.Fatalf("attempt %d without a release", n)
	}
	sim.setHeld(false)
	released := time.Now()
	e.mustPublish(t, "rel:m", "1")
	var r lockResult
	select {
	case r = <-res:
		res = nil
	case <-time.After(wait):
		t.Fatal("Lock did not return")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if el := time.Since(released); el > fallback/5 {
		t.Fatalf("woken %v after the release; the fallback is %v", el, fallback)
	}
	if n := len(sim.attemptTimes()); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if req.Waiter != nil {
		t.Fatal("the Waiter was left on the request")
	}
	// The waiter left: the channel is unsubscribed and the Hub is gone.
	eventually(t, "unsubscribed", func() bool { return len(e.m.PubSubChannels("")) == 0 })
	if pubsub.For(e.fb, pubsub.WithLinger(0)) == h {
		t.Fatal("the Hub outlived its last waiter")
	}
	if n := e.fb.subscribeCalls(); n != 1 {
		t.Fatalf("%d Subscribe calls, want 1", n)
	}
}

func TestWakeOnReleaseEndsOnWaitHint(t *testing.T) {
	const fallback, hint = 10 * time.Second, 150 * time.Millisecond
	e := newEnv(t)
	sim := newSim(true)
	sim.hint = hint
	sim.freeAt = 3 // the holder's lease runs out, nobody publishes
	_, err := chain(sim, retry.Constant(fallback))(context.Background(), e.request("rel:m"))
	if err != nil {
		t.Fatal(err)
	}
	at := sim.attemptTimes()
	if len(at) != 3 {
		t.Fatalf("%d attempts, want 3", len(at))
	}
	if gap := at[2].Sub(at[1]); gap < hint || gap > fallback/4 {
		t.Fatalf("the wait took %v, want the WaitHint %v (plus a little), far below the fallback %v", gap, hint, fallback)
	}
}

func TestWakeOnReleaseEndsOnContext(t *testing.T) {
	const fallback = 10 * time.Second
	e := newEnv(t)
	sim := newSim(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := chain(sim, retry.Constant(fallback))(ctx, e.request("rel:m"))
	el := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if el > fallback/4 {
		t.Fatalf("returned after %v, far beyond the 300ms deadline", el)
	}
	if n := len(sim.attemptTimes()); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	eventually(t, "unsubscribed", func() bool { return len(e.m.PubSubChannels("")) == 0 })
}

func TestWakeOnReleasePassThrough(t *testing.T) {
	e := newEnv(t)
	t.Run("try", func(t *testing.T) {
		sim := newSim(true)
		req := e.request("rel:m")
		req.Try = true
		_, err := chain(sim, retry.Constant(time.Millisecond))(context.Background(), req)
		if !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("err = %v", err)
		}
		if n := len(sim.attemptTimes()); n != 1 {
			t.Fatalf("%d attempts, want 1", n)
		}
	})
	t.Run("no channels", func(t *testing.T) {
		sim := newSim(true)
		req := e.request("rel:m")
		req.Channels = nil
		_, err := chain(sim, retry.MaxAttempts(retry.Constant(time.Millisecond), 3))(context.Background(), req)
		if !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("err = %v", err)
		}
		if n := len(sim.attemptTimes()); n != 3 {
			t.Fatalf("%d attempts, want 3", n)
		}
	})
	if n := e.fb.subscribeCalls(); n != 0 {
		t.Fatalf("%d Subscribe calls, want none", n)
	}
}

func TestWakeOnReleaseKeepsOuterWaiter(t *testing.T) {
	e := newEnv(t)
	sim := newSim(true)
	sim.freeAt = 2
	req := e.request("rel:m")
	outer := &countingWaiter{}
	req.Waiter = outer
	if _, err := chain(sim, retry.Constant(time.Millisecond))(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if req.Waiter != outer {
		t.Fatal("the request's Waiter was not restored")
	}
}

type countingWaiter struct{ n int }

func (w *countingWaiter) Wait(context.Context, *latchkit.Request, time.Duration) error {
	w.n++
	return nil
}

func TestWakeOnReleaseNotLiveFallsBack(t *testing.T) {
	e := newEnv(t)
	e.fb.fail(-1, nil) // the server never accepts a subscription
	t.Run("policy delay", func(t *testing.T) {
		sim := newSim(true)
		sim.freeAt = 6
		start := time.Now()
		if _, err := chain(sim, retry.Constant(20*time.Millisecond))(context.Background(), e.request("rel:a")); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > wait/2 {
			t.Fatalf("took %v", el)
		}
	})
	t.Run("bounded by WaitHint", func(t *testing.T) {
		const fallback = 10 * time.Second
		sim := newSim(true)
		sim.freeAt = 4
		sim.hint = 30 * time.Millisecond
		start := time.Now()
		if _, err := chain(sim, retry.Constant(fallback))(context.Background(), e.request("rel:b")); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > fallback/4 {
			t.Fatalf("took %v: waits not bounded by the WaitHint", el)
		}
	})
	if e.fb.subscribeCalls() == 0 {
		t.Fatal("never tried to subscribe")
	}
}

func TestWakeOnReleaseHandoff(t *testing.T) {
	// Several lockers contend for one mutex; each release publishes "1".
	// The policy alone would sleep 10s between attempts: all of them must
	// get through far sooner, each release waking the next waiter, none
	// swallowed.
	const fallback, lockers = 10 * time.Second, 8
	e := newEnv(t)
	sim := newSim(false)
	acq := chain(sim, retry.Constant(fallback))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, lockers)
	for range lockers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*fallback)
			defer cancel()
			if _, err := acq(ctx, e.request("rel:m")); err != nil {
				errs <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
			sim.setHeld(false)
			// Nobody may be subscribed (the last one out): 0 receivers is fine.
			if _, err := e.b.Eval(context.Background(), publishScript, nil, []string{"rel:m", "1"}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if el := time.Since(start); el > fallback/2 {
		t.Fatalf("%d hand-offs took %v: a release was missed", lockers, el)
	}
	t.Logf("%d hand-offs in %v, %d attempts, %d Subscribe calls", lockers, time.Since(start),
		len(sim.attemptTimes()), e.fb.subscribeCalls())
}

func TestWakeOnReleaseSharesOneSubscription(t *testing.T) {
	// A request enters WakeOnRelease while the backend's Hub has a waiter;
	// that waiter leaves (the Hub goes idle and leaves the registry) before
	// the request's first attempt has failed. The request must then wait
	// on the backend's current Hub, the one later requests find, and not
	// revive the idle one beside it: one subscription per backend.
	e := newEnv(t)
	sim := newSim(true)
	gate := make(chan struct{})
	entered := make(chan struct{})
	sim.before = func(req *latchkit.Request) {
		if req.Name == "y" && req.Attempts == 0 {
			close(entered)
			<-gate
		}
	}
	acq := chain(sim, retry.Constant(10*time.Second))

	// x waits on another channel: were it rel:m, y would join x's live
	// channel before its first attempt, and the Hub could not go idle.
	xctx, xcancel := context.WithCancel(context.Background())
	xreq := e.request("rel:x")
	xres := lockAsync(xctx, acq, xreq)
	eventually(t, "x subscribed", func() bool { return e.m.PubSubNumSub("rel:x")["rel:x"] == 1 })

	yreq := e.request("rel:m")
	yreq.Name = "y"
	yctx, ycancel := context.WithCancel(context.Background())
	defer ycancel()
	yres := lockAsync(yctx, acq, yreq)
	<-entered // y is inside WakeOnRelease, in its first attempt

	xcancel() // x gives up and leaves: the Hub is idle
	if r := <-xres; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("x: %v", r.err)
	}
	eventually(t, "x's subscription closed", func() bool { return len(e.m.PubSubChannels("")) == 0 })

	close(gate) // y's attempt fails; y waits
	zctx, zcancel := context.WithCancel(context.Background())
	defer zcancel()
	zres := lockAsync(zctx, acq, e.request("rel:m"))
	eventually(t, "y and z subscribed", func() bool {
		return e.m.PubSubNumSub("rel:m")["rel:m"] >= 1 && len(sim.attemptTimes()) >= 6
	})
	time.Sleep(50 * time.Millisecond)
	if n := e.m.PubSubNumSub("rel:m")["rel:m"]; n != 1 {
		t.Fatalf("%d subscriptions for y and z, want 1 shared", n)
	}
	ycancel()
	zcancel()
	<-yres
	<-zres
}

func TestWakeOnReleaseJoinsALiveChannelFirst(t *testing.T) {
	// With the channel already subscribed (it lingers after an earlier
	// wait), a request joins before its first attempt: its first wait
	// sleeps until the release message, without a second attempt at once,
	// and without any subscription change on the server.
	const fallback = 5 * time.Second
	e := newEnv(t)
	sim := newSim(true)
	acq := latchkit.Chain(sim.acquire, pubsub.WakeOnRelease(pubsub.WithLinger(time.Minute)), retry.Middleware(retry.Constant(fallback)))
	sim.freeAt = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// An earlier wait leaves rel:m lingering.
	first := lockAsync(ctx, acq, e.request("rel:m"))
	if sim.nextAttempt(wait) != 1 || sim.nextAttempt(wait) != 2 {
		t.Fatal("the first waiter did not subscribe and attempt again")
	}
	e.mustPublish(t, "rel:m", "1")
	if r := <-first; r.err != nil || sim.nextAttempt(wait) != 3 {
		t.Fatal("the first waiter was not granted at its third attempt", r.err)
	}
	calls := e.fb.subscribeCalls()

	sim.setHeld(true)
	sim.freeAt = 5
	res := lockAsync(ctx, acq, e.request("rel:m"))
	if sim.nextAttempt(wait) != 4 {
		t.Fatal("no first attempt")
	}
	if n := sim.nextAttempt(300 * time.Millisecond); n != 0 {
		t.Fatalf("attempt %d right after the first: the request should have joined the live channel and slept", n)
	}
	e.mustPublish(t, "rel:m", "1")
	if r := <-res; r.err != nil {
		t.Fatal(r.err)
	}
	if got := e.fb.subscribeCalls(); got != calls {
		t.Fatalf("%d Subscribe calls after the first wait's %d: a lingering channel needs none", got, calls)
	}
}
