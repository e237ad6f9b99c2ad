package kit

import (
	"context"
	"errors"
	"fmt"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// Idempotent runs f, a call that is applied at most once however many of
// its tries get through (a script that recognizes its call's id), trying
// again while Redis cannot be reached, paced by the retry policy, until it
// gets an answer or ctx ends: when ctx ended the call, the error matches
// ctx's error; the Client's Close ends the retries with an error matching
// ErrClosed alone (WithdrawnErr). Errors are as the backend returned them
// (see ScriptErr). The caller has begun the call (BeginCall).
func (c *Config) Idempotent(ctx context.Context, f func(context.Context) (backend.Value, error)) (backend.Value, error) {
	var policy backoff.BackOff
	for tries := 1; ; tries++ {
		v, err := f(ctx)
		if err == nil {
			return v, nil
		}
		if Withdrawn(ctx) {
			return nil, WithdrawnErr(err)
		}
		if cerr := CtxDone(ctx); cerr != nil {
			if !errors.Is(err, cerr) {
				err = fmt.Errorf("%w: %w", cerr, err)
			}
			return nil, err
		}
		if !errors.Is(err, backend.ErrUnavailable) {
			return nil, err
		}
		if policy == nil {
			policy = c.Retry()
			// Close ends the retries too.
			var unbind func()
			ctx, unbind = c.Bind(ctx)
			defer unbind()
		}
		d := policy.NextBackOff()
		if d == backoff.Stop {
			return nil, fmt.Errorf("gave up after %s: %w", Count(tries, "try", "tries"), err)
		}
		if werr := pubsub.Sleep(ctx, d); werr != nil {
			if Withdrawn(ctx) {
				return nil, WithdrawnErr(err)
			}
			return nil, fmt.Errorf("%w: %w", werr, err)
		}
	}
}
