package primitives

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"strconv"
	"strings"
	"sync"
	"time"

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

// wakeID is the digest of token that a hand-over's message names (as
// digest in lua/prelude.lua computes it): the waiter is found without its token going
// over pub/sub.
func wakeID(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:wakeIDBytes])
}

// wakeIDBytes is how many bytes of the digest a wakeID keeps.
const wakeIDBytes = 8

// markerTTL is how long a finished token (released, or given back) is
// remembered (see remember in lua/prelude.lua): longer than any retry of
// the release that wrote it, and than any late copy of an attempt. A
// release retried more than markerTTL after its first try ran may be
// reported lost: the evidence is gone. Every kind keeps one set of them
// per name (a Mutex's, Election's, MultiLock name's and Redlock
// instance's is the layout's :gone key): one entry per token finished in
// the last markerTTL, in one key whatever their number.
const markerTTL = 60 * time.Second

type mutex struct {
	b       backend.Backend
	kind    latchkit.Kind
	name    string
	cfg     config
	keys    []string // lock, two reserved, annotation, finished tokens: what Redlock uses
	qkeys   []string // keys, then the wait queue and the waiters' liveness: a Mutex's and MultiLock's
	channel string
	chans   []string // {channel}, shared by every Request (read-only)
	ttlArg  string
	waitArg string // the waiter timeout, ms
	handArg string // how long a handed-over lock waits to be confirmed, ms

	// m.attempt, m.withdraw, m.giveBack and m.handed as func values,
	// made once.
	attemptFn  func(context.Context, *attempt) (latchkit.Lease, error)
	withdrawFn func(context.Context, string) error
	giveBackFn func(context.Context, string) error
	handedFn   func(context.Context, *attempt, string) latchkit.Lease

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
	m, err := newMutex(latchkit.KindMutex, cl, name, opts)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func newMutex(kind latchkit.Kind, cl *Client, name string, opts []Option) (*mutex, error) {
	b := backendOf(cl)
	cfg, err := newConfig(kind, cl, name, opts)
	if err != nil {
		return nil, err
	}
	k := keyspace.MutexLayout.Names(cfg.prefix, name) // 7 keys, then the channel
	m := &mutex{
		b: b, kind: kind, name: name, cfg: cfg,
		keys:    k[:5:5],
		qkeys:   k[:7:7],
		channel: k[7],
		chans:   k[7:8:8],
		ttlArg:  ms(cfg.ttl),
		waitArg: ms(cfg.waiterTimeout),
		handArg: ms(min(cfg.ttl, cfg.waiterTimeout)),
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
	return m.cfg.acquire(ctx, m.b, acquisition{op: "lock", kind: kind, name: m.name, chans: chans, try: try,
		attempt: m.attemptFn, giveBack: give, queues: true, wakeID: true, handed: m.handedFn})
}

// entry is token's queue entry: the token and the inbox of this process.
func (m *mutex) entry(token string) string { return token + " " + m.inbox }

// attempt runs the acquire script once. A waiting Lock queues.
func (m *mutex) attempt(ctx context.Context, at *attempt) (latchkit.Lease, error) {
	start := time.Now()
	var args []string
	keys := m.keys // a single attempt never queues: no queue keys
	if at.try {
		args = []string{at.token, m.ttlArg, at.annotation, m.cfg.retArg}
	} else {
		args = []string{at.token, m.ttlArg, at.annotation, m.waitArg, m.entry(at.token), m.cfg.retArg}
		keys = m.qkeys
	}
	v, acks, err := m.cfg.evalAcquire(ctx, m.b, mutexAcquire, keys, args)
	if err != nil {
		return nil, keyErr(ctx, m.b, keys, err)
	}
	if !at.try {
		noteCounter(at, v, start)
	}
	l, err := grant(ctx, v, m, m.kind, m.name, at.token, start, &m.cfg)
	return m.cfg.acked(ctx, l, err, acks)
}

// handed is the lease a hand-over's message grants a waiting Lock (see
// handedLease).
func (m *mutex) handed(ctx context.Context, at *attempt, details string) latchkit.Lease {
	return handedLease(ctx, at, details, m, m.kind, m.name, &m.cfg)
}

func (m *mutex) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, m, &m.cfg, token, ttl)
}

