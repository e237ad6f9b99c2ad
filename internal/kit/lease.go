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
// lease gone this much before its TTL runs out by its own clock, counted
// from the start of the call that granted or extended it. The server's TTL
// starts later, but may count up to 2ms short: the TTL is sent in whole
// milliseconds (its fraction is lost), and a holder's expiry kept as a
// score is the server's clock in whole milliseconds plus the TTL. TTL/100
// covers clocks that run at slightly different rates.
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
	// sentAlive: a release whose outcome is unknown (its reply lost, or
	// not in time) was sent while the lease was live by this client's
	// clock. The server then held it until that release arrived or later:
	// the caller held the lock until it let go, and a retried release that
	// finds the token gone reports success (see release).
	sentAlive bool
	ctx       context.Context
	cancel    context.CancelCauseFunc
	timer     *time.Timer // once ctx exists: ends it at deadline, whatever any call in flight does
	held      *time.Timer // WithHeldWarning: logs once it has been held that long (heldwarn.go)
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
	l.watchHeld(cfg.HeldWarning)
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

// core is l: the lease inside a primitive's lease type that embeds it.
func (l *Lease) core() *Lease { return l }

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
	if l.held != nil {
		l.held.Stop()
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
	if err := CheckCtx(ctx); err != nil {
		return 0, l.opErr("ttl", err)
	}
	if err := l.doneErr(); err != nil {
		return 0, l.opErr("ttl", err)
	}
	d, held, err := l.h.TTL(ctx, l.token)
	if err != nil {
		return 0, l.opErr("ttl", err)
	}
	if !held {
		l.gone() // a Release or Close meanwhile made it done already: then it says so
		return 0, l.opErr("ttl", l.doneErr())
	}
	if err := l.doneErr(); err != nil {
		return 0, l.opErr("ttl", err) // released or closed while the call was in flight
	}
	return d, nil
}

// Extend sets the lease's remaining time to ttl, which must be at least
// MinTTL (5ms): a shorter one is refused with an error matching
// latchkit.ErrInvalid, and the lease is left as it was.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < MinTTL {
		return l.opErr("extend", fmt.Errorf("%w: %s", latchkit.ErrInvalid, shortTTL(ttl)))
	}
	if err := CheckCtx(ctx); err != nil {
		return l.opErr("extend", err)
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
		l.gone() // a Release or Close meanwhile made it done already: then it says so
		return l.opErr("extend", l.doneErr())
	}
	l.mu.Lock()
	l.ttl = ttl
	d := start.Add(ttl - Drift(ttl))
	done := l.done
	if !done {
		l.deadline = d
		if l.timer != nil {
			l.timer.Reset(time.Until(d))
		}
	}
	l.mu.Unlock()
	if done {
		return l.opErr("extend", l.doneErr()) // released or closed while the call was in flight
	}
	if r := l.rs.r; r != nil {
		// An Extend is a renewal: the next is due ttl/3 after it began,
		// by the new TTL (sooner than planned when it shortened the TTL).
		r.reschedule(l, earliest(start.Add(ttl/3), d), ttl/renewSlackFactor)
	}
	return nil
}

// lose marks the lease lost, ends its context and logs why, unless it
// had ended already (released, or found lost before): that is not news.
func (l *Lease) lose(cause error) {
	l.endTold(cause, func() {
		l.logAttrs(slog.LevelWarn, "latchkit: lease lost", slog.String("cause", cause.Error()))
	})
}

// gone ends the lease that a call found no longer held on the server: a
// loss, told and logged (lose), unless its holder had let it go in time (a
// release of unknown outcome sent while it was live: see sentAlive).
func (l *Lease) gone() {
	l.mu.Lock()
	let := l.sentAlive
	l.mu.Unlock()
	if let {
		l.end(ErrReleased)
		return
	}
	l.lose(latchkit.ErrLeaseLost)
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
	renewing, let := l.autoExtend, l.sentAlive
	l.mu.Unlock()
	if !late {
		return
	}
	if let {
		// Its holder let it go while it was live (a release whose outcome
		// is unknown): its end is no loss.
		l.end(ErrReleased)
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
	giveBack(ctx, l.cl, l.token, l.releaseToken, l.window())
}

// Deadline is when the lease ends by the client's own clock, unless a
// renewal or an Extend moves it.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}
