package retry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/goleak"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeLease is what the fake attempt hands out on success.
type fakeLease struct{ name string }

func (l *fakeLease) Name() string                                { return l.name }
func (l *fakeLease) Token() string                               { return "00" }
func (l *fakeLease) Fence() int64                                { return 1 }
func (l *fakeLease) Context() context.Context                    { return context.Background() }
func (l *fakeLease) TTL(context.Context) (time.Duration, error)  { return time.Second, nil }
func (l *fakeLease) Extend(context.Context, time.Duration) error { return nil }
func (l *fakeLease) Release(context.Context) error               { return nil }

// attempt is a fake innermost Acquire: it counts attempts the way the
// primitives do (req.Attempts), fails with errs[i] on attempt i while there
// are errors left, and succeeds afterwards. hint, when set, is the WaitHint a
// failed attempt reports.
type attempt struct {
	mu    sync.Mutex
	errs  []error
	hint  time.Duration
	calls int
	lease *fakeLease
}

func (a *attempt) acquire(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	req.Attempts++
	a.calls++
	if len(a.errs) > 0 {
		err := a.errs[0]
		if err == errForever {
			err = latchkit.ErrNotAcquired // and stay at the head
		} else {
			a.errs = a.errs[1:]
		}
		req.WaitHint = a.hint
		return nil, err
	}
	req.WaitHint = 0
	if a.lease == nil {
		a.lease = &fakeLease{name: req.Name}
	}
	return a.lease, nil
}

func (a *attempt) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

// errForever, as an entry of attempt.errs, means ErrNotAcquired on every
// attempt from then on.
var errForever = errors.New("forever not acquired")

// notAcquired returns n ErrNotAcquired errors wrapped the way a primitive
// wraps them.
func notAcquired(n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = &latchkit.OpError{Op: "lock", Kind: latchkit.KindMutex, Name: "m", Err: latchkit.ErrNotAcquired}
	}
	return errs
}

func newReq() *latchkit.Request {
	return &latchkit.Request{Name: "m", Kind: latchkit.KindMutex, TTL: time.Second}
}

func TestExponentialDefaults(t *testing.T) {
	b := retry.Exponential()()
	eb, ok := b.(*backoff.ExponentialBackOff)
	if !ok {
		t.Fatalf("Exponential()() is %T, want *backoff.ExponentialBackOff", b)
	}
	if eb.InitialInterval != 5*time.Millisecond || eb.MaxInterval != 500*time.Millisecond ||
		eb.Multiplier != 2 || eb.RandomizationFactor != 0.5 || eb.MaxElapsedTime != 0 {
		t.Fatalf("defaults = initial %v max %v mult %v jitter %v maxElapsed %v",
			eb.InitialInterval, eb.MaxInterval, eb.Multiplier, eb.RandomizationFactor, eb.MaxElapsedTime)
	}
	// Delays grow by 2 from 5ms, capped at 500ms, each within ±50%, and the
	// policy never gives up on its own.
	interval := 5 * time.Millisecond
	for i := range 200 {
		d := b.NextBackOff()
		if d == backoff.Stop {
			t.Fatalf("delay %d: Stop; Exponential must never give up", i)
		}
		lo, hi := interval/2, interval*3/2
		if d < lo || d > hi {
			t.Fatalf("delay %d = %v, want in [%v, %v]", i, d, lo, hi)
		}
		interval = min(interval*2, 500*time.Millisecond)
	}
}

func TestExponentialOptions(t *testing.T) {
	p := retry.Exponential(
		retry.WithInitial(10*time.Millisecond),
		retry.WithMax(40*time.Millisecond),
		retry.WithMultiplier(3),
		retry.WithJitter(0),
	)
	want := []time.Duration{10, 30, 40, 40, 40}
	for run := range 2 { // every call of the policy starts afresh
		b := p()
		for i, w := range want {
			if d := b.NextBackOff(); d != w*time.Millisecond {
				t.Fatalf("run %d delay %d = %v, want %v", run, i, d, w*time.Millisecond)
			}
		}
		b.Reset()
		if d := b.NextBackOff(); d != 10*time.Millisecond {
			t.Fatalf("after Reset: %v, want 10ms", d)
		}
	}

	// Jitter draws from [d*(1-f), d*(1+f)].
	b := retry.Exponential(retry.WithInitial(100*time.Millisecond), retry.WithJitter(0.1), retry.WithMultiplier(1))()
	for range 100 {
		if d := b.NextBackOff(); d < 90*time.Millisecond || d > 110*time.Millisecond {
			t.Fatalf("jittered delay %v outside [90ms, 110ms]", d)
		}
	}
}

