package primitives_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// pubsubConns counts the server's connections in pub/sub mode.
func pubsubConns(t *testing.T, admin *redis.Client) int {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(v, "P") {
				n++
			}
		}
	}
	return n
}

// TestScaleWaitersShareOneSubscription: 10,000 goroutines of one process
// wait on 1,000 Mutex names held by another client. Notifications use at
// most 2 connections (the bound; one is what the shared Hub opens),
// and once the holders release, every waiter gets its turn by hand-over,
// with mutual exclusion per name (a gauge of holders per name must never
// read above 1).
func TestScaleWaitersShareOneSubscription(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	const names, perName = 1000, 10
	s := redistest.Start(t)
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := newClient()
	holderB, waiterB := goredis.New(newClient()), goredis.New(newClient())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := []primitives.Option{primitives.WithAutoExtend(false), primitives.WithTTL(time.Minute), primitives.WithWaiterTimeout(time.Minute)}

	var held []func()
	for i := range names {
		m, err := primitives.NewMutex(clienttest.For(t, holderB), fmt.Sprintf("n%d", i), opts...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, func() {
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}

	inside := make([]atomic.Int32, names) // holders of each name right now
	var overlaps, done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range names * perName {
		i := g % names
		m, err := primitives.NewMutex(clienttest.For(t, waiterB), fmt.Sprintf("n%d", i), opts...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if inside[i].Add(1) != 1 {
				overlaps.Add(1)
			}
			time.Sleep(time.Microsecond)
			inside[i].Add(-1)
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
			done.Add(1)
		})
	}
	// Every waiter has queued in Redis.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var n int64
		for i := range names {
			q, err := admin.ZCard(ctx, keyspace.KeyBase("latch:", fmt.Sprintf("n%d", i))+":q").Result()
			if err != nil {
				t.Fatal(err)
			}
			n += q
		}
		if n == names*perName {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d waiters queued", n, names*perName)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d waiters on %d names queued in %v", names*perName, names, time.Since(start).Round(time.Millisecond))
	if n := pubsubConns(t, admin); n < 1 || n > 2 {
		t.Errorf("%d pub/sub connections for %d waiters in one process, want 1 or 2", n, names*perName)
	}

	start = time.Now()
	for _, release := range held {
		release()
	}
	wg.Wait()
	t.Logf("%d hand-overs in %v", done.Load(), time.Since(start).Round(time.Millisecond))
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times a holder found another holder of its name", n)
	}
	if n := done.Load(); n != names*perName {
		t.Fatalf("%d of %d waiters got their turn", n, names*perName)
	}
}
