package kit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// ScriptAttempt is the attempt of a primitive whose acquire is one script
// over fixed keys, with ARGV the token, then args, then the annotation and
// the retention (Config.RetArg: how long a stored limit outlives its last
// grant), replying {1, fence} or {0, hint ms, holder's annotation}.
func ScriptAttempt(b backend.Backend, s *backend.Script, keys, args []string, h Holder, kind latchkit.Kind, name string, cfg *Config) func(context.Context, *Attempt) (latchkit.Lease, error) {
	return func(ctx context.Context, at *Attempt) (latchkit.Lease, error) {
		start := time.Now()
		argv := make([]string, 0, len(args)+3)
		argv = append(append(append(argv, at.Token), args...), at.Annotation, cfg.RetArg)
		v, acks, err := cfg.EvalAcquire(ctx, b, s, keys, argv)
		if err != nil {
			return nil, KeyErr(ctx, b, keys, err)
		}
		if !at.Try {
			NoteCounter(at, v, start)
		}
		l, err := Grant(ctx, v, h, kind, name, at.Token, start, cfg)
		return cfg.Acked(ctx, l, err, acks)
	}
}

// QueuedArg is the last ARGV of a waiting attempt at a Mutex-layout lock
// (mutex_acquire): "1" when an earlier attempt of the acquisition may have
// queued its entry, which a grant then takes out of the queue; "0" for
// the first, which queued nothing yet.
func QueuedArg(at *Attempt) string {
	if at.N > 1 {
		return "1"
	}
	return "0"
}

// NoteCounter keeps, from a waiting attempt's reply that found the
// primitive held (a Mutex's or a FairSemaphore's), the holder's fence it
// saw and when the attempt began (see attempt.heldStart).
func NoteCounter(at *Attempt, v backend.Value, start time.Time) {
	a, ok := v.([]backend.Value)
	if !ok || len(a) != 4 || a[0] != int64(0) {
		return
	}
	f, _ := a[3].(string)
	if n, err := strconv.ParseInt(f, 10, 64); err == nil && n > 0 {
		at.heldStart, at.fenceSeen = start, n
	} else {
		at.heldStart, at.fenceSeen = time.Time{}, 0
	}
}

// HandedLease is the lease a hand-over's message grants a waiting
// acquisition of a Mutex or a FairSemaphore (details: "fence hand", see
// hand_over and fair_hand_over in primitives/lua/blocks.lua and
// blocks_fair.lua), so that the waiter holds on the release's message
// alone, without an attempt to confirm: two requests per hand-over, the
// waiter's queueing attempt and the release. The release ran after the waiter's last attempt, since its
// fence is above the counter that attempt saw (a stale message, from a
// hand-over the attempt already found or outlived, is not), so the server
// holds the lock for the hand-over's time from a moment after that
// attempt began: the lease's deadline is that start plus the hand-over's
// time, less the drift allowance, and the renewer extends it to the TTL
// halfway there. It is nil, and the next attempt confirms the grant as
// before, when the lease would not be what Lock promises: without
// auto-extend (the lease must last its TTL), with WithReplicaAck (the
// grant must be acknowledged), with an annotation to store beside the
// grant (tracing's holder link), or with less than half the hand-over's
// time left (the waiter's process ran late).
func HandedLease(ctx context.Context, at *Attempt, details string, h Holder, kind latchkit.Kind, name string, cfg *Config) latchkit.Lease {
	if at.fenceSeen <= 0 || !cfg.AutoExtend || cfg.AckReplicas > 0 || at.Annotation != "" {
		return nil
	}
	fs, hs, ok := strings.Cut(details, " ")
	if !ok {
		return nil
	}
	fence, err1 := strconv.ParseInt(fs, 10, 64)
	hand, err2 := strconv.ParseInt(hs, 10, 64)
	if err1 != nil || err2 != nil || fence <= at.fenceSeen || hand <= 0 {
		return nil
	}
	d := time.Duration(hand) * time.Millisecond
	deadline := at.heldStart.Add(d - Drift(d))
	if time.Until(deadline) < d/2 {
		return nil
	}
	return newLeaseUntil(ctx, h, kind, name, at.Token, fence, deadline, cfg)
}

// Grant turns an acquire script's {1, fence} or {0, hint ms, holder}
// reply into a lease or a *latchkit.HeldError.
func Grant(ctx context.Context, v backend.Value, h Holder, kind latchkit.Kind, name, token string, start time.Time, cfg *Config) (latchkit.Lease, error) {
	ok, n, holder, err := Pair(v)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, HeldErr(n, holder)
	}
	return NewLease(ctx, h, kind, name, token, n, start, cfg), nil
}

