package kit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/retry"
)

// The wait loop (Config.Wait) on a scripted acquisition, without Redis:
// each attempt returns the next of a list of outcomes.

type okLease struct{ latchkit.Lease }

// script is an acquisition whose attempts return outcomes in turn (the
// last one forever), recording what the loop did.
type script struct {
	mu       sync.Mutex
	outcomes []error // nil: granted
	tokens   map[string]bool
	attempts int
	nums     []int
	gave     atomic.Int32 // give-back calls
	giveErr  func(n int32) error
	giveWait time.Duration // how long the first give-back hangs (bounded by its ctx)
}

var errUnreachable = &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("connection refused")}

func held(hint time.Duration) error { return &latchkit.HeldError{WaitHint: hint, Holder: "h"} }

func (s *script) acquisition(try, queues bool) Acquisition {
	return Acquisition{Op: "lock", Kind: latchkit.KindMutex, Name: "m", Try: try, Queues: queues,
		Attempt: func(ctx context.Context, at *Attempt) (latchkit.Lease, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.tokens == nil {
				s.tokens = map[string]bool{}
			}
			s.tokens[at.Token] = true
			s.nums = append(s.nums, at.N)
			s.attempts++
			i := min(s.attempts, len(s.outcomes)) - 1
			if err := s.outcomes[i]; err != nil {
				return nil, err
			}
			return okLease{}, nil
		},
		GiveBack: func(ctx context.Context, token string) error {
			n := s.gave.Add(1)
			if s.giveWait > 0 && n == 1 {
				select {
				case <-time.After(s.giveWait):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if s.giveErr != nil {
				return s.giveErr(n)
			}
			return nil
		}}
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// loopConfig is the config of a primitive whose attempts are scripted
// (its Client's backend is called only for the Client's record, which
// it accepts).
func loopConfig(p retry.Policy) *Config {
	cl, err := NewClient(recordOnly{}, ClientOptions{})
	if err != nil {
		panic(err)
	}
	return &Config{Cl: cl, Cls: []*Client{cl}, TTL: time.Second, Retry: p, WaiterTimeout: DefaultWaiterTimeout}
}

// recordOnly is a backend that answers only Eval, with nil: the
// Client's record writes (identity.go).
type recordOnly struct{ backend.Backend }

func (recordOnly) Eval(context.Context, *backend.Script, []string, []string) (backend.Value, error) {
	return nil, nil
}

func run(ctx context.Context, c *Config, a Acquisition) (latchkit.Lease, *latchkit.Request, error) {
	req := &latchkit.Request{Name: a.Name, Kind: a.Kind, Try: a.Try}
	var seen []int
	req.OnAttempt = func(n int, err error) { seen = append(seen, n) }
	l, err := c.Wait(ctx, req, &a)
	for i, n := range seen {
		if n != i+1 {
			panic(fmt.Sprintf("OnAttempt saw attempt %d as number %d", i+1, n))
		}
	}
	return l, req, err
}

func TestWaitSucceedsAfterRetries(t *testing.T) {
	s := &script{outcomes: []error{held(0), held(0), held(0), nil}}
	l, _, err := run(context.Background(), loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, false))
	if err != nil || l == nil {
		t.Fatalf("lease %v err %v", l, err)
	}
	if s.count() != 4 || len(s.tokens) != 1 {
		t.Fatalf("%d attempts with %d tokens, want 4 with one token", s.count(), len(s.tokens))
	}
	if s.gave.Load() != 0 {
		t.Errorf("%d give-backs after a grant", s.gave.Load())
	}
}

func TestWaitPolicyGivesUp(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := &script{outcomes: []error{held(0)}}
			_, _, err := run(context.Background(), loopConfig(retry.MaxAttempts(retry.Constant(time.Millisecond), n)), s.acquisition(false, false))
			if s.count() != n {
				t.Fatalf("%d attempts, want %d", s.count(), n)
			}
			var h *latchkit.HeldError
			if !errors.Is(err, latchkit.ErrNotAcquired) || !errors.As(err, &h) || h.Holder != "h" {
				t.Fatalf("err = %v, want the last attempt's HeldError", err)
			}
			if want := map[int]string{1: "gave up after 1 attempt:", 2: "gave up after 2 attempts:", 4: "gave up after 4 attempts:"}[n]; !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %q, want it to say %q", err, want)
			}
			if s.gave.Load() != 0 {
				t.Errorf("%d give-backs: every attempt was refused, and the primitive does not queue", s.gave.Load())
			}
		})
	}
	s := &script{outcomes: []error{held(0)}}
	start := time.Now()
	_, _, err := run(context.Background(), loopConfig(retry.MaxElapsed(retry.Constant(5*time.Millisecond), 100*time.Millisecond)), s.acquisition(false, false))
	if !strings.Contains(fmt.Sprint(err), "gave up after") || time.Since(start) < 90*time.Millisecond || s.count() < 2 {
		t.Fatalf("MaxElapsed: %v after %v and %d attempts", err, time.Since(start), s.count())
	}
}

