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
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// realBackends connects to every server with a client of its own,
// alternating go-redis and rueidis (a Redlock may mix drivers): what one
// process of a Redlock deployment has.
func realBackends(t *testing.T, srvs []*redistest.Server) []backend.Backend {
	t.Helper()
	bs := make([]backend.Backend, len(srvs))
	for i, s := range srvs {
		if i%2 == 0 {
			c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
			t.Cleanup(func() { c.Close() })
			bs[i] = goredis.New(c)
		} else {
			c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{s.Addr}, Dialer: net.Dialer{Timeout: 100 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			bs[i] = lrueidis.New(c)
		}
	}
	return bs
}

func startServers(t *testing.T, n int) []*redistest.Server {
	srvs := make([]*redistest.Server, n)
	for i := range srvs {
		srvs[i] = redistest.Start(t)
	}
	return srvs
}

// TestRedlockRedisServerMutualExclusion: 8 clients (each with its own
// connections to the 5 redis-server instances, as 8 processes would have)
// increment a counter by a deliberate read, pause, write under a Redlock.
// An overlap of two holders loses an increment; fences, taken in grant
// order, must strictly increase.
func TestRedlockRedisServerMutualExclusion(t *testing.T) {
	srvs := startServers(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients, rounds = 8, 25
	var counter atomic.Int64
	var mu sync.Mutex
	var fences []int64
	var wg sync.WaitGroup
	for g := 0; g < clients; g++ {
		rl, err := primitives.NewRedlock(clienttest.All(t, realBackends(t, srvs)), "counter", primitives.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := rl.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				fences = append(fences, l.Fence())
				mu.Unlock()
				v := counter.Load() // read, pause, write: not atomic on purpose
				time.Sleep(100 * time.Microsecond)
				counter.Store(v + 1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := counter.Load(); got != clients*rounds {
		t.Errorf("counter %d after %d increments: two holders overlapped", got, clients*rounds)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence went from %d to %d", fences[i-1], fences[i])
		}
	}
}

// TestRedlockRedisServerInstancesComeAndGo kills two of five instances at a
// time (SIGKILL: their data, fence counters included, is gone when they
// come back) in a rotation, and takes the lock with them down and again
// with them back: every grant succeeds and every fence is above the one
// before. Then three are killed: Lock fails within its deadline, with an
// error naming the missing quorum, and the two live instances hold no key
// of the attempts. It runs alone, not beside the fast lane's parallel
// tests: there, the pooled go-redis connections to a restarted instance
// (MaxRetries -1) answered EOF often enough that the release of a failed
// attempt on a live instance was still going on in the background when
// the test looked (seen in a local CI run).
func TestRedlockRedisServerInstancesComeAndGo(t *testing.T) {
	srvs := startServers(t, 5)
	rl, err := primitives.NewRedlock(clienttest.All(t, realBackends(t, srvs)), "job", primitives.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last int64
	take := func(when string) {
		t.Helper()
		l, err := rl.Lock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if l.Fence() <= last {
			t.Errorf("%s: fence %d after %d", when, l.Fence(), last)
		}
		last = l.Fence()
		err = l.Release(ctx)
		if errors.Is(err, primitives.ErrUnavailable) {
			// An instance did not answer (EOF: a connection from before a
			// kill, seen on go-redis without retries about once in 40
			// runs): the outcome is unknown, and Release says so; a
			// retried release must report success (it counts the
			// instances that released on the first try, which remember
			// nothing: TestRedlockRetriedReleaseCountsEarlierTries).
			t.Logf("%s: release of unknown outcome, retried: %v", when, err)
			err = l.Release(ctx)
		}
		if err != nil {
			t.Fatalf("%s: release: %v", when, err)
		}
	}
	take("all up")
	for _, pair := range [][2]int{{0, 1}, {2, 3}, {4, 0}, {1, 2}, {3, 4}} {
		when := fmt.Sprintf("instances %d and %d down", pair[0], pair[1])
		srvs[pair[0]].Kill()
		srvs[pair[1]].Kill()
		take(when)
		srvs[pair[0]].Restart(t)
		srvs[pair[1]].Restart(t)
		take(fmt.Sprintf("instances %d and %d back, empty", pair[0], pair[1]))
	}

	for _, i := range []int{0, 1, 2} {
		srvs[i].Kill()
	}
	const deadline = 1500 * time.Millisecond
	lctx, lcancel := context.WithTimeout(ctx, deadline)
	defer lcancel()
	start := time.Now()
	l, err := rl.Lock(lctx)
	took := time.Since(start)
	if err == nil {
		l.Release(ctx)
		t.Fatal("granted with 3 of 5 instances down")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("with 3 of 5 down: %v, want the deadline and ErrUnavailable", err)
	}
	if took > deadline+500*time.Millisecond {
		t.Errorf("Lock returned %v after its %v deadline", took-deadline, deadline)
	}
	t.Logf("with 3 of 5 down: %v after %v", err, took.Round(time.Millisecond))
	if _, err := rl.TryLock(ctx); errors.Is(err, latchkit.ErrNotAcquired) || err == nil {
		t.Errorf("TryLock with 3 of 5 down: %v, want an unavailability error, not 'held'", err)
	}
	for _, s := range srvs[3:] {
		if v, err := s.Do(ctx, "GET", "latch:{job}"); err != redis.Nil && (err != nil || keyspace.ParseLock(fmt.Sprint(v)).Owner != "") {
			t.Errorf("%s holds the lock after the failed attempts: %v %v", s.Addr, v, err)
		}
	}
}
