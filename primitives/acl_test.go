package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// The tests of this file run the primitives as a user of a common Redis 7
// ACL: keys under the prefix, every command, and no pub/sub channel (a new
// user's default, acl-pubsub-default resetchannels). Every PUBLISH a script
// makes is refused, and so is every SUBSCRIBE: waiters are granted by their
// timers, and a script that wrote before its PUBLISH must not fail and leave
// its writes behind.

// aclUser is the ACL of the user the tests run as: no &* (allchannels).
var aclUser = []any{"ACL", "SETUSER", "svc", "on", ">pw", "~latch:*", "+@all"}

// aclDrivers makes a backend logged in as svc on the server at addr.
var aclDrivers = []struct {
	name string
	make func(t *testing.T, addr string) backend.Backend
}{
	{"go-redis", func(t *testing.T, addr string) backend.Backend {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: "svc", Password: "pw", ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c)
	}},
	{"rueidis", func(t *testing.T, addr string) backend.Backend {
		c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{addr}, Username: "svc", Password: "pw",
			Dialer: net.Dialer{Timeout: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return lrueidis.New(c)
	}},
}

// aclServer starts a redis-server with the user svc (aclUser) and returns
// an admin client (the default user) and a backend maker per driver.
func aclServer(t *testing.T, acl []any) *redis.Client {
	t.Helper()
	s := redistest.Start(t)
	if _, err := s.Do(context.Background(), acl...); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { admin.Close() })
	return admin
}

// forEachACLDriver runs f once per driver, each on a fresh server, with
// backends logged in as the channel-less user.
func forEachACLDriver(t *testing.T, f func(t *testing.T, admin *redis.Client, newBackend func() backend.Backend)) {
	for _, d := range aclDrivers {
		t.Run(d.name, func(t *testing.T) {
			admin := aclServer(t, aclUser)
			f(t, admin, func() backend.Backend { return d.make(t, admin.Options().Addr) })
		})
	}
}

// noKeyWithoutExpiry fails t for every key left without an expiry.
func noKeyWithoutExpiry(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	keys, err := admin.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if d, err := admin.PTTL(ctx, k).Result(); err != nil {
			t.Fatal(err)
		} else if d == -1 {
			t.Errorf("key %q has no expiry", k)
		}
	}
}

// leaderIs fails t unless the election's Leader is want (zero: nobody).
func leaderIs(t *testing.T, ctx context.Context, e primitives.Election, want primitives.LeaderInfo, when string) {
	t.Helper()
	info, err := e.Leader(ctx)
	switch {
	case want == (primitives.LeaderInfo{}) && !errors.Is(err, primitives.ErrNoLeader):
		t.Errorf("%s: Leader = %+v, %v; want ErrNoLeader", when, info, err)
	case want != (primitives.LeaderInfo{}) && (err != nil || info != want):
		t.Errorf("%s: Leader = %+v, %v; want %+v", when, info, err, want)
	}
}

