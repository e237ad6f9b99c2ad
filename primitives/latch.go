package primitives

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/internal/pubsub"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Latch is a countdown latch shared over Redis, like Java's CountDownLatch
// and Redisson's RCountDownLatch: one party sets a count, others count it
// down, and waiters return once it reaches zero. It is reusable: a latch
// at zero can be set again. Counts are int64.
type Latch interface {
	// TrySetCount sets the count to n (at least 1) if the latch is open
	// (its count is zero, it was never set, or its key expired) and
	// reports whether it did; it reports false, changing nothing, when a
	// count above zero is set.
	TrySetCount(ctx context.Context, n int64) (bool, error)
	// CountDown lowers the count by one. At zero it does nothing: the
	// count never goes below zero. The count-down that reaches zero wakes
	// every waiter.
	CountDown(ctx context.Context) error
	// Count returns the current count: 0 when the latch is open.
	Count(ctx context.Context) (int64, error)
	// Wait returns once the count is zero: at once on an open latch
	// (never set, at zero, or expired). The error matches ctx.Err() with
	// errors.Is when ctx ended the wait.
	Wait(ctx context.Context) error
}

// The Latch scripts (lua/latch_*.lua): one hash per latch (LatchLayout).
var (
	latchSet  = loadScript("latch_set")
	latchDown = loadScript("latch_down")
	latchRead = loadScript("latch_read")
)

// latchRecheck bounds how long a waiting Wait sleeps without a message: it
// re-reads the count at least this often. The key's remaining time is the
// natural bound (an expired latch is open), but it can be a day, and the
// wait loop jitters a hint by up to a sixteenth of it; re-reading once a
// minute keeps an expiry noticed within seconds, at one read a minute per
// waiter.
const latchRecheck = time.Minute

type latch struct {
	b       backend.Backend
	name    string
	cfg     kit.Config
	keys    []string // {the latch's hash}
	channel string
	chans   []string // {channel}, shared by every Wait (read-only)
}

// NewLatch returns the countdown latch named name; every call is one Lua
// script. A TrySetCount or CountDown call is applied at most once and
// retries while Redis cannot be reached: give it (and Wait) a context with
// a deadline. A set latch expires WithRetention (default 24h) after its last
// change and then reads as open: keep the retention well above the longest
// pause between count-downs. See docs/guarantees.md, "The latch".
func NewLatch(cl *Client, name string, opts ...LatchOption) (Latch, error) {
	b := kit.BackendOf(cl.core())
	cfg, err := newConfig(latchkit.KindLatch, cl.core(), name, lockOptions(opts, LatchOption.latchOption))
	if err != nil {
		return nil, err
	}
	ch := keyspace.LatchLayout.Channel(cfg.Prefix, name)
	return &latch{b: b, name: name, cfg: cfg, keys: keyspace.LatchLayout.KeysOf(cfg.Prefix, name),
		channel: ch, chans: []string{ch}}, nil
}

func (l *latch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if n < 1 {
		return false, kit.Invalid("setcount", latchkit.KindLatch, l.name, "count %d is below 1", n)
	}
	v, err := l.eval(ctx, latchSet, []string{kit.NewToken(), strconv.FormatInt(n, 10), l.cfg.RetArg})
	if err != nil {
		err = kit.KeyErr(ctx, l.b, l.keys, err)
	}
	ok, err := kit.Flag(v, err)
	if err != nil {
		return false, kit.OpErr("setcount", latchkit.KindLatch, l.name, err)
	}
	return ok, nil
}

func (l *latch) CountDown(ctx context.Context) error {
	v, err := l.eval(ctx, latchDown, []string{kit.NewToken(), l.channel, l.cfg.RetArg})
	if err == nil {
		if _, ok := v.(int64); !ok {
			err = kit.BadReply(v)
		}
	}
	if err != nil {
		return kit.OpErr("countdown", latchkit.KindLatch, l.name, kit.KeyErr(ctx, l.b, l.keys, err))
	}
	return nil
}

func (l *latch) Count(ctx context.Context) (int64, error) {
	if err := l.cfg.Begin(); err != nil {
		return 0, kit.OpErr("count", latchkit.KindLatch, l.name, err)
	}
	defer l.cfg.End()
	n, _, _, err := l.read(ctx)
	if err != nil {
		return 0, kit.OpErr("count", latchkit.KindLatch, l.name, err)
	}
	return n, nil
}

