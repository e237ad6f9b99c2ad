package kit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Holder is what a primitive tells its leases: how to extend, release and
// read the TTL of a grant. Each is one owner-checked script. held is false
// when the token no longer holds the primitive.
type Holder interface {
	Extend(ctx context.Context, token string, ttl time.Duration) (held bool, err error)
	Release(ctx context.Context, token string) (held bool, err error)
	TTL(ctx context.Context, token string) (d time.Duration, held bool, err error)
}

// NewToken returns 128 random bits, hex encoded.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Drift is the clock drift allowance of a lease: the client considers the
// lease gone this much before its TTL runs out by its own clock.
func Drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// Lease is the Lease of every primitive. Its expiry by the client's own
// reckoning (deadline) is measured from the start of the call that granted
// or extended it, minus the drift allowance, so it never lies beyond the
// server's expiry.
type Lease struct {
	cl    *Client   // owns its renewals and give-backs; releases it on Close
	cls   []*Client // every Client whose Close releases it (a Redlock's: each instance's)
	h     Holder
	kind  latchkit.Kind
	name  string
	token string
	fence int64

	// parent lends its values (not its cancellation) to Context, which is
	// made on first use: most callers never ask for it.
	parent     context.Context
	autoExtend bool
	log        *slog.Logger // WithLogger; nil: discard

	// renew serializes Extend and the renewer's renewals, so that a
	// renewal computed with the old TTL cannot undo an Extend: a token in
	// it is held by the one running. A renewal only tries to take it (a
	// lease whose Extend is in flight is looked at again soon); Extend
	// waits for it no longer than its context allows.
	renew chan struct{}
	rs    renewState // with auto-extend: the lease's place in its renewer

	mu       sync.Mutex
	ttl      time.Duration // what renewals extend by
	deadline time.Time
	done     bool  // released, or known lost
	telling  bool  // the first ender is telling (logging) why, before it ends ctx
	cause    error // why it is done
	released bool  // Release succeeded or found it lost
	relErr   error // what that Release returned: every later Release returns it too
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer // once ctx exists: ends it at deadline, whatever any call in flight does
}

// NewLease starts a lease granted by an attempt that began at start.
// parent's values (not its cancellation) are inherited by Context.
func NewLease(parent context.Context, h Holder, kind latchkit.Kind, name, token string, fence int64, start time.Time, cfg *Config) *Lease {
	return newLeaseUntil(parent, h, kind, name, token, fence, start.Add(cfg.TTL-Drift(cfg.TTL)), cfg)
}

// newLeaseUntil starts a lease whose deadline by the client's clock is
// deadline (renewals then extend it by the TTL): NewLease's, or that of a
// grant made by a hand-over, which the server holds for the hand-over's
// time from a moment the new holder can only bound from below.
func newLeaseUntil(parent context.Context, h Holder, kind latchkit.Kind, name, token string, fence int64, deadline time.Time, cfg *Config) *Lease {
	l := &Lease{cl: cfg.Cls[0], cls: cfg.Cls, h: h, kind: kind, name: name, token: token, fence: fence, log: cfg.Log,
		parent: parent, autoExtend: cfg.AutoExtend, ttl: cfg.TTL, deadline: deadline,
		renew: make(chan struct{}, 1)}
	for _, c := range l.cls {
		c.track(l)
	}
	if l.autoExtend {
		l.startRenewals()
	}
	return l
}

// logAttrs logs msg about the lease (never its token) at level, when
// WithLogger gave a logger.
func (l *Lease) logAttrs(level slog.Level, msg string, attrs ...slog.Attr) {
	if l.log == nil {
		return
	}
	attrs = append(attrs, slog.String("kind", string(l.kind)), slog.String("name", l.name), slog.Int64("fence", l.fence))
	l.log.LogAttrs(context.Background(), level, msg, attrs...)
}

func (l *Lease) Name() string  { return l.name }
func (l *Lease) Token() string { return l.token }
func (l *Lease) Fence() int64  { return l.fence }

// Context is made on first call. It ends on Release, when a renewal finds
// the lease gone, and at the lease's deadline by the client's own clock
// (a timer, moved by every renewal and Extend that succeeds), whatever
// calls are in flight: a renewal held up by a hung server or a driver that
// ignores its context cannot keep it alive past the deadline. Its Err
// checks the clock too, so a caller that asks Err sees a lease past its
// deadline as done even before the timer has had a chance to run.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(l.parent))
		l.ctx, l.cancel = leaseContext{ctx, l}, cancel
		if l.done {
			if !l.telling { // else the ender ends it once told
				l.cancel(l.cause)
			}
		} else {
			l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
		}
	}
	return l.ctx
}

// leaseContext is a lease's Context: a cancelable context whose Err also
// ends the lease once its deadline has passed (Done is closed before Err
// returns, as the context contract wants).
type leaseContext struct {
	context.Context
	l *Lease
}

