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
	// ErrInvalid marks a bad argument: an empty name or one longer than
	// primitives.MaxName, a TTL below 5ms (primitives.MinTTL, for a
	// constructor and for Extend), a nil context or function, a
	// limit or a latch's count below 1, a nil backend, a key holding
	// another Redis type (or a hash that is not the primitive's). It is
	// always wrapped with what was wrong and why; nothing was changed in
	// Redis when it is returned. It is backend.ErrInvalid.
	ErrInvalid = backend.ErrInvalid
	// ErrNotReplicated is the error of an attempt whose grant WAIT did not
	// confirm on as many replicas as primitives.WithReplicaAck asks for.
	// The grant has been given back (or, if that failed too, expires with
	// its TTL).
	ErrNotReplicated = errors.New("latchkit: grant not acknowledged by enough replicas")
	// ErrUnavailable marks a failure to reach Redis: a refused or broken
	// connection, an I/O timeout, a pool exhausted. The operation may or
	// may not have been applied. It is backend.ErrUnavailable.
	ErrUnavailable = backend.ErrUnavailable
	// ErrClosed marks an operation on a client that was closed. It is
	// backend.ErrClosed.
	ErrClosed = backend.ErrClosed
)

// Lease is a granted hold on a primitive. It is safe for concurrent use.
type Lease interface {
	// Name is the primitive's name, as given to its constructor.
	Name() string
	// Token is this holder's identity: 32 hex digits, the id of the
	// Client that minted it (12 digits, which lead latchctl to the
	// Client's record) then 80 random bits. Treat it as a secret: whoever
	// knows it can release the lease.
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
	// It returns ErrLeaseLost when the lease is no longer held (on a
	// released lease, an error matching it that says so).
	TTL(ctx context.Context) (time.Duration, error)
	// Extend sets the lease's remaining time to ttl. It returns ErrLeaseLost
	// when the lease is no longer held, and an error matching ErrInvalid,
	// changing nothing, for a ttl below 5ms (primitives.MinTTL).
	Extend(ctx context.Context, ttl time.Duration) error
	// Release gives the lease up. It returns ErrLeaseLost when the lease had
	// expired or been taken; a retried release whose first reply was lost
	// still reports success. Once a Release has gone through, a later one
	// returns what it returned (nil after a release): a lease released
	// twice was not lost. When Release fails (Redis unreachable), the
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
	KindElection       Kind = "election"
	KindLatch          Kind = "latch"
)

// Acquire makes one logical acquisition: the innermost Acquire of a chain
// is the primitive's wait loop (every attempt and wait; Request.OnAttempt
// sees each attempt), and middleware around it may trace or short-circuit.
// A latch's Wait returns a nil Lease and nil error once the latch is open:
// middleware passes that on as it is.
type Acquire func(ctx context.Context, req *Request) (Lease, error)

// Middleware wraps an Acquire, like func(http.Handler) http.Handler.
// In a list of middleware the first is the outermost: it sees the call first
// and the result last.
type Middleware func(next Acquire) Acquire

// Chain composes middleware around an Acquire, the first in mws outermost.
// Nil entries are skipped. A nil a, or a middleware that returns a nil
// Acquire, makes the chain's calls fail with an error matching ErrInvalid.
func Chain(a Acquire, mws ...Middleware) Acquire {
	if a == nil {
		a = invalidAcquire("nil Acquire")
	}
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			if a = mws[i](a); a == nil {
				a = invalidAcquire(fmt.Sprintf("middleware %d returned a nil Acquire", i))
			}
		}
	}
	return a
}

// invalidAcquire is an Acquire that refuses every call, saying why.
func invalidAcquire(why string) Acquire {
	return func(context.Context, *Request) (Lease, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, why)
	}
}

