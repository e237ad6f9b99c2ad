package primitives

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/kit"
)

// NewReentrantMutex returns a Mutex that the owner in the context
// (WithOwner) re-enters: its Lock while it holds the lock succeeds at once,
// and Redis is released with the outermost lease. Re-entry is tracked in
// the returned value: share it between the code paths that re-enter. A
// Lock without an owner fails with an error matching latchkit.ErrInvalid.
func NewReentrantMutex(cl *Client, name string, opts ...Option) (Mutex, error) {
	m, err := newMutex(latchkit.KindReentrantMutex, core(cl), name, opts)
	if err != nil {
		return nil, err
	}
	m.cfg.Use(reentrantMiddleware())
	return &reentrantMutex{m}, nil
}

type reentrantMutex struct{ *mutex }

func (r *reentrantMutex) Lock(ctx context.Context) (latchkit.Lease, error) {
	return r.acquire(ctx, latchkit.KindReentrantMutex, false)
}

func (r *reentrantMutex) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return r.acquire(ctx, latchkit.KindReentrantMutex, true)
}

// reentrantMiddleware returns a middleware that lets the owner carried in the context
// (WithOwner) re-enter what it already holds without a round
// trip: each nested acquisition returns a lease on the same grant (same
// token, fence and Context), each Release gives up one level, and the
// primitive is released in Redis only with the outermost level. Extending
// any level extends the grant.
//
// Holds are tracked per middleware value, by kind, name and owner: share
// the primitive (or the middleware) between the code paths that re-enter.
// A request without an owner fails with an error matching
// latchkit.ErrInvalid: a reentrant lock without an owner would silently be
// a plain one.
func reentrantMiddleware() latchkit.Middleware {
	r := &reentrant{held: map[holdKey]*hold{}}
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			return r.acquire(ctx, req, next)
		}
	}
}

type holdKey struct {
	kind        latchkit.Kind
	name, owner string
}

type reentrant struct {
	mu   sync.Mutex
	held map[holdKey]*hold
}

// hold is one owner's grant, shared by its nested leases. While the first
// acquisition is in flight, ready is open and lease is nil.
type hold struct {
	ready chan struct{}
	lease latchkit.Lease
	depth int
}

func (r *reentrant) acquire(ctx context.Context, req *latchkit.Request, next latchkit.Acquire) (latchkit.Lease, error) {
	if req.Owner == "" {
		return nil, fmt.Errorf("%w: a reentrant acquisition needs an owner in its context (primitives.WithOwner)", latchkit.ErrInvalid)
	}
	k := holdKey{req.Kind, req.Name, req.Owner}
	for {
		r.mu.Lock()
		h := r.held[k]
		switch {
		case h == nil:
			h = &hold{ready: make(chan struct{})}
			r.held[k] = h
			r.mu.Unlock()
			l, err := next(ctx, req)
			r.mu.Lock()
			if err != nil || l == nil {
				// Failed, or nothing to re-enter (a latch's Wait hands out
				// no lease): no hold.
				delete(r.held, k)
			} else {
				h.lease, h.depth = l, 1
			}
			close(h.ready)
			r.mu.Unlock()
			if err != nil || l == nil {
				return nil, err
			}
			return &nested{r: r, k: k, h: h}, nil
		case h.lease == nil && req.Try:
			// The same owner is acquiring on another goroutine, and a Try
			// does not wait: it does not hold it yet.
			r.mu.Unlock()
			return nil, fmt.Errorf("%w: the same owner's acquisition is in flight", latchkit.ErrNotAcquired)
		case h.lease == nil:
			// The same owner is acquiring on another goroutine: wait for
			// its outcome instead of queueing behind ourselves in Redis.
			r.mu.Unlock()
			select {
			case <-h.ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case h.lease.Context().Err() != nil:
			// The grant was lost: it cannot be re-entered. Forget it and
			// acquire afresh; its outstanding levels report the loss.
			delete(r.held, k)
			r.mu.Unlock()
		default:
			h.depth++
			r.mu.Unlock()
			return &nested{r: r, k: k, h: h}, nil
		}
	}
}

// nested is one level of a reentrant hold.
type nested struct {
	r *reentrant
	k holdKey
	h *hold

	mu     sync.Mutex
	done   bool
	relErr error // what the Release that made it done returned
}

// Unwrap returns the lease of the grant this level shares (see
// latchkit.Innermost).
func (n *nested) Unwrap() latchkit.Lease { return n.h.lease }

func (n *nested) Name() string             { return n.h.lease.Name() }
func (n *nested) Token() string            { return n.h.lease.Token() }
func (n *nested) Fence() int64             { return n.h.lease.Fence() }
func (n *nested) Context() context.Context { return n.h.lease.Context() }

// TTL is the grant's; on a level already released, an error matching
// latchkit.ErrLeaseLost that says so.
func (n *nested) TTL(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return n.h.lease.TTL(ctx) // refused, as bad input is before anything else
	}
	if err := n.doneErr(); err != nil {
		return 0, err
	}
	return n.h.lease.TTL(ctx)
}

// doneErr is the error of TTL and Extend on a level already released.
func (n *nested) doneErr() error {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done {
		return fmt.Errorf("this level was already released: %w", latchkit.ErrLeaseLost)
	}
	return nil
}

func (n *nested) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil || ttl < kit.MinTTL {
		return n.h.lease.Extend(ctx, ttl) // refused, as bad input is before anything else
	}
	if err := n.doneErr(); err != nil {
		return err
	}
	return n.h.lease.Extend(ctx, ttl)
}

// Release gives up this level; the outermost release releases the grant.
// A level released already returns what its Release returned.
func (n *nested) Release(ctx context.Context) (err error) {
	if err := kit.CheckCtx(ctx); err != nil {
		return &latchkit.OpError{Op: "release", Kind: n.k.kind, Name: n.k.name, Err: err}
	}
	n.mu.Lock()
	if n.done {
		n.mu.Unlock()
		return n.relErr
	}
	n.done = true
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.relErr = err
		n.mu.Unlock()
	}()
	r := n.r
	r.mu.Lock()
	n.h.depth--
	last := n.h.depth == 0
	if last && r.held[n.k] == n.h {
		delete(r.held, n.k)
	}
	r.mu.Unlock()
	if !last {
		if err := n.h.lease.Context().Err(); err != nil {
			return fmt.Errorf("%w: %w", latchkit.ErrLeaseLost, context.Cause(n.h.lease.Context()))
		}
		return nil
	}
	if err := n.h.lease.Release(ctx); err != nil {
		if !errors.Is(err, latchkit.ErrLeaseLost) {
			// Unknown outcome (Redis unreachable): keep the level so that
			// the caller can retry this Release.
			r.mu.Lock()
			n.h.depth++
			if r.held[n.k] == nil {
				r.held[n.k] = n.h
			}
			r.mu.Unlock()
			n.mu.Lock()
			n.done = false
			n.mu.Unlock()
		}
		return err
	}
	return nil
}
