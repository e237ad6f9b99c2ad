package primitives

import (
	"context"
	"strconv"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/latchkit/latchkit"
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
	kit.Site
	args []string // ttl, limit, permits ("1"), "0" (no waiter mark: see sem_acquire.lua)

	attemptFn  func(context.Context, *kit.Attempt) (latchkit.Lease, error)
	giveBackFn func(context.Context, string) error
}

// NewSemaphore returns a counting semaphore of limit permits named name:
// never more than limit held, whatever the clients' clocks, and a crashed
// holder's permit is free after its TTL. Every user of the name must give
// the same limit, or store one with SetLimit. It is not fair: a request for
// many permits (AcquireN) can be overtaken by smaller ones; see
// NewFairSemaphore.
func NewSemaphore(cl *Client, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := newSemaphore(latchkit.KindSemaphore, cl.core(), name, limit, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func newSemaphore(kind latchkit.Kind, cl *kit.Client, name string, limit int, opts []Option) (*semaphore, error) {
	b := kit.BackendOf(cl)
	st, err := newSite(keyspace.SemLayout, kind, cl, name, limit, opts)
	if err != nil {
		return nil, err
	}
	s := &semaphore{Site: st, args: []string{kit.Ms(st.Cfg.TTL), strconv.Itoa(limit), "1", "0"}}
	s.attemptFn = kit.ScriptAttempt(b, semAcquire, s.Keys, s.args, s, kind, name, &s.Cfg)
	// The give-back of an acquisition that ended without a grant: a
	// permit the token may hold (nothing else is left behind), and the
	// token remembered, so that a late copy of its attempt is refused.
	s.giveBackFn = func(ctx context.Context, token string) error {
		_, err := s.B.Eval(ctx, semRelease, s.Keys, []string{token, s.Channel, "1"})
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
	if err := s.CheckPermits(n); err != nil {
		return nil, err
	}
	attempt := s.attemptFn
	if n > 1 {
		mark := kit.Ms(s.Cfg.WaiterTimeout) // a waiter for several permits makes releases wake every waiter
		if try {
			mark = "0"
		}
		attempt = kit.ScriptAttempt(s.B, semAcquire, s.Keys, []string{s.args[0], s.args[1], strconv.Itoa(n), mark}, s, s.Kind, s.Name, &s.Cfg)
	}
	return s.Cfg.Acquire(ctx, s.B, kit.Acquisition{Op: "acquire", Kind: s.Kind, Name: s.Name, Chans: s.Chans, Try: try,
		Attempt: attempt, GiveBack: s.giveBackFn})
}

func (s *semaphore) SetLimit(ctx context.Context, limit int) error {
	if err := s.CheckLimit(limit); err != nil {
		return err
	}
	if err := s.Cfg.Begin(); err != nil {
		return kit.OpErr("set_limit", s.Kind, s.Name, err)
	}
	defer s.Cfg.End()
	_, err := s.B.Eval(ctx, semLimit, s.Keys[6:7], []string{strconv.Itoa(limit), s.Cfg.RetArg, s.Channel})
	if err != nil {
		return kit.OpErr("set_limit", s.Kind, s.Name, kit.KeyErr(ctx, s.B, s.Keys[6:7], err))
	}
	return nil
}

func (s *semaphore) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return kit.ExtendBy(ctx, s, &s.Cfg, token, ttl)
}

func (s *semaphore) Release(ctx context.Context, token string) (bool, error) {
	return kit.Flag(s.B.Eval(ctx, semRelease, s.Keys, []string{token, s.Channel}))
}

// Pass frees the permits token was just granted, without ending the
// acquisition (see kit.Passer): sem_release with "0" as its give-back flag,
// which does not remember the token.
func (s *semaphore) Pass(ctx context.Context, token string) (bool, error) {
	_, err := s.B.Eval(ctx, semRelease, s.Keys, []string{token, s.Channel, "0"})
	return true, err
}

func (s *semaphore) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	return kit.Remaining(s.B.Eval(ctx, semTTL, s.Keys[:1], []string{token}))
}

// RenewCall is semaphore's one extend call: holders and their fences as
// KEYS; annotations and weights as companions.
func (s *semaphore) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.B, semExtend, []string{s.Keys[0], s.Keys[2]}, kit.ExtendArgs(token, ttl, s.Keys[4], s.Keys[5]), s.Cfg.AckReplicas == 0
}