func (m *mutex) release(ctx context.Context, token string) (bool, error) {
	return flag(m.b.Eval(ctx, mutexRelease, m.qkeys, []string{token, m.channel, m.handArg, m.cfg.retArg}))
}

// pass frees the lock token was just granted, without ending the
// acquisition (see passer): a give-back without its end flag.
func (m *mutex) pass(ctx context.Context, token string) (bool, error) {
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
	_, err := m.b.Eval(ctx, mutexWithdraw, m.qkeys, []string{token, m.channel, m.handArg, entry, end, m.cfg.retArg})
	return err
}

func (m *mutex) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(m.b.Eval(ctx, mutexTTL, m.keys[:1], []string{token}))
}

// ms formats d as whole milliseconds, at least 1.
func ms(d time.Duration) string {
	n := max(d.Milliseconds(), 1)
	if n%1000 == 0 && n/1000 < int64(len(wholeSeconds)) {
		return wholeSeconds[n/1000] // the usual TTLs and timeouts, without an allocation
	}
	return strconv.FormatInt(n, 10)
}

// wholeSeconds[i] is i seconds in milliseconds, formatted. Never modified.
var wholeSeconds = func() (s [121]string) {
	for i := range s {
		s[i] = strconv.Itoa(i * 1000)
	}
	return s
}()

// pair decodes a {flag, n} script reply, or {0, n, holder} where holder is
// the annotation the holder stored (nil or a string).
func pair(v backend.Value) (bool, int64, string, error) {
	a, ok := v.([]backend.Value)
	if !ok || len(a) < 2 || len(a) > 4 { // a waiting Mutex attempt's fourth: see noteCounter
		return false, 0, "", badReply(v)
	}
	flag, ok1 := a[0].(int64)
	n, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return false, 0, "", badReply(v)
	}
	var holder string
	if len(a) >= 3 && a[2] != nil {
		if holder, ok = a[2].(string); !ok {
			return false, 0, "", badReply(v)
		}
	}
	return flag == 1, n, holder, nil
}

// annotation is what an attempt stores beside its grant: the request's
// Annotation, or nothing when it is too long to store.
func annotation(a string) string {
	if len(a) > keyspace.MaxAnnotation {
		return ""
	}
	return a
}

// errBadReply marks a script reply of an unexpected shape: a backend that
// does not normalize replies as backend.Value documents.
var errBadReply = errors.New("unexpected script reply")

func badReply(v backend.Value) error { return fmt.Errorf("%w: %#v", errBadReply, v) }

// scriptErr makes a key of the wrong type, or an argument a script refused
// (invalidReply), the caller's fault: ErrInvalid. Where the script's keys
// are at hand, keyErr names the key of the wrong type.
func scriptErr(err error) error {
	var done *refusedError
	if errors.As(err, &done) {
		return err // read already
	}
	var re *backend.ReplyError
	if errors.As(err, &re) && errors.Is(err, backend.ErrWrongType) {
		return &refusedError{why: "a key of the primitive holds a value latchkit did not write: " + wrongTypeReason(re.Msg), reply: err}
	}
	if errors.As(err, &re) {
		if _, why, ok := strings.Cut(re.Msg, invalidReply+" "); ok {
			if i := strings.Index(why, " script: "); i >= 0 {
				why = why[:i] // a server's note of the script's SHA and line
			}
			return &refusedError{why: why, reply: err}
		}
	}
	return err
}

// refusedError is an argument a script refused (see invalid in
// lua/prelude.lua): it reads as the script's reason, without the reply's
// marker, and matches latchkit.ErrInvalid and the reply error.
type refusedError struct {
	why   string
	reply error
}

func (e *refusedError) Error() string   { return latchkit.ErrInvalid.Error() + ": " + e.why }
func (e *refusedError) Unwrap() []error { return []error{latchkit.ErrInvalid, e.reply} }

// opErr wraps err with the operation and primitive, unless it already is.
func opErr(op string, kind latchkit.Kind, name string, err error) error {
	var oe *latchkit.OpError
	if errors.As(err, &oe) {
		return err
	}
	return &latchkit.OpError{Op: op, Kind: kind, Name: name, Err: err}
}
