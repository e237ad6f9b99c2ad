package pubsub_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/pubsub"
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

// lockSim is an in-memory mutex standing in for a primitive: an attempt
// fails with a *latchkit.HeldError (and the configured hint) while it is
// held. It records when each attempt was made.
type lockSim struct {
	mu       sync.Mutex
	held     bool
	hint     time.Duration
	freeAt   int // when > 0, the attempt with this number finds it free
	attempts []time.Time
	attemptC chan int
	// before, when set, runs at the start of every attempt with the
	// caller's name and the number of attempts it made before.
	before func(name string, made int)
}

func newSim(held bool) *lockSim {
	return &lockSim{held: held, attemptC: make(chan int, 1000)}
}

func (s *lockSim) attempt(name string, made int) (latchkit.Lease, error) {
	if s.before != nil {
		s.before(name, made)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts, time.Now())
	n := len(s.attempts)
	s.attemptC <- n
	if s.held && n != s.freeAt {
		return nil, &latchkit.HeldError{WaitHint: s.hint}
	}
	s.held = true
	return &fakeLease{name: name}, nil
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

// waitFunc is one waiting acquisition named name, woken by releases on
// channel.
type waitFunc func(ctx context.Context, name, channel string) (latchkit.Lease, error)

// loop is the shape of the primitives' wait loop, reduced to what a Wake is
// for: attempt until granted, waiting through a Wake of h between attempts
// that found the primitive held, the policy's delay as the fallback. (Tests
// give h no linger unless they need one: they check that channels go.)
func loop(h *pubsub.Hub, s *lockSim, p retry.Policy) waitFunc {
	return func(ctx context.Context, name, channel string) (latchkit.Lease, error) {
		k := pubsub.NewWake(h, "", []string{channel})
		defer k.Close()
		policy := p()
		for made := 0; ; made++ {
			l, err := s.attempt(name, made)
			var held *latchkit.HeldError
			if !errors.As(err, &held) {
				return l, err
			}
			d := policy.NextBackOff()
			if d == backoff.Stop {
				return nil, err
			}
			if werr := k.Wait(ctx, held.WaitHint, d); werr != nil {
				return nil, werr
			}
		}
	}
}

type lockResult struct {
	l   latchkit.Lease
	err error
}

func lockAsync(ctx context.Context, acq waitFunc, name, channel string) <-chan lockResult {
	res := make(chan lockResult, 1)
	go func() {
		l, err := acq(ctx, name, channel)
		res <- lockResult{l, err}
	}()
	return res
}

func TestWakeEndsOnMessage(t *testing.T) {
	const fallback = 5 * time.Second
	e := newEnv(t)
	sim := newSim(true)
	ctx, cancel := context.WithCancel(context.Background())
	h := e.hub(t, 0) // the Hub the waiter uses
	res := lockAsync(ctx, loop(h, sim, retry.Constant(fallback)), "m", "rel:m")
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
	// The waiter left: the channel is unsubscribed and the Hub's connection
	// closed.
	eventually(t, "unsubscribed and closed", func() bool {
		return len(e.m.PubSubChannels("")) == 0 && len(e.fb.live()) == 0
	})
	if n := e.fb.subscribeCalls(); n != 1 {
		t.Fatalf("%d Subscribe calls, want 1", n)
	}
}

func TestWakeEndsOnWaitHint(t *testing.T) {
	const fallback, hint = 10 * time.Second, 150 * time.Millisecond
	e := newEnv(t)
	sim := newSim(true)
	sim.hint = hint
	sim.freeAt = 3 // the holder's lease runs out, nobody publishes
	_, err := loop(e.hub(t, 0), sim, retry.Constant(fallback))(context.Background(), "m", "rel:m")
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

func TestWakeEndsOnContext(t *testing.T) {
	const fallback = 10 * time.Second
	e := newEnv(t)
	sim := newSim(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := loop(e.hub(t, 0), sim, retry.Constant(fallback))(ctx, "m", "rel:m")
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

func TestWakeNotLiveFallsBack(t *testing.T) {
	e := newEnv(t)
	e.fb.fail(-1, nil) // the server never accepts a subscription
	h := e.hub(t, 0)
	t.Run("policy delay", func(t *testing.T) {
		sim := newSim(true)
		sim.freeAt = 6
		start := time.Now()
		if _, err := loop(h, sim, retry.Constant(20*time.Millisecond))(context.Background(), "m", "rel:a"); err != nil {
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
		if _, err := loop(h, sim, retry.Constant(fallback))(context.Background(), "m", "rel:b"); err != nil {
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

func TestWakeHandoff(t *testing.T) {
	// Several lockers contend for one mutex; each release publishes "1".
	// The policy alone would sleep 10s between attempts: all of them must
	// get through far sooner, each release waking the next waiter, none
	// swallowed.
	const fallback, lockers = 10 * time.Second, 8
	e := newEnv(t)
	sim := newSim(false)
	acq := loop(e.hub(t, 0), sim, retry.Constant(fallback))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, lockers)
	for range lockers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*fallback)
			defer cancel()
			if _, err := acq(ctx, "m", "rel:m"); err != nil {
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

func TestWakeSharesOneSubscription(t *testing.T) {
	// A waiter makes its Wake while the Hub has another waiter; that one
	// leaves (the Hub has no channel left and closes its connection)
	// before the first attempt has failed. The waiter's first wait must
	// then bring the same Hub back up, and a later waiter share that new
	// subscription: one subscription per Hub, woken by a release.
	e := newEnv(t)
	sim := newSim(true)
	gate := make(chan struct{})
	entered := make(chan struct{})
	sim.before = func(name string, made int) {
		if name == "y" && made == 0 {
			close(entered)
			<-gate
		}
	}
	acq := loop(e.hub(t, 0), sim, retry.Constant(10*time.Second))

	// x waits on another channel: were it rel:m, y would join x's live
	// channel before its first attempt, and the Hub could not go idle.
	xctx, xcancel := context.WithCancel(context.Background())
	xres := lockAsync(xctx, acq, "x", "rel:x")
	eventually(t, "x subscribed", func() bool { return e.m.PubSubNumSub("rel:x")["rel:x"] == 1 })

	yctx, ycancel := context.WithCancel(context.Background())
	defer ycancel()
	yres := lockAsync(yctx, acq, "y", "rel:m")
	<-entered // y has made its Wake, and is in its first attempt

	xcancel() // x gives up and leaves: the Hub is idle
	if r := <-xres; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("x: %v", r.err)
	}
	eventually(t, "x's subscription closed", func() bool {
		return len(e.m.PubSubChannels("")) == 0 && len(e.fb.live()) == 0
	})

	close(gate) // y's attempt fails; y's first wait subscribes, y attempts again
	eventually(t, "y subscribed", func() bool {
		return e.m.PubSubNumSub("rel:m")["rel:m"] == 1 && len(sim.attemptTimes()) >= 4
	})
	// z comes once rel:m is live again: it joins y's subscription before
	// its first attempt. (Started any earlier, it could find rel:m live or
	// not, and make one attempt more or less.)
	zctx, zcancel := context.WithCancel(context.Background())
	defer zcancel()
	zres := lockAsync(zctx, acq, "z", "rel:m")
	eventually(t, "z's first attempt", func() bool { return len(sim.attemptTimes()) >= 5 })
	time.Sleep(50 * time.Millisecond)
	if n := e.m.PubSubNumSub("rel:m")["rel:m"]; n != 1 {
		t.Fatalf("%d subscriptions for y and z, want 1 shared", n)
	}
	if n := e.fb.subscribeCalls(); n != 2 {
		t.Fatalf("%d Subscribe calls, want 2: x's, then one for y and z", n)
	}
	// Both sleep on it, and a release wakes both.
	made := len(sim.attemptTimes())
	e.mustPublish(t, "rel:m", pubsub.WakeAll)
	eventually(t, "y and z woken", func() bool { return len(sim.attemptTimes()) >= made+2 })
	ycancel()
	zcancel()
	<-yres
	<-zres
}

func TestWakeJoinsALiveChannelFirst(t *testing.T) {
	// With the channel already subscribed (it lingers after an earlier
	// wait), a request joins before its first attempt: its first wait
	// sleeps until the release message, without a second attempt at once,
	// and without any subscription change on the server.
	const fallback = 5 * time.Second
	e := newEnv(t)
	sim := newSim(true)
	acq := loop(e.hub(t, time.Minute), sim, retry.Constant(fallback))
	sim.freeAt = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// An earlier wait leaves rel:m lingering.
	first := lockAsync(ctx, acq, "m", "rel:m")
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
	res := lockAsync(ctx, acq, "m", "rel:m")
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
