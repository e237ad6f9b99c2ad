package primitives

import (
	"context"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Semaphore is a number of permits (its limit), of which at most the limit
// are held at any time.
type Semaphore interface {
	// Acquire waits until a permit is granted or ctx is done.
	Acquire(ctx context.Context) (latchkit.Lease, error)
	// TryAcquire makes one attempt; it returns an error matching
	// latchkit.ErrNotAcquired when every permit is held.
	TryAcquire(ctx context.Context) (latchkit.Lease, error)
	// AcquireN waits until n permits are granted at once, as one lease
	// whose Release gives all n back, or until ctx is done. n below 1, or
	// above the limit, is an error matching latchkit.ErrInvalid, and
	// nothing is changed; so is a waiting AcquireN whose n a SetLimit made
	// larger than the limit.
	AcquireN(ctx context.Context, n int) (latchkit.Lease, error)
	// TryAcquireN makes one attempt at n permits at once; it returns an
	// error matching latchkit.ErrNotAcquired when fewer than n are free.
	TryAcquireN(ctx context.Context, n int) (latchkit.Lease, error)
	// SetLimit stores limit in Redis: every client of the name grants by
	// it from then on (a FairMutex stays one permit), until the retention
	// (WithRetention) has passed since the name's last grant or SetLimit.
	// Lowering it revokes no permit. limit below 1 is an error matching
	// latchkit.ErrInvalid, and nothing is changed.
	SetLimit(ctx context.Context, limit int) error
}

// The Semaphore scripts (lua/sem_*.lua; keys in sem_acquire.lua).
var (
	semAcquire = loadScript("sem_acquire")
	semRelease = loadScript("sem_release")
	semExtend  = loadScript("sem_extend")
	semTTL     = loadScript("sem_ttl")
	semLimit   = loadScript("sem_limit")
)

type semaphore struct {
	site
	args []string // ttl, limit, permits ("1"), "0" (no waiter mark: see sem_acquire.lua)

	attemptFn  func(context.Context, *attempt) (latchkit.Lease, error)
	giveBackFn func(context.Context, string) error
}

// NewSemaphore returns a counting semaphore of limit permits named name:
// never more than limit held, whatever the clients' clocks, and a crashed
// holder's permit is free after its TTL. Every user of the name must give
// the same limit, or store one with SetLimit. It is not fair: a request for
// many permits (AcquireN) can be overtaken by smaller ones; see
// NewFairSemaphore.
func NewSemaphore(cl *Client, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := newSemaphore(latchkit.KindSemaphore, cl, name, limit, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func newSemaphore(kind latchkit.Kind, cl *Client, name string, limit int, opts []Option) (*semaphore, error) {
	b := backendOf(cl)
	st, err := newSite(keyspace.SemLayout, kind, cl, name, limit, opts)
	if err != nil {
		return nil, err
	}
	s := &semaphore{site: st, args: []string{ms(st.cfg.ttl), strconv.Itoa(limit), "1", "0"}}
	s.attemptFn = scriptAttempt(b, semAcquire, s.keys, s.args, s, kind, name, &s.cfg)
	// The give-back of an acquisition that ended without a grant: a
	// permit the token may hold (nothing else is left behind), and the
	// token remembered, so that a late copy of its attempt is refused.
	s.giveBackFn = func(ctx context.Context, token string) error {
		_, err := s.b.Eval(ctx, semRelease, s.keys, []string{token, s.channel, "1"})
		return err
	}
	return s, nil
}

func (s *semaphore) Acquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, 1, false)
}

func (s *semaphore) TryAcquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, 1, true)
}

func (s *semaphore) AcquireN(ctx context.Context, n int) (latchkit.Lease, error) {
	return s.acquire(ctx, n, false)
}

func (s *semaphore) TryAcquireN(ctx context.Context, n int) (latchkit.Lease, error) {
	return s.acquire(ctx, n, true)
}

func (s *semaphore) acquire(ctx context.Context, n int, try bool) (latchkit.Lease, error) {
	if err := s.checkPermits(n); err != nil {
		return nil, err
	}
	attempt := s.attemptFn
	if n > 1 {
		mark := ms(s.cfg.waiterTimeout) // a waiter for several permits makes releases wake every waiter
		if try {
			mark = "0"
		}
		attempt = scriptAttempt(s.b, semAcquire, s.keys, []string{s.args[0], s.args[1], strconv.Itoa(n), mark}, s, s.kind, s.name, &s.cfg)
	}
	return s.cfg.acquire(ctx, s.b, acquisition{op: "acquire", kind: s.kind, name: s.name, chans: s.chans, try: try,
		attempt: attempt, giveBack: s.giveBackFn})
}

func (s *semaphore) SetLimit(ctx context.Context, limit int) error {
	if err := s.checkLimit(limit); err != nil {
		return err
	}
	if err := s.cfg.begin(); err != nil {
		return opErr("set_limit", s.kind, s.name, err)
	}
	defer s.cfg.end()
	_, err := s.b.Eval(ctx, semLimit, s.keys[6:7], []string{strconv.Itoa(limit), s.cfg.retArg, s.channel})
	if err != nil {
		return opErr("set_limit", s.kind, s.name, keyErr(ctx, s.b, s.keys[6:7], err))
	}
	return nil
}

func (s *semaphore) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, s, &s.cfg, token, ttl)
}

func (s *semaphore) release(ctx context.Context, token string) (bool, error) {
	return flag(s.b.Eval(ctx, semRelease, s.keys, []string{token, s.channel}))
}

// pass frees the permits token was just granted, without ending the
// acquisition (see passer): sem_release with "0" as its give-back flag,
// which does not remember the token.
func (s *semaphore) pass(ctx context.Context, token string) (bool, error) {
	_, err := s.b.Eval(ctx, semRelease, s.keys, []string{token, s.channel, "0"})
	return true, err
}

func (s *semaphore) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(s.b.Eval(ctx, semTTL, s.keys[:1], []string{token}))
}

// flag decodes a 1/0 script reply.
func flag(v backend.Value, err error) (bool, error) {
	if err != nil {
		return false, scriptErr(err)
	}
	n, ok := v.(int64)
	if !ok {
		return false, badReply(v)
	}
	return n == 1, nil
}

// remaining decodes a TTL script reply: ms left, or -3 when not held.
func remaining(v backend.Value, err error) (time.Duration, bool, error) {
	if err != nil {
		return 0, false, scriptErr(err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, false, badReply(v)
	}
	if n == -3 {
		return 0, false, nil
	}
	return max(time.Duration(n)*time.Millisecond, 0), true, nil
}

// invalid is the ErrInvalid error of a bad argument.
func invalid(op string, kind latchkit.Kind, name, format string, a ...any) error {
	return &latchkit.OpError{Op: op, Kind: kind, Name: name,
		Err: fmt.Errorf("%w: "+format, append([]any{latchkit.ErrInvalid}, a...)...)}
}
