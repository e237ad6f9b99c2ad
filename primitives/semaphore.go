package primitives

import (
	"context"
	"fmt"
	"strconv"

	"github.com/latchkit/latchkit"
	pkit "github.com/latchkit/latchkit/kit"
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

// semLayout is a Semaphore's keys (keyspace.SemLayout's scripted ones, and
// its channel: TestKitLayoutsAreKeyspaces).
var semLayout = pkit.Layout{Kind: latchkit.KindSemaphore, Channel: ":sem:rel", Keys: []pkit.Key{
	{Name: "holders", Suffix: ":sem", Type: "zset"},
	{Name: "gone", Suffix: ":sem:released", Type: "zset"},
	{Name: "who", Suffix: ":sem:who", Type: "hash"},
	{Name: "weights", Suffix: ":sem:weights", Type: "hash"},
	{Name: "limit", Suffix: ":sem:limit", Type: "string"},
}}

// The Semaphore scripts (lua/sem_*.lua; keys in sem_acquire.lua), on
// package kit.
var (
	semAcquire = pkit.MustLoad(luaFiles, &semLayout, "sem_acquire")
	semLimit   = pkit.MustLoad(luaFiles, &semLayout, "sem_limit")
	semHolder  = pkit.Holder{
		Extend:     pkit.MustLoad(luaFiles, &semLayout, "sem_extend"),
		Release:    pkit.MustLoad(luaFiles, &semLayout, "sem_release"),
		TTL:        pkit.MustLoad(luaFiles, &semLayout, "sem_ttl"),
		Companions: []string{"who", "weights"},
	}
)

// semaphore is written on package kit alone (TestBuiltinsOnThePublicKit).
type semaphore struct {
	s     *pkit.Site
	limit string
	one   []string // the arguments of an acquisition of one permit: limit, "1"
}

// NewSemaphore returns a counting semaphore of limit permits named name:
// never more than limit held, whatever the clients' clocks, and a crashed
// holder's permit is free after its TTL. Every user of the name must give
// the same limit, or store one with SetLimit. It is not fair: a request for
// many permits (AcquireN) can be overtaken by smaller ones; see
// NewFairSemaphore.
func NewSemaphore(cl *Client, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := pkit.NewSite(cl, &semLayout, name, kitOptions(opts)...)
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, semInvalid("new", name, "limit %d is below 1", limit)
	}
	l := strconv.Itoa(limit)
	return &semaphore{s: s, limit: l, one: []string{l, "1"}}, nil
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
	if n < 1 {
		return nil, semInvalid("acquire", s.s.Name(), "%d permits asked for: at least 1", n)
	}
	// The script refuses more permits than the limit it knows (SetLimit's).
	args := s.one
	if n > 1 {
		args = []string{s.limit, strconv.Itoa(n)}
	}
	return s.s.Acquire(ctx, pkit.Acquisition{Op: "Acquire", Try: try, Attempt: semAcquire, Args: args, Holder: &semHolder})
}

func (s *semaphore) SetLimit(ctx context.Context, limit int) error {
	if limit < 1 {
		return semInvalid("set_limit", s.s.Name(), "limit %d is below 1", limit)
	}
	_, err := s.s.Eval(ctx, "set_limit", semLimit, strconv.Itoa(limit))
	return err
}

// semInvalid is the latchkit.ErrInvalid error of a Semaphore's op.
func semInvalid(op, name, format string, a ...any) error {
	return &latchkit.OpError{Op: op, Kind: latchkit.KindSemaphore, Name: name, Err: fmt.Errorf("%w: "+format, append([]any{latchkit.ErrInvalid}, a...)...)}
}
