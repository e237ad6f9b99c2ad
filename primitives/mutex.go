package primitives

import (
	"context"
	"sync"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// Mutex is a lock held by one holder at a time.
type Mutex interface {
	// Lock waits until the lock is granted or ctx is done. The error
	// matches ctx.Err() with errors.Is when ctx ended the wait.
	Lock(ctx context.Context) (latchkit.Lease, error)
	// TryLock makes one attempt; it returns an error matching
	// latchkit.ErrNotAcquired when the lock is held.
	TryLock(ctx context.Context) (latchkit.Lease, error)
}

// The Mutex scripts (lua/mutex_*.lua). A waiting Lock queues its token in
// Redis; a release hands the lock straight to the oldest live waiter (the
// lock key is set to its token, the fence raised) and wakes that waiter
// alone with a targeted message carrying a digest of its token, never the
// token, and the grant's fence: the waiter holds on that message alone
// (see handed), or, where it cannot (an annotation to store, replica
// acknowledgement, no auto-extend, a late message), its next attempt finds
// its own token and confirms: the TTL it asked for, and the fence. A
// waiter that stops attempting drops out of the queue after the waiter
// timeout; a lock handed to a waiter that never renews or confirms frees
// itself after the hand-over's time. MultiLock shares the
// keys and the queue (lua/multi_*.lua); Redlock passes the first five keys
// only: it never queues.
var (
	mutexAcquire  = loadScript("mutex_acquire")
	mutexRelease  = loadScript("mutex_release")
	mutexWithdraw = loadScript("mutex_withdraw")
	mutexExtend   = loadScript("mutex_extend")
	mutexTTL      = loadScript("mutex_ttl")
)

type mutex struct {
	b       backend.Backend
	kind    latchkit.Kind
	name    string
	cfg     kit.Config
	keys    []string // lock, two reserved, annotation, finished tokens: what Redlock uses
	qkeys   []string // keys, then the wait queue and the waiters' liveness: a Mutex's and MultiLock's
	channel string
	chans   []string // {channel}, shared by every Request (read-only)
	ttlArg  string
	waitArg string // the waiter timeout, ms
	handArg string // how long a handed-over lock waits to be confirmed, ms

	// m.attempt, m.withdraw, m.giveBack and m.handed as func values,
	// made once.
	attemptFn  func(context.Context, *kit.Attempt) (latchkit.Lease, error)
	withdrawFn func(context.Context, string) error
	giveBackFn func(context.Context, string) error
	handedFn   func(context.Context, *kit.Attempt, string) latchkit.Lease

	// Made by the first waiting Lock (most mutexes never wait).
	waitOnce sync.Once
	wchans   []string // {channel, inbox}: a waiting Lock's
	inbox    string   // where a hand-over to a waiter of this process is told
}

// NewMutex returns a Mutex named name: one holder at a time, an
// owner-checked release, a fencing token per grant and auto-extend. A
// waiting Lock queues and is handed the lock by a release, in arrival
// order; a TryLock never queues. Its keys start with prefix{name} (see
// docs/operations.md).
func NewMutex(cl *Client, name string, opts ...Option) (Mutex, error) {
	m, err := newMutex(latchkit.KindMutex, core(cl), name, opts)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func newMutex(kind latchkit.Kind, cl *kit.Client, name string, opts []Option) (*mutex, error) {
	b := kit.BackendOf(cl)
	cfg, err := newConfig(kind, cl, name, opts)
	if err != nil {
		return nil, err
	}
	k := keyspace.MutexLayout.Names(cfg.Prefix, name) // 7 keys, then the channel
	m := &mutex{
		b: b, kind: kind, name: name, cfg: cfg,
		keys:    k[:5:5],
		qkeys:   k[:7:7],
		channel: k[7],
		chans:   k[7:8:8],
		ttlArg:  kit.Ms(cfg.TTL),
		waitArg: kit.Ms(cfg.WaiterTimeout),
		handArg: kit.Ms(min(cfg.TTL, cfg.WaiterTimeout)),
	}
	m.attemptFn, m.withdrawFn, m.giveBackFn, m.handedFn = m.attempt, m.withdraw, m.giveBack, m.handed
	return m, nil
}

func (m *mutex) Lock(ctx context.Context) (latchkit.Lease, error) {
	return m.acquire(ctx, latchkit.KindMutex, false)
}

func (m *mutex) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return m.acquire(ctx, latchkit.KindMutex, true)
}

func (m *mutex) acquire(ctx context.Context, kind latchkit.Kind, try bool) (latchkit.Lease, error) {
	chans := m.chans
	if !try {
		m.waitOnce.Do(func() {
			m.inbox = pubsub.Inbox(m.b, m.channel)
			m.wchans = []string{m.channel, m.inbox}
		})
		chans = m.wchans
	}
	give := m.withdrawFn
	if try {
		give = m.giveBackFn
	}
	return m.cfg.Acquire(ctx, m.b, kit.Acquisition{Op: "lock", Method: "Lock", Kind: kind, Name: m.name, Chans: chans, Try: try,
		Attempt: m.attemptFn, GiveBack: give, Queues: true, WakeID: true, Handed: m.handedFn})
}

// entry is token's queue entry: the token and the inbox of this process.
func (m *mutex) entry(token string) string { return token + " " + m.inbox }

// attempt runs the acquire script once. A waiting Lock queues.
func (m *mutex) attempt(ctx context.Context, at *kit.Attempt) (latchkit.Lease, error) {
	start := time.Now()
	var args []string
	keys := m.keys // a single attempt never queues: no queue keys
	if at.Try {
		args = []string{at.Token, m.ttlArg, at.Annotation}
	} else {
		args = []string{at.Token, m.ttlArg, at.Annotation, m.waitArg, m.entry(at.Token), kit.QueuedArg(at)}
		keys = m.qkeys
	}
	v, acks, err := m.cfg.EvalAcquire(ctx, m.b, mutexAcquire, keys, args)
	if err != nil {
		return nil, kit.KeyErr(ctx, m.b, keys, err)
	}
	if !at.Try {
		kit.NoteCounter(at, v, start)
	}
	l, err := kit.Grant(ctx, v, m, m.kind, m.name, at.Token, start, &m.cfg)
	return m.cfg.Acked(ctx, l, err, acks)
}

// handed is the lease a hand-over's message grants a waiting Lock (see
// handedLease).
func (m *mutex) handed(ctx context.Context, at *kit.Attempt, details string) latchkit.Lease {
	return kit.HandedLease(ctx, at, details, m, m.kind, m.name, &m.cfg)
}

func (m *mutex) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return kit.ExtendBy(ctx, m, &m.cfg, token, ttl)
}