// HeldErr is the error of an attempt told the primitive is held, for up to
// hint ms, by the holder whose annotation is holder.
func HeldErr(hint int64, holder string) *latchkit.HeldError {
	return &latchkit.HeldError{WaitHint: max(time.Duration(hint)*time.Millisecond, 0), Holder: holder}
}

// Passer is a holder that can give up a grant without ending its
// acquisition: what the token holds is freed (handed to the next waiter),
// but the token is not remembered among the name's finished tokens, as a
// release remembers it (see remember in lua/prelude.lua) so that a late
// copy of its attempt is refused. A waiting acquisition whose grant
// WithReplicaAck refused goes on with the same token: its next attempt
// must not be taken for a late copy.
//
// It goes on only once the pass's outcome is known. A pass is keyed by
// the token alone: one that may still run (in flight to a server that
// did not answer, or retried in the background by lease.release) would
// free whatever the token holds when it lands, a later grant of the same
// acquisition too, which the caller would then hold a lease on while
// Redis holds nothing (or another client holds the primitive). So a pass
// of unknown outcome ends the acquisition (errPassUnsure, see acked),
// and the token is given back (giveUp): nothing the token could be
// granted after that is handed to the caller.
type Passer interface {
	Pass(ctx context.Context, token string) (held bool, err error)
}

// passOn gives up l, just granted, for acked: through its holder's pass
// where it has one, else by Release.
func passOn(ctx context.Context, l latchkit.Lease) error {
	if ll, ok := l.(*Lease); ok {
		if p, ok := ll.h.(Passer); ok {
			return ll.release(ctx, p.Pass)
		}
	}
	return l.Release(ctx)
}

// EvalAcquire runs an acquire script: as is, or, with WithReplicaAck,
// followed by WAIT on its connection, returning how many replicas had it.
func (c *Config) EvalAcquire(ctx context.Context, b backend.Backend, s *backend.Script, keys, args []string) (backend.Value, int, error) {
	if c.AckReplicas == 0 {
		v, err := b.Eval(ctx, s, keys, args)
		return v, 0, err
	}
	return b.(backend.ReplicaAcker).EvalAck(ctx, s, keys, args, c.AckReplicas, c.AckTimeout) // checked by NewConfig
}

// errPassUnsure marks the error of an attempt whose grant, refused by
// WithReplicaAck, could not be passed on for sure (see Passer): the
// acquisition ends with it rather than try again with the same token.
var errPassUnsure = errors.New("passing the grant on failed with an unknown outcome (it may still free the token's next grant), so the acquisition ends")

// Acked passes on the outcome of an attempt (l, err) whose script reached
// acks replicas; with WithReplicaAck, a grant that reached too few is
// passed on (released) and turned into latchkit.ErrNotReplicated. The pass has the
// give-back's budget, past the caller's deadline too. One that fails with
// a known outcome (an error reply: it ran, or will never run) leaves the
// grant to the next attempt, which finds its own token, or to the
// give-back when the acquisition ends (giveUp). One whose outcome is
// unknown (Redis unreachable, or no reply within the budget) may still
// land, after a later grant of the same token too: the error then also
// matches errPassUnsure, which ends the acquisition (see retryable), and
// the pass's cause, as ErrUnavailable (a pass its own budget cut short
// does not match the context errors: the caller's context was live).
func (c *Config) Acked(ctx context.Context, l latchkit.Lease, err error, acks int) (latchkit.Lease, error) {
	if err != nil || c.AckReplicas == 0 || acks >= c.AckReplicas {
		return l, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), GiveBackTimeout)
	defer cancel()
	err = fmt.Errorf("%w: WAIT confirmed %d of %d replicas within %v", latchkit.ErrNotReplicated, acks, c.AckReplicas, c.AckTimeout)
	rerr := passOn(rctx, l)
	if oe, ok := rerr.(*latchkit.OpError); ok {
		rerr = oe.Err // the lease's "release": the caller's op is the acquisition's
	}
	switch {
	case rerr == nil:
		return nil, fmt.Errorf("%w; the grant was released", err)
	case unknownOutcome(rerr):
		if errors.Is(rerr, context.DeadlineExceeded) || errors.Is(rerr, context.Canceled) {
			// The pass's own budget (rctx), not the caller's context.
			rerr = &backend.Error{Class: backend.ErrUnavailable, Cause: fmt.Errorf("no reply within %v: %v", GiveBackTimeout, rerr)}
		}
		return nil, fmt.Errorf("%w; %w: %w", err, errPassUnsure, rerr)
	}
	return nil, fmt.Errorf("%w; releasing the grant failed too (it expires with its TTL): %w", err, rerr)
}