func TestWaitTryMakesOneAttempt(t *testing.T) {
	s := &script{outcomes: []error{held(time.Hour)}}
	start := time.Now()
	_, _, err := run(context.Background(), loopConfig(retry.Constant(time.Hour)), s.acquisition(true, true))
	if s.count() != 1 || !errors.Is(err, latchkit.ErrNotAcquired) || time.Since(start) > time.Second {
		t.Fatalf("Try: %v after %d attempts and %v", err, s.count(), time.Since(start))
	}
	if s.gave.Load() != 0 {
		t.Error("a Try refused by the server gave back: it holds and queues nothing")
	}
}

func TestWaitOtherErrorsStop(t *testing.T) {
	wrong := fmt.Errorf("%w: WRONGTYPE", latchkit.ErrInvalid)
	for name, outcomes := range map[string][]error{
		"first":             {wrong},
		"later":             {held(0), held(0), wrong},
		"bad reply":         {held(0), BadReply("x")},
		"closed client":     {&backend.Error{Class: backend.ErrClosed, Cause: errors.New("closed")}},
		"lease lost on try": {fmt.Errorf("wrapped: %w", latchkit.ErrLeaseLost)},
	} {
		t.Run(name, func(t *testing.T) {
			s := &script{outcomes: outcomes}
			_, _, err := run(context.Background(), loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, false))
			if s.count() != len(outcomes) || !errors.Is(err, outcomes[len(outcomes)-1]) {
				t.Fatalf("%v after %d attempts, want the last outcome after %d", err, s.count(), len(outcomes))
			}
		})
	}
}

// TestWaitRetriesNotReplicated: a grant that WAIT did not confirm on
// enough replicas (given back) is tried again by a waiting acquisition, as
// an unreachable Redis is: a replica that acknowledged late (a busy
// machine, a replica catching up after a resync) must not end a Lock that
// still has time. A Try returns it at once, and a waiting one that runs
// out of time says it was the last attempt's outcome. (Before, Lock
// returned the first latchkit.ErrNotReplicated: TestReshardReplicaAck failed in CI
// with a 10 s Lock refused after 617 ms.)
func TestWaitRetriesNotReplicated(t *testing.T) {
	notAcked := fmt.Errorf("%w: WAIT confirmed 0 of 1 replicas within 200ms; the grant was released", latchkit.ErrNotReplicated)
	s := &script{outcomes: []error{notAcked, notAcked, nil}}
	if _, _, err := run(context.Background(), loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, false)); err != nil || s.count() != 3 {
		t.Fatalf("Lock: %v after %d attempts, want granted at the third", err, s.count())
	}
	s = &script{outcomes: []error{notAcked, nil}}
	if _, _, err := run(context.Background(), loopConfig(retry.Constant(time.Millisecond)), s.acquisition(true, false)); !errors.Is(err, latchkit.ErrNotReplicated) || s.count() != 1 {
		t.Fatalf("TryLock: %v after %d attempts, want latchkit.ErrNotReplicated after one", err, s.count())
	}
	s = &script{outcomes: []error{notAcked}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, _, err := run(ctx, loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, false))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, latchkit.ErrNotReplicated) || s.count() < 2 {
		t.Fatalf("Lock until its deadline: %v after %d attempts, want DeadlineExceeded and latchkit.ErrNotReplicated after several", err, s.count())
	}
}

