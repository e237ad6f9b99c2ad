// Package retry decides how a waiting Lock or Acquire paces its attempts:
// backoff policies built on github.com/cenkalti/backoff/v4, and the
// Middleware that loops over attempts.
//
// Between attempts the middleware does not just sleep: when the request has
// a Waiter (installed by pubsub.WakeOnRelease) it waits for a release
// message, with the policy's delay and the holder's remaining TTL as the
// timer that bounds the wait when no message comes.
package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
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
// at the limit; a Waiter (see latchkit.Waiter) may still sleep past it.
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

// Middleware retries attempts until one succeeds, the policy gives up or
// ctx is done. It retries an attempt that failed with ErrNotAcquired (the
// primitive is held: it waits for a release through the request's Waiter,
// or for the policy's delay) and one that failed with
// backend.ErrUnavailable (a connection blip: it waits for the policy's
// delay only; trying again is safe, since an attempt that did get through
// finds its own token and counts as granted). Any other error ends the loop
// at once. A Try request makes one attempt.
//
// When the policy gives up, the last attempt's error is returned, wrapped
// with the number of attempts; when ctx ends the wait, the error matches
// both ctx's error and the last attempt's error with errors.Is. A nil
// policy means Exponential().
func Middleware(p Policy) latchkit.Middleware {
	if p == nil {
		p = Exponential()
	}
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			l, err := next(ctx, req)
			if err == nil || req.Try || !retryable(err) {
				return l, err
			}
			b := p()
			for {
				d := b.NextBackOff()
				if d == backoff.Stop {
					return nil, fmt.Errorf("gave up after %d attempts: %w", req.Attempts, err)
				}
				var werr error
				if errors.Is(err, latchkit.ErrNotAcquired) {
					werr = wait(ctx, req, d)
				} else {
					werr = Sleep(ctx, d) // no release to wait for: Redis was not reached
				}
				if werr != nil {
					return nil, fmt.Errorf("stopped waiting after %d attempts: %w (last attempt: %w)", req.Attempts, werr, err)
				}
				l, err = next(ctx, req)
				if err == nil || !retryable(err) {
					return l, err
				}
			}
		}
	}
}

// retryable reports whether a failed attempt is worth another.
func retryable(err error) bool {
	return errors.Is(err, latchkit.ErrNotAcquired) || errors.Is(err, backend.ErrUnavailable)
}

// wait sleeps between two attempts: through the request's Waiter when there
// is one, otherwise for d, or less when the holder's TTL runs out sooner.
func wait(ctx context.Context, req *latchkit.Request, d time.Duration) error {
	if req.Waiter != nil {
		return req.Waiter.Wait(ctx, req, d)
	}
	if req.WaitHint > 0 && req.WaitHint < d {
		d = req.WaitHint
	}
	return Sleep(ctx, d)
}

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
