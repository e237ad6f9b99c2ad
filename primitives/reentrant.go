package primitives

import (
	"context"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/middleware"
)

// NewReentrantMutex returns a Mutex that the owner in the context
// (WithOwner) can re-enter: a Lock by the owner that holds it succeeds at
// once, without a round trip, and the Redis lock is released only with the
// outermost lease. Each nested lease releases one level; extending any
// level extends the lock. Two owners exclude each other exactly like a
// Mutex (it is a Mutex, with the same keys, behind middleware.Reentrant).
//
// Re-entry is tracked in the returned value: share it between the code
// paths that re-enter. A Lock without an owner in its context fails with an
// error matching latchkit.ErrInvalid.
func NewReentrantMutex(b backend.Backend, name string, opts ...Option) (Mutex, error) {
	m, err := newMutex(latchkit.KindReentrantMutex, b, name, opts)
	if err != nil {
		return nil, err
	}
	m.cfg.use(middleware.Reentrant())
	return &reentrantMutex{m}, nil
}

type reentrantMutex struct{ *mutex }

func (r *reentrantMutex) Lock(ctx context.Context) (latchkit.Lease, error) {
	return r.acquire(ctx, latchkit.KindReentrantMutex, false)
}

func (r *reentrantMutex) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return r.acquire(ctx, latchkit.KindReentrantMutex, true)
}
