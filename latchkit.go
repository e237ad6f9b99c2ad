// Package latchkit is the vocabulary shared by every latchkit package:
// the Lease a holder gets, the Request that travels down a middleware chain,
// the Acquire and Middleware function types, and the errors callers match
// with errors.Is.
//
// The primitives themselves (Mutex, Semaphore, ...) live in package
// primitives; the Redis drivers live under backend/.
package latchkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkit/latchkit/backend"
)

var (
	// ErrNotAcquired is returned by a Try* call (or by a retry policy that
	// gave up) when the primitive is held by someone else.
	ErrNotAcquired = errors.New("latchkit: not acquired")
	// ErrLeaseLost is returned by Extend and Release when the lease expired
	// or was taken before the call, and by a lease whose renewal failed.
	ErrLeaseLost = errors.New("latchkit: lease lost")
	// ErrInvalid marks a bad argument: an empty name, a TTL below 1ms, a
	// limit below 1, a nil backend, a key holding another Redis type. It is
	// always wrapped with what was wrong and why; nothing was changed in
	// Redis when it is returned.
	ErrInvalid = errors.New("latchkit: invalid argument")
)

// Lease is a granted hold on a primitive. It is safe for concurrent use.
type Lease interface {
	// Name is the primitive's name, as given to its constructor.
	Name() string
	// Token is this holder's identity: 128 random bits, hex encoded.
	// Treat it as a secret: whoever knows it can release the lease.
	Token() string
	// Fence is the fencing token of this grant: strictly increasing per
	// name, grant after grant. Pass it to the resource the lock protects
	// so that it can reject writes from a holder that lost the lease.
	Fence() int64
	// Context is done as soon as the lease is released or known to be lost
	// (a renewal found it gone, or Redis could not be reached before the
	// TTL ran out). Work done under the lease should run under this context.
	Context() context.Context
	// TTL returns the time the lease has left on the server.
	// It returns ErrLeaseLost when the lease is no longer held.
	TTL(ctx context.Context) (time.Duration, error)
	// Extend sets the lease's remaining time to ttl. It returns ErrLeaseLost
	// when the lease is no longer held.
	Extend(ctx context.Context, ttl time.Duration) error
	// Release gives the lease up. It returns ErrLeaseLost when the lease had
	// expired or been taken; a retried release whose first reply was lost
	// still reports success. When Release fails (Redis unreachable), the
	// outcome is unknown: renewals stop all the same, so the lease expires
	// with its TTL unless a retried Release gets through first.
	Release(ctx context.Context) error
}

// Kind names a kind of primitive; it appears in errors, spans and metrics.
type Kind string

// The kinds of the primitives shipped in package primitives.
const (
	KindMutex          Kind = "mutex"
	KindReentrantMutex Kind = "reentrant_mutex"
	KindReadLock       Kind = "rwlock_read"
	KindWriteLock      Kind = "rwlock_write"
	KindSemaphore      Kind = "semaphore"
	KindFairSemaphore  Kind = "fair_semaphore"
	KindFairMutex      Kind = "fair_mutex"
	KindMultiLock      Kind = "multilock"
	KindRedlock        Kind = "redlock"
)

// Acquire makes a primitive's acquisition happen: the innermost Acquire of a
// chain makes exactly one attempt; middleware wrapped around it may retry,
// wait, trace or short-circuit.
type Acquire func(ctx context.Context, req *Request) (Lease, error)

// Middleware wraps an Acquire, like func(http.Handler) http.Handler.
// In a list of middleware the first is the outermost: it sees the call first
// and the result last.
type Middleware func(next Acquire) Acquire

// Chain composes middleware around an Acquire, the first in mws outermost.
// Nil entries are skipped.
func Chain(a Acquire, mws ...Middleware) Acquire {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			a = mws[i](a)
		}
	}
	return a
}

// Request describes one logical acquisition (one Lock, TryLock or Acquire
// call) as it travels down a middleware chain. A new Request is made for
// every call; middleware may read every field and set the ones documented
// as theirs.
type Request struct {
	// Name is the primitive's name.
	Name string
	// Kind is the primitive's kind.
	Kind Kind
	// TTL is the lease time asked for.
	TTL time.Duration
	// Backend is the Redis the primitive lives on. For a primitive spread
	// over several backends (Redlock) it is the first of them.
	Backend backend.Backend
	// Channels are the release channels a waiter may subscribe to in order
	// to be woken when the primitive may have become free. The slice may be
	// shared between requests: read it, never modify it.
	Channels []string
	// WakeID, when set by the primitive, names this acquisition in
	// targeted release messages: a primitive that hands itself over to one
	// queued waiter on release (Mutex) wakes only that waiter, by this id
	// (a digest of the token, never the token).
	WakeID string
	// Try is set for a single attempt (TryLock, TryAcquire): middleware must
	// not wait or retry.
	Try bool
	// Owner is the re-entry identity taken from the context (see
	// primitives.WithOwner); empty when none was given.
	Owner string

	// Attempts counts the attempts made so far; the innermost Acquire
	// increments it.
	Attempts int
	// WaitHint is set by a failed attempt: how long until the primitive
	// frees itself at the latest if nobody releases it (for a Mutex, the
	// holder's remaining TTL). Zero means unknown.
	WaitHint time.Duration
	// Waiter, when set (by pubsub.WakeOnRelease), lets a retrying middleware
	// sleep until a release message arrives instead of polling.
	Waiter Waiter

	// Annotation, when set by middleware before the first attempt, is
	// stored beside a grant, in the primitive's own keys and expiring with
	// it, for waiters (and latchctl inspect) to read back as Holder. A
	// tracing middleware stores the holder's span context there (a W3C
	// traceparent). Never put a secret in it. At most MaxAnnotation bytes.
	Annotation string
	// Holder is set by a failed attempt: the Annotation stored by the
	// holder the attempt waits for (the one whose lease ends first when
	// there are several); empty when it stored none.
	Holder string
	// OnAttempt, when set, is called after every attempt with its outcome
	// (nil: granted), once Attempts, WaitHint and Holder are updated.
	// Middleware that sets it must keep calling the function it replaces.
	OnAttempt func(req *Request, err error)
}

// MaxAnnotation is the longest Request.Annotation a primitive stores; a
// longer one is not stored.
const MaxAnnotation = 256

// Waiter is the hook through which a wake-up source (release messages)
// shortens the waits of a retrying middleware. The retry middleware calls
// Wait between attempts; without a Waiter it sleeps for its backoff delay.
type Waiter interface {
	// Wait blocks until a release may have freed the primitive, until
	// fallback has elapsed, or until ctx is done (returning ctx.Err()).
	// fallback is the delay the retry policy would sleep without
	// notifications; the Waiter may wait longer when it is sure to be told
	// of a release, never longer than the request's WaitHint when that is
	// known. The first call may return at once: it subscribes, and an
	// attempt made after it cannot miss a release.
	Wait(ctx context.Context, req *Request, fallback time.Duration) error
}

// OpError is the error returned by every latchkit operation that fails for a
// reason other than a plain ErrNotAcquired: it records the operation, the
// primitive and the cause, and unwraps to the cause.
type OpError struct {
	Op   string // "new", "lock", "release", "extend", "ttl", ...
	Kind Kind
	Name string
	Err  error
}

// Error formats the operation, the primitive and the cause.
func (e *OpError) Error() string {
	return fmt.Sprintf("latchkit: %s %s %q: %v", e.Op, e.Kind, e.Name, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }
