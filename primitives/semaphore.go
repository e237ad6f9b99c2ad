package primitives

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Semaphore is held by at most a fixed number of holders at a time.
type Semaphore interface {
	// Acquire waits until a permit is granted or ctx is done.
	Acquire(ctx context.Context) (latchkit.Lease, error)
	// TryAcquire makes one attempt; it returns an error matching
	// latchkit.ErrNotAcquired when every permit is held.
	TryAcquire(ctx context.Context) (latchkit.Lease, error)
}

// The Semaphore scripts (lua/sem_*.lua). KEYS: 1 holders (zset token ->
// expiry, server ms), 2 fence counter, 3 holder fences (hash token ->
// fence), 4 the tokens that recently finished (released or given back),
// 5 holders' annotations (hash token -> latchkit.Request.Annotation).
var (
	semAcquire = loadScript("sem_acquire")
	semRelease = loadScript("sem_release")
	semExtend  = loadScript("sem_extend")
	semTTL     = loadScript("sem_ttl")
)

type semaphore struct {
	site
	args []string // ttl, limit

	attemptFn  func(context.Context, *attempt) (latchkit.Lease, error)
	giveBackFn func(context.Context, string) error
}

// NewSemaphore returns a counting semaphore of limit permits named name on
// b. Holders live in a sorted set scored by their expiry in the server's
// time; every acquire sweeps the expired ones first, so a crashed holder
// frees its permit after its TTL, and client clocks play no part: no
// over-grant from clock skew. A permit's lease extends, auto-extends and
// releases like a Mutex lease; every grant takes a fence from the
// semaphore's counter.
//
// Every user of one semaphore must give the same limit: each attempt checks
// the count against its own.
func NewSemaphore(b backend.Backend, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := newSemaphore(latchkit.KindSemaphore, b, name, limit, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func newSemaphore(kind latchkit.Kind, b backend.Backend, name string, limit int, opts []Option) (*semaphore, error) {
	st, err := newSite(SemLayout, kind, b, name, limit, opts)
	if err != nil {
		return nil, err
	}
	s := &semaphore{site: st, args: []string{ms(st.cfg.ttl), strconv.Itoa(limit)}}
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
	return s.acquire(ctx, false)
}

func (s *semaphore) TryAcquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, true)
}

func (s *semaphore) acquire(ctx context.Context, try bool) (latchkit.Lease, error) {
	return s.cfg.acquire(ctx, s.b, acquisition{op: "acquire", kind: s.kind, name: s.name, chans: s.chans, try: try,
		attempt: s.attemptFn, giveBack: s.giveBackFn})
}

func (s *semaphore) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, s, &s.cfg, token, ttl)
}

func (s *semaphore) release(ctx context.Context, token string) (bool, error) {
	return flag(s.b.Eval(ctx, semRelease, s.keys, []string{token, s.channel}))
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
