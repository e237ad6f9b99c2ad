package primitives_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/kit/kittest"
	"github.com/latchkit/latchkit/primitives"
)

// The built-ins keep the rules a primitive written on kit keeps
// (kittest.Run), on every driver: those written on kit (the Semaphore, the
// RWLock's writer) and those still on the machinery behind it.
func TestBuiltinsKeepTheKitRules(t *testing.T) {
	type acquire = func(ctx context.Context, cl *kit.Client, name string, try bool, o ...kit.Option) (latchkit.Lease, error)
	opts := func(o []kit.Option) []primitives.Option {
		out := make([]primitives.Option, 0, len(o))
		for _, x := range o {
			out = append(out, x.(primitives.Option))
		}
		return out
	}
	// mutex is the subject of a lock family's constructor.
	mutex := func(newM func(cl *primitives.Client, name string, o ...primitives.Option) (primitives.Mutex, error)) acquire {
		return func(ctx context.Context, cl *kit.Client, name string, try bool, o ...kit.Option) (latchkit.Lease, error) {
			m, err := newM(cl, name, opts(o)...)
			if err != nil {
				return nil, err
			}
			if try {
				return m.TryLock(ctx)
			}
			return m.Lock(ctx)
		}
	}
	// semaphore is the subject of a semaphore's constructor, of 2 permits.
	semaphore := func(newS func(cl *primitives.Client, name string, limit int, o ...primitives.Option) (primitives.Semaphore, error)) acquire {
		return func(ctx context.Context, cl *kit.Client, name string, try bool, o ...kit.Option) (latchkit.Lease, error) {
			s, err := newS(cl, name, 2, opts(o)...)
			if err != nil {
				return nil, err
			}
			if try {
				return s.TryAcquire(ctx)
			}
			return s.Acquire(ctx)
		}
	}
	var owners atomic.Int64
	reentrant := mutex(primitives.NewReentrantMutex)
	subjects := []struct {
		name  string
		limit int
		a     acquire
	}{
		{"Semaphore(2)", 2, semaphore(primitives.NewSemaphore)},
		{"FairSemaphore(2)", 2, semaphore(primitives.NewFairSemaphore)},
		{"Mutex", 1, mutex(primitives.NewMutex)},
		{"FairMutex", 1, mutex(primitives.NewFairMutex)},
		{"ReentrantMutex", 1, func(ctx context.Context, cl *kit.Client, name string, try bool, o ...kit.Option) (latchkit.Lease, error) {
			ctx = primitives.WithOwner(ctx, fmt.Sprint("owner-", owners.Add(1))) // an owner per call: none re-enters
			return reentrant(ctx, cl, name, try, o...)
		}},
		{"MultiLock", 1, mutex(func(cl *primitives.Client, name string, o ...primitives.Option) (primitives.Mutex, error) {
			return primitives.NewMultiLock(cl, []string{name, name + "-2"}, o...)
		})},
		{"RWLock/write", 1, func(ctx context.Context, cl *kit.Client, name string, try bool, o ...kit.Option) (latchkit.Lease, error) {
			rw, err := primitives.NewRWLock(cl, name, opts(o)...)
			if err != nil {
				return nil, err
			}
			if try {
				return rw.TryLock(ctx)
			}
			return rw.Lock(ctx)
		}},
		{"Election", 1, func(ctx context.Context, cl *kit.Client, name string, try bool, o ...kit.Option) (latchkit.Lease, error) {
			e, err := primitives.NewElection(cl, name, opts(o)...)
			if err != nil {
				return nil, err
			}
			if try {
				return e.TryCampaign(ctx, "v")
			}
			return e.Campaign(ctx, "v")
		}},
	}
	for _, s := range subjects {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			kittest.Run(t, kittest.Subject{Limit: s.limit, Acquire: s.a})
		})
	}
}