func TestConstant(t *testing.T) {
	b := retry.Constant(7 * time.Millisecond)()
	for range 10 {
		if d := b.NextBackOff(); d != 7*time.Millisecond {
			t.Fatalf("Constant(7ms) gave %v", d)
		}
	}
}

func TestMaxAttemptsPolicy(t *testing.T) {
	for _, n := range []int{-1, 0, 1, 2, 5} {
		b := retry.MaxAttempts(retry.Constant(time.Millisecond), n)()
		waits := 0
		for b.NextBackOff() != backoff.Stop {
			waits++
			if waits > 100 {
				t.Fatalf("n=%d: never stops", n)
			}
		}
		if want := max(n-1, 0); waits != want {
			t.Errorf("MaxAttempts(_, %d) allowed %d waits, want %d", n, waits, want)
		}
	}
}

func TestMaxElapsedPolicy(t *testing.T) {
	b := retry.MaxElapsed(retry.Constant(time.Hour), 50*time.Millisecond)()
	if d := b.NextBackOff(); d <= 0 || d > 50*time.Millisecond {
		t.Fatalf("first delay %v, want in (0, 50ms]: capped by the time left", d)
	}
	time.Sleep(60 * time.Millisecond)
	if d := b.NextBackOff(); d != backoff.Stop {
		t.Fatalf("after the limit: %v, want Stop", d)
	}
	b.Reset()
	if d := b.NextBackOff(); d == backoff.Stop {
		t.Fatal("Reset must restart the clock")
	}

	// A short delay passes through unchanged.
	b = retry.MaxElapsed(retry.Constant(time.Millisecond), time.Hour)()
	if d := b.NextBackOff(); d != time.Millisecond {
		t.Fatalf("delay %v, want 1ms", d)
	}
	// The wrapped policy giving up ends it too.
	b = retry.MaxElapsed(retry.MaxAttempts(retry.Constant(time.Millisecond), 1), time.Hour)()
	if d := b.NextBackOff(); d != backoff.Stop {
		t.Fatalf("delay %v, want Stop from the inner policy", d)
	}
}

func TestMiddlewareSucceedsAfterRetries(t *testing.T) {
	a := &attempt{errs: notAcquired(3)}
	acq := latchkit.Chain(a.acquire, retry.Middleware(retry.Constant(time.Millisecond)))
	req := newReq()
	l, err := acq(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if l != latchkit.Lease(a.lease) {
		t.Fatalf("lease = %v, want the attempt's", l)
	}
	if a.count() != 4 || req.Attempts != 4 {
		t.Fatalf("attempts = %d (req %d), want 4", a.count(), req.Attempts)
	}
}

func TestMiddlewareFirstAttemptSucceeds(t *testing.T) {
	a := &attempt{}
	acq := retry.Middleware(retry.Constant(time.Hour))(a.acquire)
	start := time.Now()
	if _, err := acq(context.Background(), newReq()); err != nil {
		t.Fatal(err)
	}
	if a.count() != 1 {
		t.Fatalf("attempts = %d, want 1", a.count())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("a first success took %v", el)
	}
}

func TestMiddlewareNilPolicyIsExponential(t *testing.T) {
	a := &attempt{errs: notAcquired(2)}
	acq := retry.Middleware(nil)(a.acquire)
	if _, err := acq(context.Background(), newReq()); err != nil {
		t.Fatal(err)
	}
	if a.count() != 3 {
		t.Fatalf("attempts = %d, want 3", a.count())
	}
}

func TestMiddlewareMaxAttempts(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			a := &attempt{errs: []error{errForever}}
			acq := retry.Middleware(retry.MaxAttempts(retry.Constant(time.Millisecond), n))(a.acquire)
			req := newReq()
			_, err := acq(context.Background(), req)
			if a.count() != n || req.Attempts != n {
				t.Fatalf("attempts = %d (req %d), want exactly %d", a.count(), req.Attempts, n)
			}
			if !errors.Is(err, latchkit.ErrNotAcquired) {
				t.Fatalf("err = %v, want ErrNotAcquired", err)
			}
			if want := fmt.Sprintf("gave up after %d attempts", n); !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %q, want it to say %q", err, want)
			}
		})
	}
}

