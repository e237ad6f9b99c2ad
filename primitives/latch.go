package primitives

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	pkit "github.com/latchkit/latchkit/kit"
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

// latchLayout is a Latch's one hash (keyspace.LatchLayout, whose key and
// channel it makes: TestKitLayoutsAreKeyspaces).
var latchLayout = pkit.Layout{Kind: latchkit.KindLatch, Channel: ":latch:rel",
	Keys: []pkit.Key{{Name: "latch", Suffix: ":latch", Type: "hash"}}}

// The Latch scripts (lua/latch_*.lua), on package kit.
var (
	latchSet  = pkit.MustLoad(luaFiles, &latchLayout, "latch_set")
	latchDown = pkit.MustLoad(luaFiles, &latchLayout, "latch_down")
	latchRead = pkit.MustLoad(luaFiles, &latchLayout, "latch_read")
)

// latchRecheck bounds how long a waiting Wait sleeps without a message (a
// latch's recheck, which tests shorten): it re-reads the count at least this
// often. The key's remaining time is the natural bound (an expired latch is
// open), but it can be a day, and the wait loop jitters a hint by up to a
// sixteenth of it; re-reading once a minute keeps an expiry noticed within
// seconds, at one read a minute per waiter.
const latchRecheck = time.Minute

// latch is written on package kit alone (TestBuiltinsOnThePublicKit).
type latch struct {
	s       *pkit.Site
	recheck time.Duration // latchRecheck
}

// NewLatch returns the countdown latch named name; every call is one Lua
// script. A TrySetCount or CountDown call is applied at most once and
// retries while Redis cannot be reached: give it (and Wait) a context with
// a deadline. A set latch expires WithRetention (default 24h) after its last
// change and then reads as open: keep the retention well above the longest
// pause between count-downs. See docs/guarantees.md, "The latch".
func NewLatch(cl *Client, name string, opts ...LatchOption) (Latch, error) {
	s, err := pkit.NewSite(cl, &latchLayout, name, latchOptions(opts)...)
	if err != nil {
		return nil, err
	}
	return &latch{s: s, recheck: latchRecheck}, nil
}

func (l *latch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if n < 1 {
		return false, &latchkit.OpError{Op: "setcount", Kind: latchkit.KindLatch, Name: l.s.Name(),
			Err: fmt.Errorf("%w: count %d is below 1", latchkit.ErrInvalid, n)}
	}
	v, err := l.s.Do(ctx, "setcount", latchSet, strconv.FormatInt(n, 10))
	if err != nil {
		return false, err
	}
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, badReply("setcount", l.s.Name(), v)
}

func (l *latch) CountDown(ctx context.Context) error {
	v, err := l.s.Do(ctx, "countdown", latchDown)
	if err != nil {
		return err
	}
	if _, ok := v.(int64); !ok {
		return badReply("countdown", l.s.Name(), v)
	}
	return nil
}

func (l *latch) Count(ctx context.Context) (int64, error) {
	n, _, _, err := l.read(ctx)
	return n, err
}

func (l *latch) Wait(ctx context.Context) error {
	var round string
	seen := false
	return l.s.Wait(ctx, "Wait", func(ctx context.Context) error {
		n, pttl, r, err := l.read(ctx)
		if oe := (*latchkit.OpError)(nil); errors.As(err, &oe) {
			return oe.Err // the wait's error says its op
		}
		if !seen {
			round, seen = r, true
		}
		if n == 0 || r != round {
			// Open, or the round first seen ended (it reached zero or
			// expired) and another began before this read.
			return nil
		}
		hint := l.recheck
		if pttl >= 0 {
			hint = min(time.Duration(pttl)*time.Millisecond, l.recheck)
		}
		return &countErr{n: n, held: &latchkit.HeldError{WaitHint: hint}}
	})
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
// without one) and the round ("" when none). Its error is a
// *latchkit.OpError of the op "count".
func (l *latch) read(ctx context.Context) (n, pttl int64, round string, err error) {
	v, err := l.s.Eval(ctx, "count", latchRead)
	if err != nil {
		return 0, 0, "", err
	}
	a, ok := v.([]backend.Value)
	if !ok || len(a) != 3 {
		return 0, 0, "", badReply("count", l.s.Name(), v)
	}
	s, ok1 := a[0].(string)
	pttl, ok2 := a[1].(int64)
	if a[2] != nil {
		round, ok = a[2].(string)
	}
	if n, err = strconv.ParseInt(s, 10, 64); !ok1 || !ok2 || !ok || err != nil || n < 0 {
		return 0, 0, "", badReply("count", l.s.Name(), v)
	}
	return n, pttl, round, nil
}

// badReply is the error of a latch call op whose script replied v, a
// shape it never replies.
func badReply(op, name string, v backend.Value) error {
	return &latchkit.OpError{Op: op, Kind: latchkit.KindLatch, Name: name, Err: fmt.Errorf("unexpected script reply: %#v", v)}
}
