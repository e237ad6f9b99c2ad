package retry

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy makes a fresh backoff for one logical acquisition. backoff.Stop
// from the backoff ends the waiting with ErrNotAcquired.
type Policy func() backoff.BackOff

// Exponential is the default policy: delays growing from 5ms by a factor of
// 2 up to 500ms, each randomized by ±50%, never giving up on its own (the
// caller's context bounds the wait). Another shape is a Policy of its own
// over backoff's options:
//
//	func() backoff.BackOff {
//		return backoff.NewExponentialBackOff(backoff.WithMaxInterval(50*time.Millisecond), backoff.WithMaxElapsedTime(0))
//	}
func Exponential() Policy {
	return func() backoff.BackOff {
		return backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(5*time.Millisecond),
			backoff.WithMaxInterval(500*time.Millisecond),
			backoff.WithMultiplier(2),
			backoff.WithRandomizationFactor(0.5),
			backoff.WithMaxElapsedTime(0))
	}
}

// Constant waits d between attempts (none for a negative d).
func Constant(d time.Duration) Policy {
	d = max(d, 0)
	return func() backoff.BackOff { return backoff.NewConstantBackOff(d) }
}

// MaxAttempts limits p to n attempts in all (n-1 waits). It is nil for a
// nil p (which primitives.WithRetry refuses).
func MaxAttempts(p Policy, n int) Policy {
	if p == nil {
		return nil
	}
	return func() backoff.BackOff {
		if n <= 1 {
			return &backoff.StopBackOff{}
		}
		return backoff.WithMaxRetries(p(), uint64(n-1))
	}
}

// MaxElapsed makes p give up once d has passed since the first wait began
// (right after the first attempt failed). The last wait is cut short to end
// at the limit; a wait for a release message may still sleep past it. It
// is nil for a nil p (which primitives.WithRetry refuses).
func MaxElapsed(p Policy, d time.Duration) Policy {
	if p == nil {
		return nil
	}
	return func() backoff.BackOff { return &elapsed{b: p(), limit: d, start: time.Now()} }
}

type elapsed struct {
	b     backoff.BackOff
	limit time.Duration
	start time.Time
}

func (e *elapsed) NextBackOff() time.Duration {
	left := e.limit - time.Since(e.start)
	if left <= 0 {
		return backoff.Stop
	}
	d := e.b.NextBackOff()
	if d == backoff.Stop {
		return d
	}
	return min(d, left)
}

func (e *elapsed) Reset() { e.start = time.Now(); e.b.Reset() }
