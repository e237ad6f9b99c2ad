package contracttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// RunReplicaAck checks primitives.WithReplicaAck asking for more replicas
// (8) than the server under test has (the Sentinel failover tests show it
// with a replica that acknowledges): each primitive's grant is refused with ErrNotReplicated, the
// grant is given back at once, and bad arguments are refused up front. A
// backend that does not implement backend.ReplicaAcker skips it.
func RunReplicaAck(t *testing.T, h Harness) {
	mustHarness(t, h)
	if _, ok := h.NewClient(t).Backend.(backend.ReplicaAcker); !ok {
		t.Skip("the backend does not implement backend.ReplicaAcker")
	}
	runSteps(t, h, []step{
		{"NoReplicaRefusesAndGivesBack", testReplicaAckRefused},
		{"BadInput", testReplicaAckBadInput},
	})
}

// tooMany is more replicas than any server under the suite has.
const tooMany = 8

// ackTry is one primitive's try-acquire, built with opts.
type ackTry struct {
	what string
	try  func(ctx context.Context, c *primitives.Client, p string, opts ...primitives.Option) (latchkit.Lease, error)
}

var ackTries = []ackTry{
	{"mutex", func(ctx context.Context, c *primitives.Client, p string, opts ...primitives.Option) (latchkit.Lease, error) {
		m, err := primitives.NewMutex(c, "m", append(opts, primitives.WithPrefix(p))...)
		if err != nil {
			return nil, err
		}
		return m.TryLock(ctx)
	}},
	{"rwlock read", func(ctx context.Context, c *primitives.Client, p string, opts ...primitives.Option) (latchkit.Lease, error) {
		rw, err := primitives.NewRWLock(c, "rw", append(opts, primitives.WithPrefix(p))...)
		if err != nil {
			return nil, err
		}
		return rw.TryRLock(ctx)
	}},
	{"rwlock write", func(ctx context.Context, c *primitives.Client, p string, opts ...primitives.Option) (latchkit.Lease, error) {
		rw, err := primitives.NewRWLock(c, "rw", append(opts, primitives.WithPrefix(p))...)
		if err != nil {
			return nil, err
		}
		return rw.TryLock(ctx)
	}},
	{"semaphore", func(ctx context.Context, c *primitives.Client, p string, opts ...primitives.Option) (latchkit.Lease, error) {
		s, err := primitives.NewSemaphore(c, "s", 1, append(opts, primitives.WithPrefix(p))...)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire(ctx)
	}},
	{"fair semaphore", func(ctx context.Context, c *primitives.Client, p string, opts ...primitives.Option) (latchkit.Lease, error) {
		s, err := primitives.NewFairSemaphore(c, "f", 1, append(opts, primitives.WithPrefix(p))...)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire(ctx)
	}},
	{"multilock", func(ctx context.Context, c *primitives.Client, p string, opts ...primitives.Option) (latchkit.Lease, error) {
		m, err := primitives.NewMultiLock(c, []string{"x", "y", "z"}, append(opts, primitives.WithPrefix(p))...)
		if err != nil {
			return nil, err
		}
		return m.TryLock(ctx)
	}},
}

// testReplicaAckRefused: with WithReplicaAck(8, 20ms) and fewer replicas, each
// primitive's TryLock fails with ErrNotReplicated, a waiting Lock at its
// deadline after trying again, and the grant is given back:
// the same primitive is then free for a TryLock without the option, limit
// 1 included.
func testReplicaAckRefused(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	c := clienttest.For(t, b)
	p := prefix(t)
	for _, a := range ackTries {
		ctx := ctxT(t, 10*time.Second)
		l, err := a.try(ctx, c, p, primitives.WithReplicaAck(tooMany, 20*time.Millisecond))
		if !errors.Is(err, primitives.ErrNotReplicated) || l != nil {
			t.Errorf("%s with WithReplicaAck(%d): %v, want ErrNotReplicated", a.what, tooMany, err)
			if l != nil {
				l.Release(ctx)
			}
			continue
		}
		l, err = a.try(ctx, c, p)
		if err != nil {
			t.Errorf("%s: the unacknowledged grant was not given back: %v", a.what, err)
			continue
		}
		l.Release(ctx)
	}

	// A waiting Lock tries again until its context ends (a replica may
	// acknowledge a later grant), then says why it was refused (also when
	// the deadline cut its last attempt short); every refused grant was
	// given back.
	attempts := 0
	m, err := primitives.NewMutex(c, "wait", primitives.WithPrefix(p), primitives.WithReplicaAck(tooMany, 20*time.Millisecond),
		primitives.WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
			return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
				req.OnAttempt = func(int, error) { attempts++ }
				return next(ctx, req)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t, 30*time.Second), 400*time.Millisecond)
	defer cancel()
	if _, err := m.Lock(ctx); !errors.Is(err, primitives.ErrNotReplicated) || !errors.Is(err, context.DeadlineExceeded) || attempts < 2 {
		t.Errorf("Lock: %v after %d attempts, want ErrNotReplicated and DeadlineExceeded after several", err, attempts)
	}
	other, err := primitives.NewMutex(c, "wait", primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := other.TryLock(ctxT(t, 10*time.Second)); err != nil {
		t.Errorf("the refused Lock left the lock held: %v", err)
	} else {
		l.Release(ctxT(t, 10*time.Second))
	}
}

// testReplicaAckBadInput: a replica count below 1, a timeout below 1ms or
// not below the TTL are refused by the constructor with ErrInvalid, and
// nothing is written.
func testReplicaAckBadInput(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	cl := clienttest.For(t, b)
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	for _, c := range []struct {
		what string
		opts []primitives.Option
	}{
		{"0 replicas", []primitives.Option{primitives.WithReplicaAck(0, time.Second)}},
		{"-1 replicas", []primitives.Option{primitives.WithReplicaAck(-1, time.Second)}},
		{"timeout 0", []primitives.Option{primitives.WithReplicaAck(1, 0)}},
		{"timeout below 1ms", []primitives.Option{primitives.WithReplicaAck(1, time.Microsecond)}},
		{"timeout not below the ttl", []primitives.Option{primitives.WithTTL(time.Second), primitives.WithReplicaAck(1, time.Second)}},
	} {
		for _, a := range ackTries {
			if l, err := a.try(ctx, cl, p, c.opts...); !errors.Is(err, latchkit.ErrInvalid) || l != nil {
				t.Errorf("%s, %s: %v, want ErrInvalid", a.what, c.what, err)
			}
		}
	}
	for _, name := range []string{"m", "rw", "s", "f", "x", "y", "z"} {
		if v := do(t, b, "EXISTS", keyOf(p, name)); v != int64(0) {
			t.Errorf("a refused constructor wrote %s", keyOf(p, name))
		}
	}
}