func TestMiddlewareMaxElapsed(t *testing.T) {
	a := &attempt{errs: []error{errForever}}
	acq := retry.Middleware(retry.MaxElapsed(retry.Constant(5*time.Millisecond), 100*time.Millisecond))(a.acquire)
	start := time.Now()
	_, err := acq(context.Background(), newReq())
	el := time.Since(start)
	if !errors.Is(err, latchkit.ErrNotAcquired) || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("err = %v, want a give-up ErrNotAcquired", err)
	}
	if el < 90*time.Millisecond || el > 5*time.Second {
		t.Fatalf("gave up after %v, want about 100ms", el)
	}
	if a.count() < 2 {
		t.Fatalf("attempts = %d, want several", a.count())
	}
}

func TestMiddlewareTryMakesOneAttempt(t *testing.T) {
	a := &attempt{errs: []error{errForever}}
	w := &recordingWaiter{}
	acq := retry.Middleware(retry.Constant(time.Millisecond))(a.acquire)
	req := newReq()
	req.Try = true
	req.Waiter = w
	_, err := acq(context.Background(), req)
	if a.count() != 1 {
		t.Fatalf("Try made %d attempts, want 1", a.count())
	}
	if err != latchkit.ErrNotAcquired {
		t.Fatalf("err = %v, want ErrNotAcquired as the attempt returned it", err)
	}
	if len(w.calls()) != 0 {
		t.Fatal("Try must not wait")
	}
}

func TestMiddlewareOtherErrorsStop(t *testing.T) {
	boom := errors.New("boom")
	t.Run("first attempt", func(t *testing.T) {
		a := &attempt{errs: []error{boom}}
		_, err := retry.Middleware(retry.Constant(time.Millisecond))(a.acquire)(context.Background(), newReq())
		if err != boom || a.count() != 1 {
			t.Fatalf("err = %v after %d attempts, want boom after 1", err, a.count())
		}
	})
	t.Run("later attempt", func(t *testing.T) {
		a := &attempt{errs: append(notAcquired(2), boom)}
		_, err := retry.Middleware(retry.Constant(time.Millisecond))(a.acquire)(context.Background(), newReq())
		if err != boom || a.count() != 3 {
			t.Fatalf("err = %v after %d attempts, want boom after 3", err, a.count())
		}
	})
	t.Run("lease lost", func(t *testing.T) {
		lost := fmt.Errorf("wrapped: %w", latchkit.ErrLeaseLost)
		a := &attempt{errs: []error{lost}}
		_, err := retry.Middleware(nil)(a.acquire)(context.Background(), newReq())
		if !errors.Is(err, latchkit.ErrLeaseLost) || a.count() != 1 {
			t.Fatalf("err = %v after %d attempts", err, a.count())
		}
	})
}

func TestMiddlewareContext(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		a := &attempt{errs: []error{errForever}}
		acq := retry.Middleware(retry.Constant(time.Hour))(a.acquire)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := acq(ctx, newReq())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("returned after %v; the deadline was 50ms and the delay 1h", el)
		}
		if a.count() != 1 {
			t.Fatalf("attempts = %d, want 1", a.count())
		}
	})
	t.Run("cancel", func(t *testing.T) {
		a := &attempt{errs: []error{errForever}}
		acq := retry.Middleware(retry.Constant(time.Hour))(a.acquire)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		_, err := acq(ctx, newReq())
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want Canceled", err)
		}
	})
	t.Run("deadline with waiter", func(t *testing.T) {
		a := &attempt{errs: []error{errForever}}
		acq := retry.Middleware(retry.Constant(time.Hour))(a.acquire)
		req := newReq()
		req.Waiter = &sleepingWaiter{}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := acq(ctx, req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("returned after %v", el)
		}
	})
}