func (l *latch) Wait(ctx context.Context) error {
	var round string
	seen := false
	attempt := func(ctx context.Context, _ *kit.Attempt) (latchkit.Lease, error) {
		n, pttl, r, err := l.read(ctx)
		if err != nil {
			return nil, err
		}
		if !seen {
			round, seen = r, true
		}
		if n == 0 || r != round {
			// Open, or the round first seen ended (it reached zero or
			// expired) and another began before this read.
			return nil, nil
		}
		hint := latchRecheck
		if pttl >= 0 {
			hint = min(time.Duration(pttl)*time.Millisecond, latchRecheck)
		}
		return nil, &countErr{n: n, held: kit.HeldErr(hint.Milliseconds(), "")}
	}
	_, err := l.cfg.Acquire(ctx, l.b, kit.Acquisition{Op: "wait", Kind: latchkit.KindLatch, Name: l.name,
		Chans: l.chans, Attempt: attempt, NoLease: true})
	return err
}

// countErr is the outcome of a Wait's read that found the count above
// zero: a *latchkit.HeldError (so that the wait loop waits, and it matches
// latchkit.ErrNotAcquired) that says the count.
type countErr struct {
	n    int64
	held *latchkit.HeldError
}

func (e *countErr) Error() string { return fmt.Sprintf("latch count is %d", e.n) }
func (e *countErr) Unwrap() error { return e.held }

// read runs lua/latch_read.lua: the count, the key's PTTL (ms; negative
// without one) and the round ("" when none).
func (l *latch) read(ctx context.Context) (n, pttl int64, round string, err error) {
	v, err := l.b.Eval(ctx, latchRead, l.keys, nil)
	if err != nil {
		return 0, 0, "", kit.KeyErr(ctx, l.b, l.keys, err)
	}
	a, ok := v.([]backend.Value)
	if !ok || len(a) != 3 {
		return 0, 0, "", kit.BadReply(v)
	}
	s, ok1 := a[0].(string)
	pttl, ok2 := a[1].(int64)
	if a[2] != nil {
		round, ok = a[2].(string)
	}
	if n, err = strconv.ParseInt(s, 10, 64); !ok1 || !ok2 || !ok || err != nil || n < 0 {
		return 0, 0, "", kit.BadReply(v)
	}
	return n, pttl, round, nil
}

// eval runs a script that carries its call's id in ARGV[1], trying again
// with the same arguments while Redis cannot be reached, paced by the
// retry policy, until it gets an answer or ctx ends: the script recognizes
// its id, so a try that did get through is not applied twice. When ctx
// ended the call, the error matches ctx's error. Errors are as the backend
// returned them (see kit.ScriptErr).
func (l *latch) eval(ctx context.Context, s *backend.Script, args []string) (backend.Value, error) {
	if err := l.cfg.Begin(); err != nil {
		return nil, err
	}
	defer l.cfg.End()
	var policy backoff.BackOff
	for tries := 1; ; tries++ {
		v, err := l.b.Eval(ctx, s, l.keys, args)
		if err == nil {
			return v, nil
		}
		if cerr := kit.CtxDone(ctx); cerr != nil {
			if !errors.Is(err, cerr) {
				err = fmt.Errorf("%w: %w", cerr, err)
			}
			return nil, err
		}
		if !errors.Is(err, backend.ErrUnavailable) {
			return nil, err
		}
		if policy == nil {
			policy = l.cfg.Retry()
			// Close ends the retries too.
			var unbind func()
			ctx, unbind = l.cfg.Bind(ctx)
			defer unbind()
		}
		d := policy.NextBackOff()
		if d == backoff.Stop {
			return nil, fmt.Errorf("gave up after %d tries: %w", tries, err)
		}
		if werr := pubsub.Sleep(ctx, d); werr != nil {
			if cause := context.Cause(ctx); cause == kit.ErrClientClosed {
				werr = fmt.Errorf("%w: %w", cause, werr)
			}
			return nil, fmt.Errorf("%w: %w", werr, err)
		}
	}
}
