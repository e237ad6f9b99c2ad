package primitives

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
)

// A release whose reply was lost (the server ran it; the client saw its
// connection reset) is retried through the same lease's Release, which
// goes to Redis again since the first call's outcome was unknown. The
// retry must report success whatever happened to the name in between
// (issue 28, finding 5; issue 29, item 2):
//   - another client took the name and released it;
//   - the release handed the lock over to a waiter, who then released it;
//
// and a lease that expired before its release is still reported lost,
// even though another client took and released the name meanwhile.

// retryKind is one kind of lease under test.
type retryKind struct {
	name string
	// open makes the primitive named name on b: its single attempt and
	// its waiting acquisition.
	open func(c *Client, name string, opts ...Option) (try, wait func(context.Context) (latchkit.Lease, error), err error)
	// queued reports whether a waiting acquisition of name has queued
	// behind the holder, for kinds whose release hands over to the
	// oldest waiter; nil for the others.
	queued func(ctx context.Context, c *redis.Client, prefix, name string) bool
}

func zcardAtLeast(ctx context.Context, c *redis.Client, key string, n int64) bool {
	got, err := c.ZCard(ctx, key).Result()
	return err == nil && got >= n
}

func mutexQueued(l keyspace.Layout) func(ctx context.Context, c *redis.Client, prefix, name string) bool {
	return func(ctx context.Context, c *redis.Client, prefix, name string) bool {
		return zcardAtLeast(ctx, c, l.KeysOf(prefix, name)[5], 1)
	}
}

func fairQueued(ctx context.Context, c *redis.Client, prefix, name string) bool {
	// The holder's ticket and the waiter's.
	return zcardAtLeast(ctx, c, keyspace.FairLayout.KeysOf(prefix, name)[0], 2)
}

var retryKinds = []retryKind{
	{"Mutex", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		m, err := NewMutex(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return m.TryLock, m.Lock, nil
	}, mutexQueued(keyspace.MutexLayout)},
	{"Election", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		e, err := NewElection(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (latchkit.Lease, error) { return e.TryCampaign(ctx, "v") },
			func(ctx context.Context) (latchkit.Lease, error) { return e.Campaign(ctx, "v") }, nil
	}, mutexQueued(keyspace.ElectionLayout)},
	{"MultiLock", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		m, err := NewMultiLock(c, []string{name + "1", name + "2"}, opts...)
		if err != nil {
			return nil, nil, err
		}
		return m.TryLock, m.Lock, nil
	}, func(ctx context.Context, c *redis.Client, prefix, name string) bool {
		return mutexQueued(keyspace.MutexLayout)(ctx, c, prefix, name+"1") || mutexQueued(keyspace.MutexLayout)(ctx, c, prefix, name+"2")
	}},
	{"Redlock(1)", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		// The default per-instance timeout (a twentieth of the TTL, 5 ms
		// at the expiry test's 100 ms) is too short for a busy machine.
		m, err := NewRedlock([]*Client{c}, name, append(redlockOptions(opts), redlockOpt(func(c *kit.Config) { c.InstanceTimeout = c.TTL / 2 }))...)
		if err != nil {
			return nil, nil, err
		}
		return m.TryLock, m.Lock, nil
	}, nil},
	{"Semaphore(1)", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		s, err := NewSemaphore(c, name, 1, opts...)
		if err != nil {
			return nil, nil, err
		}
		return s.TryAcquire, s.Acquire, nil
	}, nil},
	{"FairSemaphore(1)", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		s, err := NewFairSemaphore(c, name, 1, opts...)
		if err != nil {
			return nil, nil, err
		}
		return s.TryAcquire, s.Acquire, nil
	}, fairQueued},
	{"FairMutex", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		m, err := NewFairMutex(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return m.TryLock, m.Lock, nil
	}, fairQueued},
	{"RWLock/read", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		rw, err := NewRWLock(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return rw.TryRLock, rw.RLock, nil
	}, nil},
	{"RWLock/write", func(c *Client, name string, opts ...Option) (_, _ func(context.Context) (latchkit.Lease, error), _ error) {
		rw, err := NewRWLock(c, name, opts...)
		if err != nil {
			return nil, nil, err
		}
		return rw.TryLock, rw.Lock, nil
	}, nil},
}

// retrySetup is one kind on one server: a lossy client (through a proxy
// that can drop a reply after the server ran the call; the driver never
// resends) and a direct one.
type retrySetup struct {
	px           *faultproxy.Proxy
	lossy        func(context.Context) (latchkit.Lease, error)
	direct, wait func(context.Context) (latchkit.Lease, error)
}

func openRetry(t *testing.T, srv fairServer, k retryKind, prefix, name string, ttl time.Duration) retrySetup {
	t.Helper()
	px := faultproxy.Start(t, srv.c.Options().Addr)
	lc := redis.NewClient(&redis.Options{Addr: px.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { lc.Close() })
	opts := []Option{WithPrefix(prefix), WithTTL(ttl), WithAutoExtend(false)}
	lossy, _, err := k.open(testClient(t, goredis.New(lc)), name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	direct, wait, err := k.open(testClient(t, srv.b), name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// Load every script this kind runs (a NOSCRIPT reply must not be the
	// one dropped), on a name of its own.
	wdirect, _, err := k.open(testClient(t, srv.b), name+"-warm", opts...)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := wdirect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := wl.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return retrySetup{px: px, lossy: lossy, direct: direct, wait: wait}
}

// loseRelease releases l with its reply dropped: the call must fail with
// an unknown outcome (not ErrLeaseLost).
func (s retrySetup) loseRelease(t *testing.T, ctx context.Context, l latchkit.Lease) {
	t.Helper()
	s.px.DropNextReplies(1)
	err := l.Release(ctx)
	if err == nil || errors.Is(err, latchkit.ErrLeaseLost) {
		t.Fatalf("release whose reply was dropped: %v, want an error of unknown outcome", err)
	}
}

func TestRetriedReleaseAfterAnotherHolderReleased(t *testing.T) {
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range retryKinds {
			t.Run(k.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				prefix := "rr:" + k.name + ":"
				s := openRetry(t, srv, k, prefix, "n", 5*time.Second)
				a, err := s.lossy(ctx)
				if err != nil {
					t.Fatal(err)
				}
				s.loseRelease(t, ctx, a)
				b, err := s.direct(ctx) // the release ran: the name is free
				if err != nil {
					t.Fatalf("another client after the lost release: %v", err)
				}
				if err := b.Release(ctx); err != nil {
					t.Fatalf("the other client's release: %v", err)
				}
				if err := a.Release(ctx); err != nil {
					t.Errorf("retried release, after another client took and released the name: %v, want nil", err)
				}
				checkEveryKeyExpires(t, ctx, srv, prefix, "the retried release")
			})
		}
	})
}