func TestMiddlewareWaitHintShortensSleep(t *testing.T) {
	// The policy would sleep 10s between attempts; the holder's TTL says
	// 10ms. Four attempts must take a small fraction of one policy delay.
	const fallback = 10 * time.Second
	a := &attempt{errs: notAcquired(3), hint: 10 * time.Millisecond}
	acq := retry.Middleware(retry.Constant(fallback))(a.acquire)
	start := time.Now()
	if _, err := acq(context.Background(), newReq()); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if el > fallback/4 {
		t.Fatalf("took %v: WaitHint did not shorten the sleep", el)
	}
	if el < 3*10*time.Millisecond {
		t.Fatalf("took %v: three waits of 10ms cannot be shorter than 30ms", el)
	}

	// A hint longer than the policy's delay does not lengthen it.
	a = &attempt{errs: notAcquired(2), hint: time.Hour}
	acq = retry.Middleware(retry.Constant(time.Millisecond))(a.acquire)
	start = time.Now()
	if _, err := acq(context.Background(), newReq()); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v: a long WaitHint lengthened the sleep", el)
	}
}

// recordingWaiter records every call and returns at once.
type recordingWaiter struct {
	mu  sync.Mutex
	log []waitCall
	err error // returned from the call numbered failAt (1-based), if set
	at  int
}

type waitCall struct {
	req      *latchkit.Request
	fallback time.Duration
	attempts int
}

func (w *recordingWaiter) Wait(ctx context.Context, req *latchkit.Request, fallback time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, waitCall{req: req, fallback: fallback, attempts: req.Attempts})
	if w.err != nil && len(w.log) == w.at {
		return w.err
	}
	return nil
}

func (w *recordingWaiter) calls() []waitCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]waitCall(nil), w.log...)
}

// sleepingWaiter sleeps for the fallback, or until ctx is done.
type sleepingWaiter struct{}

func (sleepingWaiter) Wait(ctx context.Context, _ *latchkit.Request, fallback time.Duration) error {
	return retry.Sleep(ctx, fallback)
}

func TestMiddlewareCallsWaiter(t *testing.T) {
	// The policy's delay is an hour: had the middleware slept by itself
	// instead of through the Waiter, the test would hang.
	w := &recordingWaiter{}
	a := &attempt{errs: notAcquired(4), hint: 3 * time.Millisecond}
	acq := retry.Middleware(retry.Constant(time.Hour))(a.acquire)
	req := newReq()
	req.Waiter = w
	done := make(chan error, 1)
	go func() { _, err := acq(context.Background(), req); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the middleware slept instead of calling the Waiter")
	}
	calls := w.calls()
	if len(calls) != 4 || a.count() != 5 {
		t.Fatalf("%d waits for %d attempts, want 4 waits between 5 attempts", len(calls), a.count())
	}
	for i, c := range calls {
		if c.req != req {
			t.Errorf("wait %d got another request", i)
		}
		// The policy's delay is the fallback, even with a WaitHint set:
		// bounding by the hint is the Waiter's business.
		if c.fallback != time.Hour {
			t.Errorf("wait %d fallback = %v, want the policy's 1h", i, c.fallback)
		}
		if c.attempts != i+1 {
			t.Errorf("wait %d came after %d attempts, want %d", i, c.attempts, i+1)
		}
	}
}

func TestMiddlewareWaiterFallbackFollowsPolicy(t *testing.T) {
	w := &recordingWaiter{}
	a := &attempt{errs: notAcquired(3)}
	p := retry.Exponential(retry.WithInitial(time.Second), retry.WithMultiplier(2), retry.WithJitter(0), retry.WithMax(3*time.Second))
	req := newReq()
	req.Waiter = w
	if _, err := retry.Middleware(p)(a.acquire)(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for _, c := range w.calls() {
		got = append(got, c.fallback)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fallbacks = %v, want %v", got, want)
	}
}

func TestMiddlewareWaiterError(t *testing.T) {
	werr := fmt.Errorf("waiter: %w", context.DeadlineExceeded)
	w := &recordingWaiter{err: werr, at: 2}
	a := &attempt{errs: []error{errForever}}
	req := newReq()
	req.Waiter = w
	_, err := retry.Middleware(retry.Constant(time.Millisecond))(a.acquire)(context.Background(), req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the Waiter's error", err)
	}
	if a.count() != 2 {
		t.Fatalf("attempts = %d, want 2 (the second wait failed)", a.count())
	}
}

func TestMiddlewareWaiterWithMaxAttempts(t *testing.T) {
	w := &recordingWaiter{}
	a := &attempt{errs: []error{errForever}}
	req := newReq()
	req.Waiter = w
	_, err := retry.Middleware(retry.MaxAttempts(retry.Constant(time.Hour), 3))(a.acquire)(context.Background(), req)
	if !errors.Is(err, latchkit.ErrNotAcquired) || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Fatalf("err = %v", err)
	}
	if n := len(w.calls()); n != 2 {
		t.Fatalf("waits = %d, want 2", n)
	}
}

