// Package ratelimit is a keyed rate limiter shared by processes over Redis:
// at most limit takes of a name in any sliding window. It is written on
// package kit alone, as a primitive of a user's would be (docs/kit.md).
//
// A waiting Take sleeps until the window has room (the script says when,
// by the server's clock) or a refunded take wakes it. Takes share
// latchkit's Client, options and vocabulary with the built-ins: the retry
// policy, middleware (spans named latchkit.Take), the Client's Close
// withdrawing waiting takes, and errors matching latchkit.ErrNotAcquired,
// ErrInvalid, ErrUnavailable and ErrClosed.
//
// Each take costs one script call, which writes the name's log of takes
// (a sorted set of at most limit entries, expiring with the window). A
// take whose outcome the client could not learn (a lost reply, a caller
// that gave up mid-call) is refunded, and its token remembered for a
// minute so that a late copy of it takes nothing: only those takes write
// more.
package ratelimit

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/kit"
)

//go:embed lua/*.lua
var lua embed.FS

// KindRateLimiter is the kind of a rate limiter in errors, spans, metrics
// and logs.
const KindRateLimiter latchkit.Kind = "rate_limiter"

var layout = kit.Layout{Kind: KindRateLimiter, Keys: []kit.Key{
	{Name: "log", Suffix: ":rl", Type: "zset"},       // token -> server ms of its take
	{Name: "gone", Suffix: ":rl:gone", Type: "zset"}, // refunded tokens (remember)
}}

var (
	take   = kit.MustLoad(lua, &layout, "rl_take")
	refund = kit.MustLoad(lua, &layout, "rl_refund")
)

// Limiter lets at most a limit of takes of one name through in any window,
// across every process that uses the name with the same limit and window.
type Limiter struct {
	s    *kit.Site
	args []string // limit, window ms
}

// New returns the rate limiter named name on cl: at most limit takes in
// any window (whole milliseconds), opts being the lock family's options of
// package primitives (WithPrefix, WithRetry, WithMiddleware). A limit
// below 1, a window below 1ms, and what kit.NewSite refuses, are refused
// with an error matching latchkit.ErrInvalid.
func New(cl *kit.Client, name string, limit int, window time.Duration, opts ...kit.Option) (*Limiter, error) {
	if limit < 1 || window < time.Millisecond {
		return nil, &latchkit.OpError{Op: "new", Kind: KindRateLimiter, Name: name,
			Err: fmt.Errorf("%w: limit %d and window %v: a limit of at least 1 and a window of at least 1ms", latchkit.ErrInvalid, limit, window)}
	}
	s, err := kit.NewSite(cl, &layout, name, opts...)
	if err != nil {
		return nil, err
	}
	return &Limiter{s: s, args: []string{strconv.Itoa(limit), strconv.FormatInt(window.Milliseconds(), 10)}}, nil
}

// Take waits until the window has room and takes a place in it, or until
// ctx ends (an error matching ctx's) or the retry policy gives up (one
// matching latchkit.ErrNotAcquired).
func (l *Limiter) Take(ctx context.Context) error { return l.take(ctx, false) }

// TryTake takes a place in the window if it has room now, or returns an
// error matching latchkit.ErrNotAcquired (a *latchkit.HeldError whose
// WaitHint says when it will have room).
func (l *Limiter) TryTake(ctx context.Context) error { return l.take(ctx, true) }

func (l *Limiter) take(ctx context.Context, try bool) error {
	if l == nil || l.s == nil {
		return &latchkit.OpError{Op: "take", Kind: KindRateLimiter, Err: fmt.Errorf("%w: a nil Limiter", latchkit.ErrInvalid)}
	}
	_, err := l.s.Acquire(ctx, kit.Acquisition{Op: "Take", Try: try, Attempt: take, Args: l.args, GiveBack: refund})
	return err
}