func (c leaseContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	c.l.mu.Lock()
	late := !c.l.done && !time.Now().Before(c.l.deadline)
	c.l.mu.Unlock()
	if late {
		c.l.expire()
	}
	return c.Context.Err()
}

// end marks the lease done for cause and ends its Context, if it has one.
// It reports whether the lease was live until then.
func (l *Lease) end(cause error) (first bool) { return l.endTold(cause, nil) }

// endTold is end that, when this call is the first to end the lease, runs
// tell before the lease's Context is done: a caller woken by the Context
// finds what tell wrote (the log line of a loss) already written.
func (l *Lease) endTold(cause error, tell func()) (first bool) {
	l.mu.Lock()
	if l.cause == nil {
		l.cause = cause
	}
	first = !l.done
	l.done = true
	telling := first && tell != nil
	l.telling = l.telling || telling
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.stopRenewals() // a lease that ended needs no more
	if first {
		for _, c := range l.cls {
			c.untrack(l)
		}
	}
	if telling {
		tell()
	}
	l.mu.Lock()
	if telling {
		l.telling = false
	}
	// While the first ender tells, nobody ends the Context: it does,
	// once told (a Context made meanwhile waits for it too).
	cancel, why := l.cancel, l.cause
	if l.telling {
		cancel = nil
	}
	l.mu.Unlock()
	if cancel != nil {
		cancel(why)
	}
	return first
}

func (l *Lease) opErr(op string, err error) error {
	return &latchkit.OpError{Op: op, Kind: l.kind, Name: l.name, Err: err}
}

// doneErr is the error of a call on a lease that has ended: one matching
// ErrLeaseLost that says whether it was released or lost (and why). It is
// nil while the lease is live.
func (l *Lease) doneErr() error {
	l.mu.Lock()
	done, cause := l.done, l.cause
	l.mu.Unlock()
	switch {
	case !done:
		return nil
	case cause == ErrReleased:
		return fmt.Errorf("lease already released: %w", latchkit.ErrLeaseLost)
	case cause == ErrClientClosed:
		return fmt.Errorf("lease released by Close: %w", ErrClientClosed)
	case errors.Is(cause, latchkit.ErrLeaseLost):
		return cause
	default:
		return fmt.Errorf("%w (%v)", latchkit.ErrLeaseLost, cause)
	}
}

// TTL returns the time the lease has left on the server. On a lease that
// has ended (released, or known lost) it returns an error matching
// latchkit.ErrLeaseLost that says which, without a round trip.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.doneErr(); err != nil {
		return 0, l.opErr("ttl", err)
	}
	d, held, err := l.h.TTL(ctx, l.token)
	if err != nil {
		return 0, l.opErr("ttl", err)
	}
	if !held {
		l.lose(latchkit.ErrLeaseLost) // a Release meanwhile made it done already: then it says so
		return 0, l.opErr("ttl", l.doneErr())
	}
	return d, nil
}

// Extend sets the lease's remaining time to ttl, which must be at least
// MinTTL (3ms): a shorter one is refused with an error matching
// latchkit.ErrInvalid, and the lease is left as it was.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < MinTTL {
		return l.opErr("extend", fmt.Errorf("%w: %s", latchkit.ErrInvalid, shortTTL(ttl)))
	}
	if err := l.doneErr(); err != nil {
		return l.opErr("extend", err)
	}
	select {
	case l.renew <- struct{}{}:
	case <-ctx.Done():
		return l.opErr("extend", fmt.Errorf("waiting for a renewal in flight: %w", ctx.Err()))
	}
	defer func() { <-l.renew }()
	start := time.Now()
	held, err := l.h.Extend(ctx, l.token, ttl)
	if err != nil {
		if held {
			// Extended on the master, not acknowledged by its replicas
			// (WithReplicaAck, see ExtendBy): the deadline may come
			// closer (a shorter TTL), never go further.
			l.mu.Lock()
			l.ttl = ttl
			if d := start.Add(ttl - Drift(ttl)); d.Before(l.deadline) && !l.done {
				l.deadline = d
				if l.timer != nil {
					l.timer.Reset(time.Until(d))
				}
			}
			l.mu.Unlock()
		}
		return l.opErr("extend", err)
	}
	if !held {
		l.lose(latchkit.ErrLeaseLost)
		return l.opErr("extend", l.doneErr())
	}
	l.mu.Lock()
	l.ttl = ttl
	d := start.Add(ttl - Drift(ttl))
	if !l.done {
		l.deadline = d
		if l.timer != nil {
			l.timer.Reset(time.Until(d))
		}
	}
	l.mu.Unlock()
	if r := l.rs.r; r != nil {
		// An Extend is a renewal: the next is due ttl/3 after it began,
		// by the new TTL (sooner than planned when it shortened the TTL).
		r.reschedule(l, earliest(start.Add(ttl/3), d), ttl/renewSlackFactor)
	}
	return nil
}