func TestSleep(t *testing.T) {
	if err := retry.Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
	if err := retry.Sleep(context.Background(), -time.Second); err != nil {
		t.Fatalf("Sleep(-1s) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := retry.Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(done ctx, 0) = %v", err)
	}
	start := time.Now()
	if err := retry.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(done ctx, 1h) = %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Sleep on a done ctx took %v", el)
	}
	start = time.Now()
	if err := retry.Sleep(context.Background(), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("Sleep(20ms) returned after %v", el)
	}
}

// ExampleMiddleware retries a lock that is held for the first two attempts.
func ExampleMiddleware() {
	held := 2
	attempt := func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		req.Attempts++
		if held > 0 {
			held--
			return nil, latchkit.ErrNotAcquired
		}
		return &fakeLease{name: req.Name}, nil
	}
	acquire := latchkit.Chain(attempt, retry.Middleware(retry.MaxAttempts(retry.Constant(time.Millisecond), 5)))

	req := &latchkit.Request{Name: "orders", Kind: latchkit.KindMutex, TTL: time.Second}
	lease, err := acquire(context.Background(), req)
	fmt.Println(lease.Name(), err, "after", req.Attempts, "attempts")

	// Try requests make one attempt, whatever the policy.
	held = 1
	req = &latchkit.Request{Name: "orders", Kind: latchkit.KindMutex, TTL: time.Second, Try: true}
	_, err = acquire(context.Background(), req)
	fmt.Println(err, "after", req.Attempts, "attempt")

	// A policy that gives up says so.
	held = 10
	req = &latchkit.Request{Name: "orders", Kind: latchkit.KindMutex, TTL: time.Second}
	_, err = acquire(context.Background(), req)
	fmt.Println(err)
	// Output:
	// orders <nil> after 3 attempts
	// latchkit: not acquired after 1 attempt
	// gave up after 5 attempts: latchkit: not acquired
}

// An attempt that could not reach Redis is retried on the policy's delay,
// never through the Waiter (no release can be expected), and a Try request
// still makes one attempt.
func TestMiddlewareRetriesUnavailable(t *testing.T) {
	unavailable := &backend.Error{Kind: backend.ErrUnavailable, Cause: errors.New("connection refused")}
	attempts := 0
	next := func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		req.Attempts++
		attempts++
		if attempts < 3 {
			return nil, unavailable
		}
		return nil, nil
	}
	w := &refusingWaiter{t: t}
	req := &latchkit.Request{Name: "u", Waiter: w}
	if _, err := retry.Middleware(retry.Constant(time.Millisecond))(next)(context.Background(), req); err != nil {
		t.Fatalf("err %v after %d attempts", err, attempts)
	}
	if attempts != 3 {
		t.Errorf("%d attempts, want 3", attempts)
	}

	attempts = 0
	_, err := retry.Middleware(retry.Constant(time.Millisecond))(next)(context.Background(), &latchkit.Request{Try: true})
	if !errors.Is(err, backend.ErrUnavailable) || attempts != 1 {
		t.Errorf("Try: %v after %d attempts, want ErrUnavailable after 1", err, attempts)
	}

	// When ctx ends the wait, the error carries both.
	always := func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) { return nil, unavailable }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = retry.Middleware(retry.Constant(5*time.Millisecond))(always)(ctx, &latchkit.Request{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("ctx ended: %v, want DeadlineExceeded and ErrUnavailable", err)
	}
}

// refusingWaiter fails the test if it is asked to wait.
type refusingWaiter struct{ t *testing.T }

func (w *refusingWaiter) Wait(context.Context, *latchkit.Request, time.Duration) error {
	w.t.Error("waited for a release after an unavailable attempt")
	return nil
}
