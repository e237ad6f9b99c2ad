package kit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Release gives the lease up. Once a Release has gone through (it
// returned nil, or an error matching latchkit.ErrLeaseLost), every later
// Release returns what it returned, without a round trip: a lease
// released twice was not lost.
func (l *Lease) Release(ctx context.Context) error {
	if err := CheckCtx(ctx); err != nil {
		return l.opErr("release", err)
	}
	return l.release(ctx, l.h.Release)
}

// release is Release, giving the token up through rel.
func (l *Lease) release(ctx context.Context, rel func(context.Context, string) (bool, error)) error {
	l.mu.Lock()
	released, lost := l.released, l.done && l.cause != ErrReleased
	why, relErr := l.cause, l.relErr
	l.mu.Unlock()
	if released {
		return relErr
	}
	// Renewals stop here, and one in flight is not waited for: its
	// outcome is dropped (see stopRenewals), so it cannot move the
	// deadline, end the lease or queue it again behind Release's back.
	l.stopRenewals()
	l.mu.Lock()
	earlier := l.sentAlive // an earlier try may have released it
	alive := !l.done && time.Now().Before(l.deadline)
	l.mu.Unlock()
	held, err := rel(ctx, l.token)
	if err != nil {
		// The outcome is unknown; a retried Release finds out: one that
		// finds the token gone after this try was sent while the lease was
		// live succeeds (sentAlive), whatever happened to the name since.
		// Renewals stay off: the caller meant to give the lease up, and a
		// lease renewed on behalf of a caller that gave up on it would
		// block everyone for as long as the process lives. A release that
		// may not have reached Redis (unreachable, timed out: under a
		// starved CPU rueidis times out a call made without a deadline
		// after its ConnWriteTimeout, 500 ms, the release unsent) is
		// retried in the background as a give-back is (retryGiveBack), so
		// that the primitive is not left taken for the TTL by a lease
		// nobody holds. Left unreleased (refused, or the window spent), it
		// expires with its TTL; its Context ends then (its timer is armed).
		// rel may be a holder's pass (passOn, for a grant WithReplicaAck
		// refused): keyed by the token alone, its retry frees whatever the
		// token holds when it lands, so the acquisition that passed hands
		// the caller nothing the token is granted afterwards (see Passer).
		l.mu.Lock()
		l.autoExtend = false
		if alive && unknownOutcome(err) {
			l.sentAlive = true
		}
		l.mu.Unlock()
		window := l.window()
		if unknownOutcome(err) {
			token := l.token
			l.cl.Spawn(func(bg context.Context) {
				RetryGiveBack(bg, token, func(ctx context.Context, token string) error {
					_, err := rel(ctx, token)
					return err
				}, window)
			})
		}
		return l.opErr("release", err)
	}
	switch {
	case !held && earlier:
		// An earlier try, sent while the lease was live, released it (or
		// the lease expired after it, the caller having let go): the
		// caller held the lock until it let go. (The one case this gets
		// wrong: the lease taken away before that try, by a forced
		// release or a failover, with the try's reply lost too.)
		l.end(ErrReleased)
		err = nil
	case lost:
		// Told lost before (its deadline passed, or a renewal found it
		// gone): whatever the script found, the lease was not held
		// throughout, and the caller was told so; the release only made
		// sure nothing is left on the server.
		err = l.opErr("release", fmt.Errorf("%w (%v)", latchkit.ErrLeaseLost, why))
	case !held:
		l.end(latchkit.ErrLeaseLost)
		err = l.opErr("release", l.doneErr()) // Close's, when Close ended it first
	default:
		l.end(ErrReleased)
	}
	l.mu.Lock()
	l.released, l.relErr = true, err
	l.mu.Unlock()
	return err
}

// unknownOutcome reports whether a failed call may or may not have run:
// Redis was not reached in time, or the call's context ended while it was
// in flight. An error reply (the server refused) and a closed client are
// known outcomes.
func unknownOutcome(err error) bool {
	return errors.Is(err, backend.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// closeEnd ends the lease for its Client's Close, before Close releases
// it: its Context ends with ErrClientClosed, its renewals stop, and a
// Release from now on returns what Close's release says, without a round
// trip. It reports whether the lease was live until then (what it holds is
// Close's to release).
func (l *Lease) closeEnd() bool {
	l.mu.Lock()
	if l.released || l.done {
		l.mu.Unlock()
		return false
	}
	l.released, l.relErr = true, l.opErr("release", fmt.Errorf("lease released by Close: %w", ErrClientClosed))
	l.mu.Unlock()
	return l.end(ErrClientClosed)
}

// window is how long a release or give-back of the lease is pursued in the
// background: as long as the server could still hold it, and a second
// more, at most maxGiveBackWindow.
func (l *Lease) window() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return min(l.ttl+time.Second, maxGiveBackWindow)
}

// releaseToken releases token, as a give-back of the lease (see giveBack).
func (l *Lease) releaseToken(ctx context.Context, token string) error {
	_, err := l.h.Release(ctx, token)
	return err
}

// ErrReleased is the cause of a lease context ended by Release.
var ErrReleased = errors.New("latchkit: lease released")