// TestACLWithoutChannelsElectionSeatsOnlyLeaseHolders: under an ACL with no
// pub/sub channel, Campaign leads (or fails leaving nobody seated), Leader
// names only a campaigner that got a lease, a queued campaigner is seated
// after the leader resigns (by its timer: no message reaches it), an
// observer follows by reading the seat, and no key is left without an
// expiry.
func TestACLWithoutChannelsElectionSeatsOnlyLeaseHolders(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	forEachACLDriver(t, func(t *testing.T, admin *redis.Client, newBackend func() backend.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		opts := []primitives.Option{primitives.WithTTL(2 * time.Second), primitives.WithWaiterTimeout(600 * time.Millisecond)}
		e1, err := primitives.NewElection(clienttest.For(t, newBackend()), "acl", opts...)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := primitives.NewElection(clienttest.For(t, newBackend()), "acl", opts...)
		if err != nil {
			t.Fatal(err)
		}

		seen := make(chan primitives.LeaderInfo, 16)
		octx, ocancel := context.WithCancel(ctx)
		var owg sync.WaitGroup
		owg.Add(1)
		go func() {
			defer owg.Done()
			for info := range e2.Observe(octx) {
				seen <- info
			}
		}()
		defer func() { ocancel(); owg.Wait() }()

		l1, err := e1.Campaign(ctx, "a")
		if err != nil {
			info, lerr := e1.Leader(ctx)
			t.Fatalf("Campaign: %v; Leader after it: %+v, %v (a failed campaign must leave nobody seated)", err, info, lerr)
		}
		leaderIs(t, ctx, e1, primitives.LeaderInfo{Value: "a", Fence: l1.Fence()}, "after the first campaign")

		type result struct {
			l   latchkit.Lease
			err error
		}
		second := make(chan result, 1)
		go func() {
			l, err := e2.Campaign(ctx, "b")
			second <- result{l, err}
		}()
		time.Sleep(300 * time.Millisecond) // queued behind a
		leaderIs(t, ctx, e2, primitives.LeaderInfo{Value: "a", Fence: l1.Fence()}, "while a leads and b waits")

		resigned := time.Now()
		if err := l1.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		var r result
		select {
		case r = <-second:
		case <-time.After(5 * time.Second):
			t.Fatal("the second campaigner was not seated within 5s of the resignation")
		}
		if r.err != nil {
			t.Fatalf("second Campaign: %v", r.err)
		}
		t.Logf("second campaigner seated %v after the resignation", time.Since(resigned).Round(time.Millisecond))
		if r.l.Fence() <= l1.Fence() {
			t.Errorf("second fence %d, not above the first's %d", r.l.Fence(), l1.Fence())
		}
		want := primitives.LeaderInfo{Value: "b", Fence: r.l.Fence()}
		leaderIs(t, ctx, e1, want, "after the hand-over")

		// The observer, which cannot subscribe, reads its way to b.
		deadline := time.After(5 * time.Second)
	observe:
		for {
			select {
			case info := <-seen:
				if info == want {
					break observe
				}
			case <-deadline:
				t.Fatalf("the observer did not report %+v within 5s", want)
			}
		}

		if err := r.l.Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		leaderIs(t, ctx, e1, primitives.LeaderInfo{}, "after both resigned")
		noKeyWithoutExpiry(t, admin)
	})
}

// TestACLWithoutChannelsMutexHandsOverByTimer: under an ACL with no pub/sub
// channel, a released Mutex is handed to its waiters one at a time (each
// by its timer), never to two at once, and no key is left without an
// expiry.
func TestACLWithoutChannelsMutexHandsOverByTimer(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	forEachACLDriver(t, func(t *testing.T, admin *redis.Client, newBackend func() backend.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		opts := []primitives.Option{primitives.WithTTL(2 * time.Second), primitives.WithWaiterTimeout(600 * time.Millisecond)}
		b := newBackend()
		m, err := primitives.NewMutex(clienttest.For(t, b), "acl", opts...)
		if err != nil {
			t.Fatal(err)
		}
		first, err := m.Lock(ctx)
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if _, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("TryLock of a held Mutex: %v, want ErrNotAcquired", err)
		}
		const waiters = 2
		var inside atomic.Int32
		errs := make(chan error, waiters)
		for i := range waiters {
			go func() {
				wctx, wcancel := context.WithTimeout(ctx, 8*time.Second)
				defer wcancel()
				l, err := m.Lock(wctx)
				if err != nil {
					errs <- fmt.Errorf("waiter %d: %w", i, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("waiter %d: %d holders at once", i, n)
				}
				time.Sleep(50 * time.Millisecond)
				inside.Add(-1)
				errs <- l.Release(ctx)
			}()
		}
		time.Sleep(300 * time.Millisecond) // both queued
		if err := first.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		for range waiters {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		noKeyWithoutExpiry(t, admin)
	})
}

// TestACLWithoutChannelsSemaphoreGrantsByTimer: under an ACL with no
// pub/sub channel, a waiter of a full Semaphore is granted after a
// release (by its timer), and no key is left without an expiry.
func TestACLWithoutChannelsSemaphoreGrantsByTimer(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	forEachACLDriver(t, func(t *testing.T, admin *redis.Client, newBackend func() backend.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := primitives.NewSemaphore(clienttest.For(t, newBackend()), "acl", 2, primitives.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var held []latchkit.Lease
		for range 2 {
			l, err := s.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			held = append(held, l)
		}
		got := make(chan error, 1)
		go func() {
			wctx, wcancel := context.WithTimeout(ctx, 8*time.Second)
			defer wcancel()
			l, err := s.Acquire(wctx)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(300 * time.Millisecond)
		for _, l := range held {
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		if err := <-got; err != nil {
			t.Errorf("waiter: %v", err)
		}
		noKeyWithoutExpiry(t, admin)
	})
}
