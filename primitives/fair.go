package primitives

import (
	"context"
	"github.com/latchkit/latchkit/internal/keyspace"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// The FairSemaphore scripts (lua/fair_*.lua; keys in fair_acquire.lua):
// a queue of tickets in arrival order, the first limit live tickets
// holding.
var (
	fairAcquire  = loadScript("fair_acquire")
	fairWithdraw = loadScript("fair_withdraw")
	fairRelease  = loadScript("fair_release")
	fairExtend   = loadScript("fair_extend")
	fairTTL      = loadScript("fair_ttl")
	fairLimit    = loadScript("fair_limit")
)

type fairSemaphore struct {
	site
	wchans  []string // {channel, inbox}: a waiting acquisition's
	args    []string // ttl, limit, waiter timeout, "0" (a waiting attempt), inbox, permits ("1"), stored
	tryArgs []string // the same with "1" (a Try leaves no ticket) and no inbox
	relArgs []string // release and withdraw ARGV after the token
	stored  string   // "1": grant by a stored limit (SetLimit); a FairMutex's "0"

	attemptFn, tryFn func(context.Context, *attempt) (latchkit.Lease, error)
	withdrawFn       func(context.Context, string) error
	handedFn         func(context.Context, *attempt, string) latchkit.Lease
}

// NewFairSemaphore returns a semaphore of limit permits granted in arrival
// order: it never over-grants nor starves a waiter, and a request for n
// permits at the head (AcquireN) is not overtaken by smaller ones behind
// it. An abandoned waiter drops out after WithWaiterTimeout. TryAcquire
// wins only a free permit with nobody queued ahead, and leaves no ticket.
func NewFairSemaphore(cl *Client, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := newFairSemaphore(latchkit.KindFairSemaphore, cl, name, limit, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewFairMutex returns a Mutex that grants the lock in arrival order
// (Redisson's fair lock): a FairSemaphore of one permit, with the same
// lease semantics as a Mutex.
func NewFairMutex(cl *Client, name string, opts ...Option) (Mutex, error) {
	s, err := newFairSemaphore(latchkit.KindFairMutex, cl, name, 1, opts)
	if err != nil {
		return nil, err
	}
	return fairMutex{s}, nil
}

type fairMutex struct{ s *fairSemaphore }

func (m fairMutex) Lock(ctx context.Context) (latchkit.Lease, error) {
	return m.s.acquire(ctx, 1, false)
}

func (m fairMutex) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return m.s.acquire(ctx, 1, true)
}

func newFairSemaphore(kind latchkit.Kind, cl *Client, name string, limit int, opts []Option) (*fairSemaphore, error) {
	b := backendOf(cl)
	st, err := newSite(keyspace.FairLayout, kind, cl, name, limit, opts)
	if err != nil {
		return nil, err
	}
	cfg, channel := st.cfg, st.channel
	inbox := pubsub.Inbox(b, channel)
	stored := "1"
	if kind == latchkit.KindFairMutex {
		stored = "0" // one permit, whatever a FairSemaphore of the name stored
	}
	s := &fairSemaphore{
		site:    st,
		wchans:  []string{channel, inbox},
		args:    []string{ms(cfg.ttl), strconv.Itoa(limit), ms(cfg.waiterTimeout), "0", inbox, "1", stored},
		tryArgs: []string{ms(cfg.ttl), strconv.Itoa(limit), ms(cfg.waiterTimeout), "1", "", "1", stored},
		relArgs: []string{channel, strconv.Itoa(limit), ms(min(cfg.ttl, cfg.waiterTimeout)), cfg.retArg, stored},
		stored:  stored,
	}
	s.attemptFn = scriptAttempt(b, fairAcquire, s.keys, s.args, s, kind, name, &s.cfg)
	s.tryFn = scriptAttempt(b, fairAcquire, s.keys, s.tryArgs, s, kind, name, &s.cfg)
	// The give-back of an acquisition that ended without a grant: its ticket
	// leaves the queue, and a permit it holds (granted by an attempt whose
	// reply was lost, or handed over) is passed on.
	s.withdrawFn = func(ctx context.Context, token string) error {
		_, err := s.b.Eval(ctx, fairWithdraw, s.keys, append([]string{token}, s.relArgs...))
		return err
	}
	// A waiting acquisition holds on its hand-over's message (see
	// handedLease): the release that grants it is the last request.
	s.handedFn = func(ctx context.Context, at *attempt, details string) latchkit.Lease {
		return handedLease(ctx, at, details, s, kind, name, &s.cfg)
	}
	return s, nil
}

func (s *fairSemaphore) Acquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, 1, false)
}

func (s *fairSemaphore) TryAcquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, 1, true)
}

func (s *fairSemaphore) AcquireN(ctx context.Context, n int) (latchkit.Lease, error) {
	return s.acquire(ctx, n, false)
}

func (s *fairSemaphore) TryAcquireN(ctx context.Context, n int) (latchkit.Lease, error) {
	return s.acquire(ctx, n, true)
}

func (s *fairSemaphore) SetLimit(ctx context.Context, limit int) error {
	if err := s.checkLimit(limit); err != nil {
		return err
	}
	if err := s.cfg.begin(); err != nil {
		return opErr("set_limit", s.kind, s.name, err)
	}
	defer s.cfg.end()
	_, err := s.b.Eval(ctx, fairLimit, s.keys, []string{strconv.Itoa(limit), s.channel, s.relArgs[2], s.cfg.retArg})
	if err != nil {
		return opErr("set_limit", s.kind, s.name, keyErr(ctx, s.b, s.keys, err))
	}
	return nil
}

func (s *fairSemaphore) acquire(ctx context.Context, n int, try bool) (latchkit.Lease, error) {
	if err := s.checkPermits(n); err != nil {
		return nil, err
	}
	a := acquisition{op: "acquire", kind: s.kind, name: s.name, chans: s.wchans, try: try,
		attempt: s.attemptFn, giveBack: s.withdrawFn, queues: true, wakeID: true, handed: s.handedFn}
	if try {
		a.chans = s.chans
		a.attempt = s.tryFn
		a.handed = nil
	}
	if n > 1 {
		args := s.args
		if try {
			args = s.tryArgs
		}
		args = append(args[:5:5], strconv.Itoa(n), s.stored)
		a.attempt = scriptAttempt(s.b, fairAcquire, s.keys, args, s, s.kind, s.name, &s.cfg)
	}
	if s.kind == latchkit.KindFairMutex {
		a.op = "lock"
	}
	return s.cfg.acquire(ctx, s.b, a)
}

func (s *fairSemaphore) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, s, &s.cfg, token, ttl)
}

func (s *fairSemaphore) release(ctx context.Context, token string) (bool, error) {
	return flag(s.b.Eval(ctx, fairRelease, s.keys, append([]string{token}, s.relArgs...)))
}

// pass frees the permits token was just granted, without ending the
// acquisition (see passer): fair_withdraw with "0" as its end flag, which
// does not remember the token. Its ticket leaves the queue (the next
// tickets may be granted); its next attempt takes a new one.
func (s *fairSemaphore) pass(ctx context.Context, token string) (bool, error) {
	_, err := s.b.Eval(ctx, fairWithdraw, s.keys, append(append([]string{token}, s.relArgs...), "0"))
	return true, err
}

func (s *fairSemaphore) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(s.b.Eval(ctx, fairTTL, []string{s.keys[1], s.keys[4]}, []string{token}))
}