// Request describes one logical acquisition (a Lock, TryLock or Acquire
// call, waiting included, or a latch's Wait) as it passes through a
// primitive's middleware (primitives.WithMiddleware); a new Request is made
// for every call. A middleware may set Annotation and OnAttempt before it
// calls next; the other fields are the primitive's and read-only.
type Request struct {
	// Name is the primitive's name.
	Name string
	// Kind is the primitive's kind.
	Kind Kind
	// TTL is the lease time asked for (zero for a latch's Wait, which
	// hands out no lease).
	TTL time.Duration
	// Backend is the Redis the primitive lives on. For a primitive spread
	// over several backends (Redlock) it is the first of them.
	Backend backend.Backend
	// Try is set for a single attempt (TryLock, TryAcquire).
	Try bool
	// Op is the primitive's method the acquisition stands for ("Lock",
	// "TryRLock", "Acquire", "Campaign", "Wait", or a user primitive's
	// own): Tracing names its span after it.
	Op string
	// Owner is the re-entry identity taken from the context (see
	// primitives.WithOwner); empty when none was given.
	Owner string
	// Client is the name of the Client the primitive was made from
	// (primitives.WithClientName; by default host:pid): one per process,
	// as a rule, so a metric attribute of bounded cardinality.
	Client string

	// Annotation, when set by middleware before it calls next, is stored
	// beside a grant, in the primitive's own keys and expiring with it,
	// for waiters (and latchctl inspect) to read back as
	// HeldError.Holder. A tracing middleware stores the holder's span
	// context there (a W3C traceparent). Never put a secret in it. At most
	// 256 bytes; a longer one is not stored. A latch's Wait
	// stores none.
	Annotation string
	// OnAttempt, when set by middleware before it calls next, is called
	// after every attempt with its number (1, 2, ...) and its outcome:
	// nil when granted (for a latch's Wait: the latch was open), a
	// *HeldError (matching ErrNotAcquired) when the primitive was held (the
	// latch's count above zero), another error otherwise. Middleware that sets it
	// must keep calling the function it replaces. It runs on the
	// acquisition's goroutine and must not block.
	OnAttempt func(attempt int, err error)
}

// HeldError is the error of an attempt that found the primitive held. It
// matches ErrNotAcquired. A Try* call returns it (inside an *OpError); a
// waiting call that gave up returns an error wrapping the last one, so
// errors.As finds the holder it last waited for.
type HeldError struct {
	// WaitHint is how long until the primitive frees itself at the latest
	// if nobody releases it (for a Mutex, the holder's remaining TTL), or,
	// when AtLeast is set, a bound below that; zero when unknown. The wait
	// loop tries again within WaitHint at the latest, unless a release
	// wakes it sooner.
	WaitHint time.Duration
	// AtLeast says that WaitHint may be less than the holder's remaining
	// time: the primitive frees itself no sooner than WaitHint (unless
	// released). A waiting attempt (Lock, Acquire) is told to come back
	// within its heartbeat, a third of the waiter timeout, so as to keep
	// its place in the queue, when the holder's lease runs longer (so is a
	// FairMutex's or FairSemaphore's single attempt); a hint of that
	// heartbeat is marked AtLeast.
	AtLeast bool
	// Holder is the Annotation stored by the holder the attempt waits for
	// (the one whose lease ends first when there are several); empty when
	// it stored none.
	Holder string
}

// Error says the primitive was held and for how long at most, or, when
// that is not known (AtLeast), at least.
func (e *HeldError) Error() string {
	switch {
	case e == nil || e.WaitHint <= 0:
		return ErrNotAcquired.Error() + ": held"
	case e.AtLeast:
		return fmt.Sprintf("%v: held (the holder's lease had %v or more to run)", ErrNotAcquired, e.WaitHint)
	}
	return fmt.Sprintf("%v: held for up to %v", ErrNotAcquired, e.WaitHint)
}

// Is reports whether target is ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// Innermost returns the lease at the bottom of a chain of wrapped leases:
// a lease that wraps another (as tracing and reentrancy middleware do) has
// a method Unwrap() Lease returning it. It is the primitive's own lease,
// whatever middleware wrapped it. Use it to reach a primitive's lease
// type, such as primitives.MultiLease:
//
//	ml, ok := latchkit.Innermost(lease).(primitives.MultiLease)
func Innermost(l Lease) Lease {
	for {
		w, ok := l.(interface{ Unwrap() Lease })
		if !ok {
			return l
		}
		inner := w.Unwrap()
		if inner == nil {
			return l
		}
		l = inner
	}
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
	if e == nil {
		return "latchkit: <nil OpError>"
	}
	return fmt.Sprintf("latchkit: %s %s %q: %v", e.Op, e.Kind, e.Name, e.Err)
}

// Unwrap returns the cause (nil for a nil *OpError).
func (e *OpError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}
