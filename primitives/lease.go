package primitives

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

// holder is what a primitive tells its leases: how to extend, release and
// read the TTL of a grant. Each is one owner-checked script. held is false
// when the token no longer holds the primitive.
type holder interface {
	extend(ctx context.Context, token string, ttl time.Duration) (held bool, err error)
	release(ctx context.Context, token string) (held bool, err error)
	ttl(ctx context.Context, token string) (d time.Duration, held bool, err error)
}

// newToken returns 128 random bits, hex encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// drift is the clock drift allowance of a lease: the client considers the
// lease gone this much before its TTL runs out by its own clock.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// lease is the Lease of every primitive. Its expiry by the client's own
// reckoning (deadline) is measured from the start of the call that granted
// or extended it, minus the drift allowance, so it never lies beyond the
// server's expiry.
type lease struct {
	h     holder
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
	// renewal computed with the old TTL cannot undo an Extend: a renewal
	// holds it (TryLock; a lease whose Extend is in flight is looked at
	// again soon) until its outcome is applied.
	renew sync.Mutex
	rs    renewState // with auto-extend: the lease's place in its renewer

	mu       sync.Mutex
	ttl      time.Duration // what renewals extend by
	deadline time.Time
	done     bool  // released, or known lost
	cause    error // why it is done
	released bool  // Release succeeded or found it lost
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer // without auto-extend, once ctx exists: ends it at deadline
}

// newLease starts a lease granted by an attempt that began at start.
// parent's values (not its cancellation) are inherited by Context.
func newLease(parent context.Context, h holder, kind latchkit.Kind, name, token string, fence int64, start time.Time, cfg *config) *lease {
	ttl := cfg.ttl
	l := &lease{h: h, kind: kind, name: name, token: token, fence: fence, log: cfg.log,
		parent: parent, autoExtend: cfg.autoExtend, ttl: ttl, deadline: start.Add(ttl - drift(ttl))}
	if l.autoExtend {
		l.startRenewals()
	}
	return l
}

// logAttrs logs msg about the lease (never its token) at level, when
// WithLogger gave a logger.
func (l *lease) logAttrs(level slog.Level, msg string, attrs ...slog.Attr) {
	if l.log == nil {
		return
	}
	attrs = append(attrs, slog.String("kind", string(l.kind)), slog.String("name", l.name), slog.Int64("fence", l.fence))
	l.log.LogAttrs(context.Background(), level, msg, attrs...)
}

func (l *lease) Name() string  { return l.name }
func (l *lease) Token() string { return l.token }
func (l *lease) Fence() int64  { return l.fence }

// Context is made on first call. Without auto-extend it ends when the TTL
// runs out by the client's reckoning (a timer); with it, when a renewal
// fails. Either way it ends on Release.
func (l *lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(l.parent))
		switch {
		case l.done:
			l.cancel(l.cause)
		case !l.autoExtend:
			l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
		}
	}
	return l.ctx
}

// end marks the lease done for cause and ends its Context, if it has one.
func (l *lease) end(cause error) {
	l.mu.Lock()
	if l.cause == nil {
		l.cause = cause
	}
	l.done = true
	if l.timer != nil {
		l.timer.Stop()
	}
	cancel, first := l.cancel, l.cause
	l.mu.Unlock()
	l.stopRenewals() // a lease that ended needs no more
	if cancel != nil {
		cancel(first)
	}
}

func (l *lease) opErr(op string, err error) error {
	return &latchkit.OpError{Op: op, Kind: l.kind, Name: l.name, Err: err}
}

func (l *lease) TTL(ctx context.Context) (time.Duration, error) {
	d, held, err := l.h.ttl(ctx, l.token)
	if err != nil {
		return 0, l.opErr("ttl", err)
	}
	if !held {
		l.lose(latchkit.ErrLeaseLost)
		return 0, l.opErr("ttl", latchkit.ErrLeaseLost)
	}
	return d, nil
}

func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return l.opErr("extend", fmt.Errorf("%w: ttl %v is below 1ms", latchkit.ErrInvalid, ttl))
	}
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done {
		return l.opErr("extend", fmt.Errorf("lease already released or lost: %w", latchkit.ErrLeaseLost))
	}
	l.renew.Lock()
	defer l.renew.Unlock()
	start := time.Now()
	held, err := l.h.extend(ctx, l.token, ttl)
	if err != nil {
		return l.opErr("extend", err)
	}
	if !held {
		l.lose(latchkit.ErrLeaseLost)
		return l.opErr("extend", latchkit.ErrLeaseLost)
	}
	l.mu.Lock()
	l.ttl = ttl
	d := start.Add(ttl - drift(ttl))
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

func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return l.opErr("release", fmt.Errorf("lease already released: %w", latchkit.ErrLeaseLost))
	}
	// Renewals stop here, and one in flight is not waited for: its
	// outcome is dropped (see stopRenewals), so it cannot move the
	// deadline, end the lease or queue it again behind Release's back.
	l.stopRenewals()
	held, err := l.h.release(ctx, l.token)
	if err != nil {
		// The outcome is unknown; a retried Release finds out (a release
		// that did happen leaves a marker that makes the retry succeed).
		// Renewals stay off: the caller meant to give the lease up, and a
		// lease renewed on behalf of a caller that gave up on it would
		// block everyone for as long as the process lives. Unreleased, it
		// expires with its TTL; its Context ends then.
		l.mu.Lock()
		l.autoExtend = false
		if l.ctx != nil && l.timer == nil && !l.done {
			l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
		}
		l.mu.Unlock()
		return l.opErr("release", err)
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	if !held {
		l.end(latchkit.ErrLeaseLost)
		return l.opErr("release", latchkit.ErrLeaseLost)
	}
	l.end(errReleased)
	return nil
}

// errReleased is the cause of a lease context ended by Release.
var errReleased = errors.New("latchkit: lease released")

// lose marks the lease lost, ends its context and logs why.
func (l *lease) lose(cause error) {
	l.logAttrs(slog.LevelWarn, "latchkit: lease lost", slog.String("cause", cause.Error()))
	l.end(cause)
}

// expire ends the context of a lease without auto-extend at its deadline.
func (l *lease) expire() {
	l.mu.Lock()
	late := !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if late {
		l.lose(fmt.Errorf("ttl ran out: %w", latchkit.ErrLeaseLost))
	}
}