// TestWaitDeadlineMidAttemptSaysWhy: when the caller's deadline cuts an
// attempt short (the driver's call abandoned: Redis unavailable for all
// the loop knows), the error still matches what refused the attempts
// before it, held (ErrNotAcquired, with its HeldError) or not replicated,
// beside the context's error, so that a caller can tell "it was held until
// my deadline" from "Redis was down throughout".
func TestWaitDeadlineMidAttemptSaysWhy(t *testing.T) {
	for name, refusal := range map[string]error{
		"held":           held(time.Hour),
		"not replicated": fmt.Errorf("%w: WAIT confirmed 0 of 1", latchkit.ErrNotReplicated),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			n := 0
			a := Acquisition{Op: "lock", Kind: latchkit.KindMutex, Name: "m",
				Attempt: func(ctx context.Context, at *Attempt) (latchkit.Lease, error) {
					if n++; n == 1 {
						return nil, refusal
					}
					<-ctx.Done() // cut short by the caller's deadline
					return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: ctx.Err()}
				}}
			_, _, err := run(ctx, loopConfig(retry.Constant(time.Millisecond)), a)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, refusal) {
				t.Fatalf("%v after %d attempts, want it to match DeadlineExceeded, ErrUnavailable and the first attempt's refusal", err, n)
			}
		})
	}
	// Without an earlier refusal it says only what happened.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	s := &script{outcomes: []error{errUnreachable}}
	_, _, err := run(ctx, loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, false))
	if errors.Is(err, latchkit.ErrNotAcquired) || errors.Is(err, latchkit.ErrNotReplicated) {
		t.Fatalf("%v: Redis was never reached, nothing refused", err)
	}
}

func TestWaitRetriesUnavailable(t *testing.T) {
	s := &script{outcomes: []error{errUnreachable, errUnreachable, nil}}
	if _, _, err := run(context.Background(), loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, false)); err != nil || s.count() != 3 {
		t.Fatalf("%v after %d attempts", err, s.count())
	}
	// An attempt that could not reach Redis may have been granted: the
	// acquisition that ends without a grant gives it back, Try included.
	for _, try := range []bool{true, false} {
		s := &script{outcomes: []error{errUnreachable, held(0)}}
		_, _, err := run(context.Background(), loopConfig(retry.MaxAttempts(retry.Constant(time.Millisecond), 2)), s.acquisition(try, false))
		if !errors.Is(err, backend.ErrUnavailable) && !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatal(err)
		}
		if s.gave.Load() != 1 {
			t.Errorf("try=%v: %d give-backs after an attempt of unknown outcome, want 1", try, s.gave.Load())
		}
	}
}

func TestWaitContext(t *testing.T) {
	s := &script{outcomes: []error{held(0)}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := run(ctx, loopConfig(retry.Constant(time.Hour)), s.acquisition(false, true))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("err = %v, want both DeadlineExceeded and ErrNotAcquired", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("returned %v after the start, deadline 50ms", el)
	}
	if s.gave.Load() != 1 {
		t.Errorf("%d give-backs of a waiting Lock that may have queued, want 1", s.gave.Load())
	}

	// The attempt in flight when the deadline passes fails with the
	// driver's own error (an I/O timeout, say), a moment before the
	// context's timer fires: the error still says the caller gave up.
	s = &script{outcomes: []error{errUnreachable}}
	_, _, err = run(pastDeadline{context.Background()}, loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, false))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("err = %v, want DeadlineExceeded (and the attempt's ErrUnavailable)", err)
	}
	if s.count() != 1 || s.gave.Load() != 1 {
		t.Errorf("%d attempts and %d give-backs past the deadline, want 1 and 1", s.count(), s.gave.Load())
	}
}

// pastDeadline is a context whose deadline has passed but whose timer has
// not fired yet: Err is still nil.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

func TestWaitHintShortensSleep(t *testing.T) {
	s := &script{outcomes: []error{held(20 * time.Millisecond), held(20 * time.Millisecond), nil}}
	start := time.Now()
	if _, _, err := run(context.Background(), loopConfig(retry.Constant(time.Hour)), s.acquisition(false, false)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v: the holder's remaining 20ms should bound the 1h delay", el)
	}
}