// Release gives the lease up. Once a Release has gone through (it
// returned nil, or an error matching latchkit.ErrLeaseLost), every later
// Release returns what it returned, without a round trip: a lease
// released twice was not lost.
func (l *Lease) Release(ctx context.Context) error {
	return l.release(ctx, l.h.Release, ErrReleased)
}

// release is Release, giving the token up through rel; a release that
// goes through ends the lease with cause (ErrReleased, or ErrClientClosed
// for Close's).
func (l *Lease) release(ctx context.Context, rel func(context.Context, string) (bool, error), cause error) error {
	l.mu.Lock()
	released, lost := l.released, l.done && l.cause != ErrReleased
	why, relErr := l.cause, l.relErr
	l.mu.Unlock()
	if released || (lost && cause == ErrClientClosed) {
		return relErr
	}
	// Renewals stop here, and one in flight is not waited for: its
	// outcome is dropped (see stopRenewals), so it cannot move the
	// deadline, end the lease or queue it again behind Release's back.
	l.stopRenewals()
	held, err := rel(ctx, l.token)
	if err != nil {
		// The outcome is unknown; a retried Release finds out (a release
		// that did happen remembers its token among the name's finished
		// ones, which makes the retry succeed, for markerTTL).
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
		window := min(l.ttl+time.Second, maxGiveBackWindow)
		l.mu.Unlock()
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
	case lost:
		// Told lost before (its deadline passed, or a renewal found it
		// gone): whatever the script found, the lease was not held
		// throughout, and the caller was told so; the release only made
		// sure nothing is left on the server.
		err = l.opErr("release", fmt.Errorf("%w (%v)", latchkit.ErrLeaseLost, why))
	case !held:
		l.end(latchkit.ErrLeaseLost)
		err = l.opErr("release", latchkit.ErrLeaseLost)
	case cause == ErrClientClosed:
		l.end(ErrClientClosed)
		err = l.opErr("release", fmt.Errorf("lease released by Close: %w", ErrClientClosed))
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

// releaseToken releases token, as a give-back of the lease (see giveBack).
func (l *Lease) releaseToken(ctx context.Context, token string) error {
	_, err := l.h.Release(ctx, token)
	return err
}

// ErrReleased is the cause of a lease context ended by Release.
var ErrReleased = errors.New("latchkit: lease released")

// lose marks the lease lost, ends its context and logs why, unless it
// had ended already (released, or found lost before): that is not news.
func (l *Lease) lose(cause error) {
	l.endTold(cause, func() {
		l.logAttrs(slog.LevelWarn, "latchkit: lease lost", slog.String("cause", cause.Error()))
	})
}

// renewalsSoFar says, for a lease that ran out, how its renewals fared
// since the last that succeeded: how many failed and the last error, or
// that none finished (it was in flight, or never due). Empty without
// auto-extend.
func (l *Lease) renewalsSoFar() string {
	r := l.rs.r
	if r == nil {
		return ""
	}
	r.mu.Lock()
	failed, last, at := l.rs.failed, l.rs.lastErr, l.rs.lastAt
	r.mu.Unlock()
	if failed == 0 || last == nil {
		return " (no renewal finished since the last that succeeded)"
	}
	return fmt.Sprintf(" (%d renewals failed since the last that succeeded; the last began %v before: %v)",
		failed, time.Since(at).Round(time.Millisecond), last)
}

// expire ends the lease at its deadline, unless a renewal or an Extend
// moved the deadline meanwhile (then the timer has been moved too). An
// auto-extended lease may still be held on the server (a renewal got
// through after the client gave up waiting for it): what it holds is given
// back in the background.
func (l *Lease) expire() {
	l.mu.Lock()
	late := !l.done && !time.Now().Before(l.deadline)
	renewing := l.autoExtend
	l.mu.Unlock()
	if !late {
		return
	}
	l.lose(fmt.Errorf("ttl ran out before a renewal got through%s: %w", l.renewalsSoFar(), latchkit.ErrLeaseLost))
	if renewing {
		l.cl.Spawn(l.giveBack)
	}
}

// giveBack releases, best effort, a lease lost at its deadline: tried at
// once and, while Redis cannot be reached, for as long as the lease could
// still be held on the server (see giveBack in acquire.go).
func (l *Lease) giveBack(ctx context.Context) {
	l.mu.Lock()
	window := min(l.ttl+time.Second, maxGiveBackWindow)
	l.mu.Unlock()
	giveBack(ctx, l.cl, l.token, l.releaseToken, window)
}

// Deadline is when the lease ends by the client's own clock, unless a
// renewal or an Extend moves it.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}
