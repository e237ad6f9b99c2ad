package primitives

import (
	"context"
	"strconv"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

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
	kit.Site
	wchans  []string // {channel, inbox}: a waiting acquisition's
	args    []string // ttl, limit, waiter timeout, "0" (a waiting attempt), inbox, permits ("1"), stored
	tryArgs []string // the same with "1" (a Try leaves no ticket) and no inbox
	relArgs []string // release and withdraw ARGV after the token
	stored  string   // "1": grant by a stored limit (SetLimit); a FairMutex's "0"

	attemptFn, tryFn func(context.Context, *kit.Attempt) (latchkit.Lease, error)
	withdrawFn       func(context.Context, string) error
	handedFn         func(context.Context, *kit.Attempt, string) latchkit.Lease
}

// NewFairSemaphore returns a semaphore of limit permits granted in arrival
// order: it never over-grants nor starves a waiter, and a request for
// several permits at the head (AcquireN) is not overtaken by smaller ones
// behind it. An abandoned waiter drops out after WithWaiterTimeout. TryAcquire
// wins only a free permit with nobody queued ahead, and leaves no ticket.
func NewFairSemaphore(cl *Client, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := newFairSemaphore(latchkit.KindFairSemaphore, core(cl), name, limit, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewFairMutex returns a Mutex that grants the lock in arrival order
// (Redisson's fair lock): a FairSemaphore of one permit, with the same
// lease semantics as a Mutex.
func NewFairMutex(cl *Client, name string, opts ...Option) (Mutex, error) {
	s, err := newFairSemaphore(latchkit.KindFairMutex, core(cl), name, 1, opts)
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

func newFairSemaphore(kind latchkit.Kind, cl *kit.Client, name string, limit int, opts []Option) (*fairSemaphore, error) {
	b := kit.BackendOf(cl)
	st, err := newSite(keyspace.FairLayout, kind, cl, name, limit, opts)
	if err != nil {
		return nil, err
	}
	st.Keys = st.Keys[:keyspace.FairLayout.Scripted()] // the scripts' KEYS (see fair_acquire.lua)
	cfg, channel := st.Cfg, st.Channel
	inbox := pubsub.Inbox(b, channel)
	stored := "1"
	if kind == latchkit.KindFairMutex {
		stored = "0" // one permit, whatever a FairSemaphore of the name stored
	}
	s := &fairSemaphore{
		Site:    st,
		wchans:  []string{channel, inbox},
		args:    []string{kit.Ms(cfg.TTL), strconv.Itoa(limit), kit.Ms(cfg.WaiterTimeout), "0", inbox, "1", stored},
		tryArgs: []string{kit.Ms(cfg.TTL), strconv.Itoa(limit), kit.Ms(cfg.WaiterTimeout), "1", "", "1", stored},
		relArgs: []string{channel, strconv.Itoa(limit), kit.Ms(min(cfg.TTL, cfg.WaiterTimeout)), cfg.RetArg, stored},
		stored:  stored,
	}
	s.attemptFn = kit.ScriptAttempt(b, fairAcquire, s.Keys, s.args, s, kind, name, &s.Cfg)
	s.tryFn = kit.ScriptAttempt(b, fairAcquire, s.Keys, s.tryArgs, s, kind, name, &s.Cfg)
	// The give-back of an acquisition that ended without a grant it saw:
	// its ticket leaves the queue, a permit it holds (granted by an attempt
	// whose reply was lost, or handed over) is passed on, and the token is
	// remembered, so that a late copy of its attempt is refused.
	s.withdrawFn = func(ctx context.Context, token string) error {
		_, err := s.B.Eval(ctx, fairWithdraw, s.Keys, append([]string{token}, s.relArgs...))
		return err
	}
	// A waiting acquisition holds on its hand-over's message (see
	// handedLease): the release that grants it is the last request.
	s.handedFn = func(ctx context.Context, at *kit.Attempt, details string) latchkit.Lease {
		return kit.HandedLease(ctx, at, details, s, kind, name, &s.Cfg)
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
	if err := s.CheckLimit(limit); err != nil {
		return err
	}
	if err := s.Cfg.BeginCall(ctx); err != nil {
		return kit.OpErr("set_limit", s.Kind, s.Name, err)
	}
	defer s.Cfg.End()
	_, err := s.B.Eval(ctx, fairLimit, s.Keys, []string{strconv.Itoa(limit), s.Channel, s.relArgs[2], s.Cfg.RetArg})
	if err != nil {
		return kit.OpErr("set_limit", s.Kind, s.Name, kit.KeyErr(ctx, s.B, s.Keys, err))
	}
	return nil
}

func (s *fairSemaphore) acquire(ctx context.Context, n int, try bool) (latchkit.Lease, error) {
	if err := s.CheckPermits(n); err != nil {
		return nil, err
	}
	a := kit.Acquisition{Op: "acquire", Method: "Acquire", Kind: s.Kind, Name: s.Name, Chans: s.wchans, Try: try,
		Attempt: s.attemptFn, GiveBack: s.withdrawFn, Queues: true, WakeID: true, Handed: s.handedFn}
	if s.Kind == latchkit.KindFairMutex {
		a.Method = "Lock" // a FairMutex's Lock and TryLock
	}
	if try {
		a.Chans = s.Chans
		a.Attempt = s.tryFn
		a.Handed = nil
	}
	if n > 1 {
		args := s.args
		if try {
			args = s.tryArgs
		}
		args = append(args[:5:5], strconv.Itoa(n), s.stored)
		a.Attempt = kit.ScriptAttempt(s.B, fairAcquire, s.Keys, args, s, s.Kind, s.Name, &s.Cfg)
	}
	if s.Kind == latchkit.KindFairMutex {
		a.Op = "lock"
	}
	return s.Cfg.Acquire(ctx, s.B, a)
}

func (s *fairSemaphore) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return kit.ExtendBy(ctx, s, &s.Cfg, token, ttl)
}

func (s *fairSemaphore) Release(ctx context.Context, token string) (bool, error) {
	return kit.Flag(s.B.Eval(ctx, fairRelease, s.Keys, append([]string{token}, s.relArgs...)))
}

// Pass frees the permits token was just granted, without ending the
// acquisition (see kit.Passer): fair_withdraw with "0" as its end flag, which
// does not remember the token. Its ticket leaves the queue (the next
// tickets may be granted); its next attempt takes a new one.
func (s *fairSemaphore) Pass(ctx context.Context, token string) (bool, error) {
	_, err := s.B.Eval(ctx, fairWithdraw, s.Keys, append(append([]string{token}, s.relArgs...), "0"))
	return true, err
}

func (s *fairSemaphore) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	return kit.Remaining(s.B.Eval(ctx, fairTTL, []string{s.Keys[1], s.Keys[2]}, []string{token}))
}

// RenewCall is fairSemaphore's one extend call: the queue, liveness and
// holders as KEYS; annotations and weights as companions.
func (s *fairSemaphore) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.B, fairExtend, []string{s.Keys[0], s.Keys[1], s.Keys[2]}, kit.ExtendArgs(token, ttl, s.Keys[4], s.Keys[6]),
		s.Cfg.AckReplicas == 0
}