func TestRetriedReleaseAfterHandOver(t *testing.T) {
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range retryKinds {
			if k.queued == nil {
				continue // no hand-over: TestRetriedReleaseAfterAnotherHolderReleased covers it
			}
			t.Run(k.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				prefix := "rh:" + k.name + ":"
				s := openRetry(t, srv, k, prefix, "n", 5*time.Second)
				a, err := s.lossy(ctx)
				if err != nil {
					t.Fatal(err)
				}
				type result struct {
					l   latchkit.Lease
					err error
				}
				waiter := make(chan result, 1)
				go func() {
					l, err := s.wait(ctx)
					waiter <- result{l, err}
				}()
				for !k.queued(ctx, srv.c, prefix, "n") {
					if ctx.Err() != nil {
						t.Fatal("the waiter never queued")
					}
					time.Sleep(time.Millisecond)
				}
				s.loseRelease(t, ctx, a)
				w := <-waiter
				if w.err != nil {
					t.Fatalf("the waiter, handed the lock by the lost release: %v", w.err)
				}
				if err := w.l.Release(ctx); err != nil {
					t.Fatalf("the waiter's release: %v", err)
				}
				if err := a.Release(ctx); err != nil {
					t.Errorf("retried release, after it handed the lock to a waiter who released it: %v, want nil", err)
				}
				checkEveryKeyExpires(t, ctx, srv, prefix, "the retried release")
			})
		}
	})
}

// A lease that expired before its release is lost, although another
// client took and released the name meanwhile; and a retried release
// whose first try was sent while the lease was live succeeds however late
// it is retried (a minute later here): the client, not the server,
// remembers that the caller let go in time. (Until a release stopped
// writing its token to the server, the server remembered it for a minute,
// and a retry past that was reported lost: issue 39.)
func TestReleaseAfterExpiryIsLost(t *testing.T) {
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range retryKinds {
			t.Run(k.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				prefix := "re:" + k.name + ":"
				const ttl = 100 * time.Millisecond
				s := openRetry(t, srv, k, prefix, "n", ttl)
				a, err := s.lossy(ctx)
				if err != nil {
					t.Fatal(err)
				}
				srv.pass(ttl + 50*time.Millisecond)
				b, err := s.direct(ctx)
				if err != nil {
					t.Fatalf("another client after the lease expired: %v", err)
				}
				if err := b.Release(ctx); err != nil {
					t.Fatalf("the other client's release: %v", err)
				}
				if err := a.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
					t.Errorf("release of a lease that expired, after another client took and released the name: %v, want ErrLeaseLost", err)
				}
				checkEveryKeyExpires(t, ctx, srv, prefix, "the release of an expired lease")
				if srv.mini == nil {
					return // the window is a minute: only a clock the test moves gets past it
				}
				a, err = s.lossy(ctx)
				if err != nil {
					t.Fatal(err)
				}
				s.loseRelease(t, ctx, a)
				srv.pass(kit.MarkerTTL + time.Second)
				if err := a.Release(ctx); err != nil {
					t.Errorf("release retried a minute after a first try sent while the lease was live: %v, want nil", err)
				}
			})
		}
	})
}

// Between a lost release and its retry, more tokens than any fixed bound
// finish on the name (1100 others take it and release it, a millisecond
// apart on the server's clock): the retry still finds its own evidence.
// On miniredis (slower per call) the Mutex and the Semaphore alone.
func TestRetriedReleaseAfterManyOtherReleases(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range retryKinds {
			t.Run(k.name, func(t *testing.T) {
				if (srv.mini != nil || !lane.Long()) && k.name != "Mutex" && k.name != "Semaphore(1)" {
					t.Skip("the same evidence as the Mutex's and the Semaphore's (remember): they cover it on miniredis and in the fast lane, every kind on redis-server in the long lane")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				prefix := "rm:" + k.name + ":"
				s := openRetry(t, srv, k, prefix, "n", 5*time.Second)
				a, err := s.lossy(ctx)
				if err != nil {
					t.Fatal(err)
				}
				s.loseRelease(t, ctx, a)
				for i := range 1100 {
					if srv.mini != nil { // redis-server's clock moves by itself
						srv.pass(time.Millisecond)
					}
					b, err := s.direct(ctx)
					if err != nil {
						t.Fatalf("other client %d: %v", i, err)
					}
					if err := b.Release(ctx); err != nil {
						t.Fatalf("other client %d's release: %v", i, err)
					}
				}
				if err := a.Release(ctx); err != nil {
					t.Errorf("retried release, after 1100 other clients took and released the name: %v, want nil", err)
				}
				checkEveryKeyExpires(t, ctx, srv, prefix, "the retried release")
			})
		}
	})
}
