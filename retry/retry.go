// Package retry decides how a waiting Lock or Acquire paces its attempts:
// backoff policies built on github.com/cenkalti/backoff/v4, given to a
// primitive with primitives.WithRetry.
//
// The wait loop itself lives in package primitives. Between two attempts
// that found the primitive held it does not just sleep: it waits for a
// release message (package pubsub), and the policy's delay, cut short by
// the holder's remaining TTL, is the timer that bounds the wait when no
// message comes. Between attempts that could not reach Redis it sleeps for
// the policy's delay. A policy that returns backoff.Stop ends the waiting.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy makes a fresh backoff for one logical acquisition. backoff.Stop
// from the backoff ends the waiting with ErrNotAcquired.
type Policy func() backoff.BackOff

// ExponentialOption tunes Exponential.
type ExponentialOption func(*backoff.ExponentialBackOff)

// WithInitial sets the first delay (default 5ms).
func WithInitial(d time.Duration) ExponentialOption {
	return func(b *backoff.ExponentialBackOff) { b.InitialInterval = d }
}

// WithMax caps the delay before jitter is applied (default 500ms): with a
// jitter of f, a single delay can reach max*(1+f).
func WithMax(d time.Duration) ExponentialOption {
	return func(b *backoff.ExponentialBackOff) { b.MaxInterval = d }
}

// WithMultiplier sets the growth factor per attempt (default 2).
func WithMultiplier(f float64) ExponentialOption {
	return func(b *backoff.ExponentialBackOff) { b.Multiplier = f }
}

// WithJitter sets the randomization factor: each delay is drawn uniformly
// from [d*(1-f), d*(1+f)] (default 0.5).
func WithJitter(f float64) ExponentialOption {
	return func(b *backoff.ExponentialBackOff) { b.RandomizationFactor = f }
}

// Exponential is the default policy: delays growing from 5ms by a factor of
// 2 up to 500ms, each randomized by ±50%, never giving up on its own (the
// caller's context bounds the wait).
func Exponential(opts ...ExponentialOption) Policy {
	return func() backoff.BackOff {
		b := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(0))
		b.InitialInterval = 5 * time.Millisecond
		b.MaxInterval = 500 * time.Millisecond
		b.Multiplier = 2
		b.RandomizationFactor = 0.5
		for _, o := range opts {
			o(b)
		}
		b.Reset()
		return b
	}
}

// Constant waits d between attempts.
func Constant(d time.Duration) Policy {
	return func() backoff.BackOff { return backoff.NewConstantBackOff(d) }
}

// MaxAttempts limits p to n attempts in all (n-1 waits).
func MaxAttempts(p Policy, n int) Policy {
	return func() backoff.BackOff {
		if n <= 1 {
			return &backoff.StopBackOff{}
		}
		return backoff.WithMaxRetries(p(), uint64(n-1))
	}
}

// MaxElapsed makes p give up once d has passed since the first wait began
// (right after the first attempt failed). The last wait is cut short to end
// at the limit; a wait for a release message may still sleep past it.
func MaxElapsed(p Policy, d time.Duration) Policy {
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

// Sleep waits for d or until ctx is done, returning ctx.Err() in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