// A give-back is waited for at most giveBackTimeout; while Redis cannot be
// reached it is retried in the background.
func TestWaitGiveBackBounded(t *testing.T) {
	s := &script{outcomes: []error{held(0)}, giveWait: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := run(ctx, loopConfig(retry.Constant(time.Hour)), s.acquisition(false, true))
	if el := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || el > 20*time.Millisecond+GiveBackTimeout+time.Second {
		t.Fatalf("%v after %v: a hung give-back held the caller past deadline + %v", err, el, GiveBackTimeout)
	}
	for deadline := time.Now().Add(5 * time.Second); s.gave.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the give-back that timed out was not tried again in the background (%d calls)", s.gave.Load())
		}
	}

	s = &script{outcomes: []error{held(0)}, giveErr: func(n int32) error {
		if n <= 3 {
			return errUnreachable
		}
		return nil
	}}
	if _, _, err := run(context.Background(), loopConfig(retry.MaxAttempts(retry.Constant(time.Millisecond), 1)), s.acquisition(false, true)); err == nil {
		t.Fatal("granted")
	}
	for deadline := time.Now().Add(5 * time.Second); s.gave.Load() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d give-backs, want 3 failures then a success", s.gave.Load())
		}
	}
}

// A give-back whose one try ran out of time because this process was not
// scheduled (its timer, or the driver's goroutine, ran far past the
// try's deadline) is tried again before the call returns: the budget is for
// waiting on Redis, and a starved process's give-back left to the
// background would return the call while its grant is still held. (Seen
// in TestLinearizable beside busy processes: a 570 ms stall, every failed
// Lock returning with its hand-over still held, and the next TryLocks
// refused by a grant nobody had.)
func TestWaitGiveBackAfterStall(t *testing.T) {
	stall := StarvedGiveBack + GiveBackTimeout
	s := &script{outcomes: []error{errUnreachable, held(0)}, giveErr: func(n int32) error {
		if n == 1 {
			time.Sleep(stall) // not scheduled: the try returns late, its budget spent
			return fmt.Errorf("give-back: %w", context.DeadlineExceeded)
		}
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := run(ctx, loopConfig(retry.Constant(time.Millisecond)), s.acquisition(false, true))
	el := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want DeadlineExceeded", err)
	}
	if n := s.gave.Load(); n != 2 {
		t.Fatalf("%d give-back tries when the call returned, want 2: the try that the stall ran out of time was left to the background", n)
	}
	if el > 20*time.Millisecond+stall+GiveBackTimeout+time.Second {
		t.Fatalf("returned after %v", el)
	}

	// Against a Redis that does not answer, the try ends on time, and the
	// rest is left to the background: the call is not held up further.
	var mu sync.Mutex
	var tries []time.Time
	s = &script{outcomes: []error{held(0)}, giveErr: func(int32) error {
		mu.Lock()
		tries = append(tries, time.Now())
		mu.Unlock()
		return errUnreachable
	}}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, _, err := run(ctx2, loopConfig(retry.Constant(time.Hour)), s.acquisition(false, true)); err == nil {
		t.Fatal("granted")
	}
	returned := time.Now()
	mu.Lock()
	defer mu.Unlock()
	if n := len(tries); n == 0 || (n > 1 && tries[1].Before(returned)) {
		t.Fatalf("%d give-back tries, the second before the call returned, against an unreachable Redis: want 1 before the call returns", n)
	}
}

// lateTimer is a context whose deadline has passed while its timer has
// not fired yet: Err is nil until Done closes, a little later (a busy
// machine runs timers late).
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// A call that gives up because its deadline passed returns once its
// context says so too: a caller checking ctx.Err() after the call (as
// `if err != nil && ctx.Err() == nil` does) sees it done, as the error
// says. (The demo's traders reported their own deadline as a failure.)
func TestWaitGivesUpWithTheContext(t *testing.T) {
	for _, try := range []bool{false, true} {
		base, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		ctx := lateTimer{base, time.Now().Add(-time.Millisecond)}
		s := &script{outcomes: []error{errUnreachable}}
		_, _, err := run(ctx, loopConfig(retry.Constant(time.Millisecond)), s.acquisition(try, false))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("try=%v: %v, want DeadlineExceeded", try, err)
		}
		if ctx.Err() == nil {
			t.Errorf("try=%v: returned %v while the context's Err was still nil", try, err)
		}
		cancel()
	}
}
