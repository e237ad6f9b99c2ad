package kit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// giveUp ends an acquisition that was not granted, returning err. When an
// attempt's outcome was unknown (unsure) or a waiting attempt may have
// queued (one found the primitive held), whatever the token may hold or
// have queued is given back first (an acquisition whose every attempt was
// refused outright, by bad input, left nothing and writes nothing):
// a grant nobody knows of would otherwise keep the primitive taken for its
// whole TTL (nothing renews it), and a queued place would be handed the
// primitive and hold everyone up until it timed out. The give-back is tried
// once, for at most giveBackTimeout; while Redis cannot be reached it is
// retried in the background for the window, so that the caller is not held
// past its deadline by more than giveBackTimeout. When the caller's
// context has ended, the error matches its error too, so that "I gave up"
// can be told from "Redis is down".
func (c *Config) giveUp(ctx context.Context, a *Acquisition, at *Attempt, unsure, held bool, err error) error {
	if a.GiveBack != nil && (unsure || (a.Queues && !a.Try && held)) {
		giveBack(ctx, c.Cl, at.Token, a.GiveBack, c.Window())
	}
	if Withdrawn(ctx) {
		return WithdrawnErr(err)
	}
	if cerr := CtxDone(ctx); cerr != nil {
		if done := ctx.Done(); done != nil && ctx.Err() == nil {
			// The deadline has passed and the context's own timer is due:
			// wait for it (briefly), so that a caller that checks ctx.Err()
			// after the call sees it done, as the error says.
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-done:
				cerr = ctx.Err()
			case <-t.C:
			}
			t.Stop()
		}
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
	}
	return err
}

// Withdrawn reports whether ctx, a waiting call's context bound to its
// Client (Bind), ended because the Client's Close began while the caller's
// own context was live.
func Withdrawn(ctx context.Context) bool {
	return ctx.Err() != nil && context.Cause(ctx) == ErrClientClosed
}

// WithdrawnErr is the error of a call that Close withdrew (Withdrawn):
// it matches latchkit.ErrClosed and nothing else, whatever the call met
// before (last, which it only describes).
func WithdrawnErr(last error) error {
	return fmt.Errorf("%w: withdrawn by Close (%v)", ErrClientClosed, last)
}

// Count is n with one or, unless n is 1, many: "1 attempt", "2 attempts".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// giveBack runs f for token once, bounded by giveBackTimeout, and, when
// Redis could not be reached, again in the background for window (see
// retryGiveBack).
//
// The budget is for waiting on Redis. A try that returns far past its
// deadline spent it waiting for this process's scheduler (its timer, or the
// driver's goroutine, did not run in time: a starved process), not on
// Redis, and is made once more before returning: left to the background,
// it would return the call while what it gives back is still held. A try
// against a Redis that does not answer ends on time and is not repeated.
func giveBack(ctx context.Context, cl *Client, token string, f func(context.Context, string) error, window time.Duration) {
	for try := 0; ; try++ {
		start := time.Now()
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), GiveBackTimeout)
		err := f(gctx, token)
		cancel()
		if !errors.Is(err, backend.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if try == 0 && time.Since(start) > StarvedGiveBack {
			continue
		}
		cl.Spawn(func(bg context.Context) { RetryGiveBack(bg, token, f, window) })
		return
	}
}

// StarvedGiveBack: a give-back try that took this long, against a budget
// of giveBackTimeout, was held up mostly by the process's scheduler (see
// giveBack). A try against a partitioned server in a CPU-starved process
// ends its budget late by the scheduler's lag, 60-290 ms measured beside
// two busy processes (TestTimelyStarved), and is not tried again there,
// which would double the call's lateness; a stall of several hundred
// milliseconds (570 ms seen) is.
const StarvedGiveBack = 4 * GiveBackTimeout

// RetryGiveBack retries f until it succeeds, fails for good (an error
// reply, a closed client: anything but an unknown outcome) or the window
// has passed, pausing a little more each time. Each try is bounded by
// BackgroundTry: against a hung server it waits in its socket, behind the
// attempt it gives back, and the next try goes on another connection or
// behind it again; when ctx ends (the Client's Close cut its background
// work short) the try in flight ends within that bound on every driver. A
// server that refuses or resets connections (gone, restarting) is tried
// for a second only: what was stuck in it went with it.
func RetryGiveBack(ctx context.Context, token string, f func(context.Context, string) error, window time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	quick := time.Now().Add(time.Second)
	pause := 5 * time.Millisecond
	for {
		if pubsub.Sleep(ctx, pause) != nil {
			return
		}
		start := time.Now()
		tctx, tcancel := context.WithTimeout(ctx, BackgroundTry)
		err := f(tctx, token)
		tcancel()
		if !unknownOutcome(err) {
			return
		}
		if refusedAtOnce(err, time.Since(start)) && time.Now().After(quick) {
			return
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// refusedAtOnce reports whether a call that failed with err after took met
// a server that refuses or resets connections (gone, restarting) rather
// than one that does not answer: the connection's error says so, or the
// call failed within GiveBackTimeout. (A go-redis call to a refusing
// address takes about 1.7 s, its own dial retries, or is cut short by its
// deadline first: the error tells.)
func refusedAtOnce(err error, took time.Duration) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true // also when the try's deadline cut short a driver's own dial retries
	}
	return took < GiveBackTimeout && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}
