package primitives_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/primitives"
)

// acquirer is one acquisition of a primitive, waiting or single.
type acquirer struct {
	name string
	open func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error)
}

func mutexAcquirer(name string, mk func(*primitives.Client, string, ...primitives.Option) (primitives.Mutex, error)) acquirer {
	return acquirer{name, func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		m, err := mk(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return m.Lock, m.TryLock, nil
	}}
}

// acquirers is every primitive whose acquisition hands out a lease.
var acquirers = []acquirer{
	mutexAcquirer("Mutex", primitives.NewMutex),
	mutexAcquirer("FairMutex", primitives.NewFairMutex),
	mutexAcquirer("MultiLock", func(c *primitives.Client, name string, opts ...primitives.Option) (primitives.Mutex, error) {
		return primitives.NewMultiLock(c, []string{name + "-a", name + "-b"}, opts...)
	}),
	{"ReentrantMutex", func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		m, err := primitives.NewReentrantMutex(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		own := func(f func(context.Context) (latchkit.Lease, error)) func(context.Context) (latchkit.Lease, error) {
			return func(ctx context.Context) (latchkit.Lease, error) { return f(primitives.WithOwner(ctx, "job")) }
		}
		return own(m.Lock), own(m.TryLock), nil
	}},
	{"Redlock", func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		var ropts []primitives.RedlockOption
		for _, o := range opts {
			if ro, ok := o.(primitives.RedlockOption); ok {
				ropts = append(ropts, ro)
			}
		}
		m, err := primitives.NewRedlock([]*primitives.Client{c}, name, ropts...)
		if err != nil {
			return nil, nil, err
		}
		return m.Lock, m.TryLock, nil
	}},
	{"Semaphore", func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		s, err := primitives.NewSemaphore(c, name, 1, opts...)
		if err != nil {
			return nil, nil, err
		}
		return s.Acquire, s.TryAcquire, nil
	}},
	{"FairSemaphore", func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		s, err := primitives.NewFairSemaphore(c, name, 1, opts...)
		if err != nil {
			return nil, nil, err
		}
		return s.Acquire, s.TryAcquire, nil
	}},
	{"RWLock.Lock", func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		rw, err := primitives.NewRWLock(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return rw.Lock, rw.TryLock, nil
	}},
	{"RWLock.RLock", func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		rw, err := primitives.NewRWLock(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return rw.RLock, rw.TryRLock, nil
	}},
	{"Election", func(c *primitives.Client, name string, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error), err error) {
		e, err := primitives.NewElection(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (latchkit.Lease, error) { return e.Campaign(ctx, "me") },
			func(ctx context.Context) (latchkit.Lease, error) { return e.TryCampaign(ctx, "me") }, nil
	}},
}

// TestLeaseNeverHandedOutDead: a grant whose reply comes after the lease's
// TTL (a Redis stall longer than the TTL) is not handed out: a waiting
// acquisition goes on (its next attempt, with the same token, finds the
// grant and renews it, or takes the primitive anew) and returns a live
// lease; a single attempt gives the grant back and says Redis did not
// answer in time. Issue 38, finding 7: after such a stall, Lock and
// Campaign returned a lease whose Context had already ended.
func TestLeaseNeverHandedOutDead(t *testing.T) {
	const ttl, stall = 100 * time.Millisecond, 250 * time.Millisecond
	for _, a := range acquirers {
		t.Run(a.name, func(t *testing.T) {
			m := miniredis.RunT(t)
			px := faultproxy.Start(t, m.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: px.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			c, err := primitives.NewClient(goredis.New(rdb))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close(context.Background()) })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			opts := []primitives.Option{primitives.WithTTL(ttl)}
			// The scripts loaded, so that the stalled call is the attempt.
			warm, _, err := a.open(c, "warm", opts...)
			if err != nil {
				t.Fatal(err)
			}
			wl, err := warm(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := wl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []string{"waiting", "single"} {
				lock, try, err := a.open(c, "job-"+mode, opts...)
				if err != nil {
					t.Fatal(err)
				}
				call := lock
				if mode == "single" {
					call = try
				}
				px.Blackhole(true)
				stalled := make(chan struct{})
				go func() {
					defer close(stalled)
					time.Sleep(stall)
					px.Blackhole(false)
				}()
				start := time.Now()
				l, err := call(ctx)
				took := time.Since(start)
				if mode == "waiting" {
					<-stalled
					if err != nil {
						t.Fatalf("%s after a %v stall: %v", mode, stall, err)
					}
					if cerr := l.Context().Err(); cerr != nil {
						t.Fatalf("%s returned after %v a lease already ended: %v", mode, took.Round(time.Millisecond), context.Cause(l.Context()))
					}
					if left, err := l.TTL(ctx); err != nil || left <= 0 {
						t.Fatalf("the lease handed out: TTL %v, %v", left, err)
					}
					if err := l.Release(ctx); err != nil {
						t.Fatalf("Release: %v", err)
					}
					continue
				}
				if err == nil {
					t.Fatalf("%s returned after %v a lease (Context err %v) for a grant that came after its TTL", mode, took.Round(time.Millisecond), l.Context().Err())
				}
				if !errors.Is(err, latchkit.ErrUnavailable) {
					t.Errorf("%s: %v, want an error matching ErrUnavailable (Redis did not answer within the TTL)", mode, err)
				}
				// The grant is given back (in the background, while the
				// stall lasts): the primitive is free soon after.
				<-stalled
				for free := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
					l2, err := try(ctx)
					if err == nil {
						_ = l2.Release(ctx)
						break
					}
					if time.Now().After(free) {
						t.Fatalf("%s: the primitive is not free a second after the stall: %v", mode, err)
					}
				}
			}
		})
	}
}