func (m *mutex) Release(ctx context.Context, token string) (bool, error) {
	return kit.Flag(m.b.Eval(ctx, mutexRelease, m.qkeys, []string{token, m.channel, m.handArg}))
}

// Pass frees the lock token was just granted, without ending the
// acquisition (see kit.Passer): a give-back without its end flag.
func (m *mutex) Pass(ctx context.Context, token string) (bool, error) {
	return true, m.withdrawEntry(ctx, token, "", false)
}

// withdraw gives back what a waiting Lock that ended without a grant may
// hold or have queued (see mutex_withdraw.lua).
func (m *mutex) withdraw(ctx context.Context, token string) error {
	return m.withdrawEntry(ctx, token, m.entry(token), true)
}

// giveBack gives back what a TryLock whose outcome is unknown may hold.
func (m *mutex) giveBack(ctx context.Context, token string) error {
	return m.withdrawEntry(ctx, token, "", true)
}

// withdrawEntry takes entry ("" for none) out of the queue and passes on
// the lock if token holds it; final, at the end of an acquisition, it also
// remembers the token as given back, so that a late copy of its attempt is
// refused.
func (m *mutex) withdrawEntry(ctx context.Context, token, entry string, final bool) error {
	end := ""
	if final {
		end = "1"
	}
	_, err := m.b.Eval(ctx, mutexWithdraw, m.qkeys, []string{token, m.channel, m.handArg, entry, end})
	return err
}

func (m *mutex) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	return kit.Remaining(m.b.Eval(ctx, mutexTTL, m.keys[:1], []string{token}))
}

// extendCall is the keys and ARGV of mutex_extend for token: the lock, and
// the annotation as a companion. A Redlock runs it on each instance.
func (m *mutex) extendCall(token string, ttl time.Duration) (keys, args []string) {
	return m.keys[:1], kit.ExtendArgs(token, ttl, m.keys[3])
}

// RenewCall is mutex's one extend call.
func (m *mutex) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	keys, args := m.extendCall(token, ttl)
	return m.b, mutexExtend, keys, args, m.cfg.AckReplicas == 0
}
